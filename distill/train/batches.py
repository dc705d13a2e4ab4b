"""Training examples from a collected dataset, batched by length, in a fixed order that a resumed run repeats.

An example is prompt + response. The student reads prompt + response[:-1]; position len(prompt)-1+t predicts
response token t and is matched against the teacher's stored top-k row t. For a reduced-vocabulary draft,
teacher ids are mapped into draft ids (-1 where the draft has no such token; the loss puts that mass in the
tail bin), and input tokens outside the draft's vocabulary are read as draft id 0, as the decoder feeds them.

Training reads the collected (memory-mapped Arrow) dataset in place: `Examples` holds only each example's row
and lengths for every row, and reads a micro-batch's rows (top-k included) when that micro-batch is collated.
`feed` collates a run's micro-batches ahead of the loop, off the main thread, in the same fixed order.
"""

from __future__ import annotations

import queue
import random
import threading
import warnings

import numpy as np
import torch

from decode.models.draft_folder import VocabMap

COLUMNS = ("prompt_ids", "response_ids", "topk_ids", "topk_logprobs")
LENGTH_BATCH = 65536  # rows whose lengths are read at a time (only their list offsets are touched)


def cut(prompt_len: np.ndarray, resp_len: np.ndarray, max_seq_len: int):
    """The cut rule on lengths, for (E,) int arrays -> keep, p, first, n, each (E,).

    The response keeps its first max_seq_len - 1 tokens, the prompt its last p tokens (cut from the left). With no
    prompt the first response token is the context (first = 1). An example reads prompt[-p:] + resp[:first+n-1]
    and is trained on labels resp[first:first+n] against teacher rows first..first+n-1; keep is False for rows
    with nothing to train.
    """
    r = np.minimum(resp_len, max_seq_len - 1)
    p = np.minimum(prompt_len, max_seq_len - r)
    first = (p == 0).astype(np.int64)
    n = r - first
    return (resp_len > 0) & (n > 0), p, first, n


def _slice(prompt, resp, topk_ids, topk_logprobs, p: int, first: int, n: int) -> dict:
    """One example from a row's sequences (lists or numpy arrays) and its cut (see `cut`)."""
    has_teacher = topk_ids is not None and len(topk_ids) > 0
    rows = slice(first, first + n)  # the teacher rows of exactly these labels
    return {
        "input_ids": prompt[len(prompt) - p:] + resp[: first + n - 1] if isinstance(resp, list)
        else np.concatenate([prompt[len(prompt) - p:], resp[: first + n - 1]]),
        "start": p + first - 1,
        "labels": resp[rows],
        "topk_ids": topk_ids[rows] if has_teacher else None,
        "topk_logprobs": topk_logprobs[rows] if has_teacher else None,
    }


def _warn_cut(resp_len: np.ndarray, rows: int, max_seq_len: int) -> None:
    cut_rows = int((resp_len > max_seq_len - 1).sum())
    if cut_rows:
        warnings.warn(f"{cut_rows} of {rows} responses are longer than max_seq_len - 1 and were cut to their first "
                      f"{max_seq_len - 1} tokens; raise --max-seq-len to train on all of them", stacklevel=3)


def make_examples(ds, max_seq_len: int) -> list[dict]:
    """Rows -> examples (Python lists) of at most max_seq_len tokens, by the rule of `cut` (a cut response is
    warned: the rest trains nothing). Label t and teacher row t are always the same response position.
    For a few rows (probes); training reads a whole dataset through `Examples`."""
    rows = list(ds)
    P = np.array([len(r["prompt_ids"]) for r in rows], dtype=np.int64)
    R = np.array([len(r["response_ids"]) for r in rows], dtype=np.int64)
    keep, p, first, n = cut(P, R, max_seq_len)
    examples = []
    for i in np.flatnonzero(keep):
        row = rows[i]
        tk_ids, tk_lp = row.get("topk_ids"), row.get("topk_logprobs")
        ex = _slice(list(row["prompt_ids"]), list(row["response_ids"]), tk_ids, tk_lp, int(p[i]), int(first[i]), int(n[i]))
        if ex["topk_ids"] is not None:
            ex["topk_ids"], ex["topk_logprobs"] = [list(r) for r in ex["topk_ids"]], [list(r) for r in ex["topk_logprobs"]]
        examples.append(ex)
    _warn_cut(R, len(rows), max_seq_len)
    return examples


class Examples:
    """Examples over a collected `datasets.Dataset` left on disk (memory-mapped Arrow).

    Held for every example: row (E,) int64 its row in ds, and its cut p, first, n (E,) (see `cut`): ~20 bytes an
    example. take() reads just the rows asked for.
    """

    def __init__(self, ds, row: np.ndarray, p: np.ndarray, first: np.ndarray, n: np.ndarray):
        self.ds, self.row, self.p, self.first, self.n = ds, row, p, first, n
        self.features = None  # a feature head's stored features (distill/train/head.FeatureStore), example by example
        self._arrow = ds.select_columns([c for c in COLUMNS if c in ds.column_names]).with_format("arrow")

    @classmethod
    def index(cls, ds, max_seq_len: int) -> Examples:
        """Every row of ds with a response to train on, cut to max_seq_len (a cut response is warned)."""
        P, R = row_lengths(ds)
        keep, p, first, n = cut(P, R, max_seq_len)
        _warn_cut(R, len(ds), max_seq_len)
        row = np.flatnonzero(keep)
        return cls(ds, row, p[row].astype(np.int32), first[row].astype(np.int8), n[row].astype(np.int32))

    def __len__(self) -> int:
        return len(self.row)

    @property
    def lengths(self) -> np.ndarray:
        """(E,) input tokens of each example (prompt + response[:-1] as cut)."""
        return self.p.astype(np.int64) + self.first + self.n - 1

    def subset(self, idx) -> Examples:
        """These examples, in the order of idx (E',) positions."""
        idx = np.asarray(idx, dtype=np.int64)
        return Examples(self.ds, self.row[idx], self.p[idx], self.first[idx], self.n[idx])

    def take(self, idx) -> list[dict]:
        """Examples idx as dicts of numpy arrays (input_ids (T,), labels (n,), topk_* (n, k) or None), read from
        disk now: only these rows' data is materialised."""
        idx = [int(i) for i in idx]
        table = self._arrow[[int(self.row[i]) for i in idx]]  # pyarrow.Table of these rows
        cols = {name: _per_row(table.column(name)) for name in table.column_names}
        tk_ids, tk_lp = cols.get("topk_ids", [None] * len(idx)), cols.get("topk_logprobs", [None] * len(idx))
        out = [_slice(cols["prompt_ids"][j], cols["response_ids"][j], tk_ids[j], tk_lp[j],
                      int(self.p[i]), int(self.first[i]), int(self.n[i])) for j, i in enumerate(idx)]
        if self.features is not None:
            for e, i in zip(out, idx):
                e["features"] = self.features[i]  # (T_i, F) float16
        return out


class TokenRows:
    """prompt + response token ids of each collected row, read from disk when asked (never all held in Python):
    what the draft's build measures on the data (token frequencies, a few sequences).

        len(rows); rows[:n] -> the first n rows as lists; rows.counts(V) -> (V',) int64 token frequencies, V' >= V
    """

    CHUNK = 4096  # rows read at a time for counting

    def __init__(self, ds):
        self._t = ds.select_columns(["prompt_ids", "response_ids"]).with_format("arrow")
        self._n = len(ds)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, s: slice) -> list[list[int]]:
        t = self._t[s]
        return [p + r for p, r in zip(t.column("prompt_ids").to_pylist(), t.column("response_ids").to_pylist())]

    def counts(self, vocab_size: int) -> np.ndarray:
        total = np.zeros(vocab_size, np.int64)
        for start in range(0, self._n, self.CHUNK):
            t = self._t[start: start + self.CHUNK]
            for name in ("prompt_ids", "response_ids"):
                ids = t.column(name).combine_chunks().flatten().to_numpy()
                c = np.bincount(ids, minlength=len(total))
                total = np.pad(total, (0, len(c) - len(total))) + c
        return total


def row_lengths(ds) -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths (R,), response lengths (R,)) of every row, read LENGTH_BATCH rows at a time from the list
    offsets (no token is read into Python)."""
    import pyarrow.compute as pc

    lens = ds.select_columns(["prompt_ids", "response_ids"]).with_format("arrow")
    P, R = [], []
    for start in range(0, len(ds), LENGTH_BATCH):
        t = lens[start: start + LENGTH_BATCH]
        P.append(pc.list_value_length(t.column("prompt_ids")).fill_null(0).to_numpy())
        R.append(pc.list_value_length(t.column("response_ids")).fill_null(0).to_numpy())
    if not P:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(P).astype(np.int64), np.concatenate(R).astype(np.int64)


def _per_row(col) -> list[np.ndarray]:
    """A list column (B rows) as one numpy array per row: (len,) for list<int>, (len, k) for list<list<...>>."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks()
    bounds = np.cumsum(pc.list_value_length(arr).fill_null(0).to_numpy())[:-1]
    flat = pc.list_flatten(arr)
    if pa.types.is_list(flat.type) or pa.types.is_large_list(flat.type):  # top-k rows: (positions, k)
        widths = pc.list_value_length(flat).to_numpy(zero_copy_only=False)
        k = int(widths[0]) if len(widths) else 0
        if len(widths) and (widths != k).any():
            raise ValueError(f"top-k rows of different widths ({sorted(set(widths.tolist()))}) in one dataset")
        values = pc.list_flatten(flat).to_numpy(zero_copy_only=False).reshape(-1, k)
    else:
        values = flat.to_numpy(zero_copy_only=False)
    return np.split(values, bounds)


def batch_order(lengths: list[int], batch_size: int, seed: int, epoch: int, batch_tokens: int = 0) -> list[list[int]]:
    """Batches of similar-length examples (little padding), in an order shuffled by (seed, epoch): batch_size
    examples each, or with batch_tokens > 0 as many as fit in batch_tokens padded tokens (examples x the longest
    of them; at least one), so short examples go in large batches and long ones in small (length bucketing)."""
    rng = random.Random(seed * 100003 + epoch)
    idx = list(range(len(lengths)))
    rng.shuffle(idx)  # ties in length broken randomly per epoch
    idx.sort(key=lambda i: lengths[i])
    if batch_tokens > 0:
        batches, current = [], []
        for i in idx:  # ascending lengths: the newest example is the longest of its batch
            if current and (len(current) + 1) * lengths[i] > batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        batches += [current] if current else []
    else:
        batches = [idx[i: i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(batches)
    return batches


def batch_indices(order_fn, step: int, accum: int, world: int, rank: int, micro: int) -> list[int]:
    """The example indices of micro-batch `micro` of optimizer step `step` on `rank` (same answer on every resume)."""
    g = (step * accum + micro) * world + rank
    epoch = 0
    while True:
        epoch_batches = order_fn(epoch)
        if g < len(epoch_batches):
            return epoch_batches[g]
        g -= len(epoch_batches)
        epoch += 1


def micro_batch(examples: list[dict], order_fn, step: int, accum: int, world: int, rank: int, micro: int) -> list[dict]:
    """The examples of micro-batch `micro` of optimizer step `step` on `rank`, from a list of examples."""
    return [examples[i] for i in batch_indices(order_fn, step, accum, world, rank, micro)]


def collate(batch: list[dict], vocab: VocabMap | None, pad_id: int = 0, map_inputs: bool = True) -> dict:
    """Right-padded inputs plus flat (N = sum of response lengths) teacher targets. Examples may hold lists or
    numpy arrays; the teacher's rows are used when every example has them.

    input_ids, attention_mask: (B, T), student-space ids; sel: (N,) flat indices into B*T of the predicting positions;
    topk_ids: (N, k) student-space ids (-1 = not in the draft vocabulary); topk_logprobs: (N, k) float16, as stored
    (the collection's schema; the loss computes in float32 on the device);
    labels: (N,) student-space ids; target_top1: (N,) target ids the proxy compares against.
    map_inputs=False keeps input_ids in target ids (a feature head reads them through the target's embedding);
    examples with features (a feature head's stored ones, (T_i, F) numpy or torch) give features (B, T, F) in their
    own dtype (2-byte stays 2-byte: the head casts on the device), zero-padded.
    Padding is vectorised: one scatter of all the examples' tokens, not a copy per example.
    """
    B = len(batch)
    lens = np.fromiter((len(e["input_ids"]) for e in batch), dtype=np.int64, count=B)
    T = int(lens.max())
    valid = np.arange(T)[None, :] < lens[:, None]  # (B, T): right-padded, so row-major order = concatenation order
    ids = np.full((B, T), pad_id, dtype=np.int64)
    ids[valid] = np.concatenate([np.asarray(e["input_ids"], dtype=np.int64) for e in batch])
    n = np.fromiter((len(e["labels"]) for e in batch), dtype=np.int64, count=B)
    starts = np.fromiter((e["start"] for e in batch), dtype=np.int64, count=B) + np.arange(B) * T
    offsets = np.cumsum(n) - n  # where each example's labels begin in the flat N
    sel = np.repeat(starts - offsets, n) + np.arange(int(n.sum()))
    labels = torch.from_numpy(np.concatenate([np.asarray(e["labels"], dtype=np.int64) for e in batch]))
    ids = torch.from_numpy(ids)
    if vocab is not None and map_inputs:  # a reduced-vocabulary draft reads context outside its vocabulary as draft id 0, as decode/ does
        ids = vocab.inputs(ids)
    out = {"input_ids": ids, "attention_mask": torch.from_numpy(valid.astype(np.int64)), "sel": torch.from_numpy(sel)}
    if all(e.get("features") is not None for e in batch):
        out["features"] = padded_features([torch.as_tensor(e["features"]) for e in batch], T)
    if all(e["topk_ids"] is not None for e in batch):
        teacher = torch.from_numpy(np.concatenate([np.asarray(e["topk_ids"], dtype=np.int64) for e in batch]))
        out["topk_ids"] = vocab.teacher(teacher) if vocab is not None else teacher
        # float16 as collected (exact); losses.coarsen computes in float32 on the device
        out["topk_logprobs"] = torch.from_numpy(np.concatenate([np.asarray(e["topk_logprobs"], dtype=np.float16)
                                                                for e in batch]))
        out["target_top1"] = teacher[:, 0]
    else:
        out["target_top1"] = labels
    out["labels"] = vocab.teacher(labels) if vocab is not None else labels
    return out


def padded_features(rows: list[torch.Tensor], T: int) -> torch.Tensor:
    """[(T_i, F)] -> (B, T, F) zero-padded on the right, in the rows' dtype (2-byte stays 2-byte). Inside a
    DataLoader worker the batch is made in shared memory (as torch's default_collate does), so sending it to the
    loop's process moves a handle, not the bytes."""
    B, F, dtype = len(rows), rows[0].shape[1], rows[0].dtype
    if torch.utils.data.get_worker_info() is not None:
        storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(B * T * F, device="cpu")
        feats = torch.empty(0, dtype=dtype).new(storage).view(B, T, F)
    else:
        feats = torch.empty((B, T, F), dtype=dtype)
    for b, r in enumerate(rows):
        feats[b, :len(r)] = r
        feats[b, len(r):] = 0
    return feats


# --- feeding the loop ---------------------------------------------------------------------------------------


class StepBatches(torch.utils.data.Dataset):
    """Micro-batch i of a run from first_step on (step first_step + i // accum, micro i % accum), collated:
    a pure function of i, so a resumed run (or any worker) builds exactly the same batches."""

    def __init__(self, examples: Examples, order_fn, vocab: VocabMap | None, first_step: int, steps: int,
                 accum: int, world: int, rank: int, map_inputs: bool = True):
        self.examples, self.order_fn, self.vocab, self.map_inputs = examples, order_fn, vocab, map_inputs
        self.first_step, self.steps, self.accum, self.world, self.rank = first_step, steps, accum, world, rank

    def __len__(self) -> int:
        return max(0, self.steps - self.first_step) * self.accum

    def __getitem__(self, i: int) -> dict:
        step, micro = divmod(i, self.accum)
        idx = batch_indices(self.order_fn, self.first_step + step, self.accum, self.world, self.rank, micro)
        return collate(self.examples.take(idx), self.vocab, map_inputs=self.map_inputs)


def feed(batches: StepBatches, workers: int, depth: int = 4):
    """An iterator over batches in order, collated ahead: by `workers` DataLoader processes, or by one background
    thread when workers == 0; in pinned memory on a CUDA machine (device_feed copies them asynchronously). Call
    close() on it when done (stops the thread or the worker processes)."""
    if workers == 0:
        pin = torch.cuda.is_available()
        return Prefetch(({k: v.pin_memory() for k, v in batches[i].items()} if pin else batches[i]
                         for i in range(len(batches))), depth)
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False, num_workers=workers,
                                         prefetch_factor=depth, pin_memory=torch.cuda.is_available())
    return _Closing(iter(loader))


class _Closing:
    """A DataLoader iterator with close() (shuts its worker processes down now, not at garbage collection)."""

    def __init__(self, it):
        self.it = it

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it)

    def close(self) -> None:
        shutdown = getattr(self.it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


class Prefetch:
    """Iterates `source` on a daemon thread, up to `depth` items ahead; an exception there is raised here."""

    _END = object()

    def __init__(self, source, depth: int):
        self._q: queue.Queue = queue.Queue(depth)
        self._stop, self._done = threading.Event(), False
        self._thread = threading.Thread(target=self._run, args=(source,), daemon=True, name="batch-prefetch")
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, source) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
            self._put(self._END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put(e)

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._q.get()
        if item is self._END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
