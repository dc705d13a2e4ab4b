"""Training examples from a collected dataset, batched by length, in a fixed order that a resumed run repeats.

An example is prompt + response. The student reads prompt + response[:-1]; position len(prompt)-1+t predicts
response token t and is matched against the teacher's stored top-k row t. For a reduced-vocabulary draft,
teacher ids are mapped into draft ids (-1 where the draft has no such token; the loss puts that mass in the
tail bin), and input tokens outside the draft's vocabulary are read as draft id 0, as the decoder feeds them.
"""

from __future__ import annotations

import random
import warnings

import torch

from decode.draft_folder import VocabMap


def make_examples(ds, max_seq_len: int) -> list[dict]:
    """Rows -> examples of at most max_seq_len tokens: the prompt is cut from the left, and a response longer than
    max_seq_len - 1 keeps its first max_seq_len - 1 tokens (warned: the rest trains nothing). Label t and teacher
    row t are always the same response position."""
    examples, cut = [], 0
    for row in ds:
        resp = list(row["response_ids"])
        if not resp:
            continue
        cut += len(resp) > max_seq_len - 1
        resp = resp[: max_seq_len - 1]
        prompt = list(row["prompt_ids"])[-(max_seq_len - len(resp)):]
        first = 0  # response position of labels[0]
        if not prompt:
            prompt, resp, first = resp[:1], resp[1:], 1  # needs one token of context
            if not resp:
                continue
        rows = slice(first, first + len(resp))  # the teacher rows of exactly these labels
        examples.append({
            "input_ids": prompt + resp[:-1],
            "start": len(prompt) - 1,
            "labels": resp,
            "topk_ids": [list(r) for r in row["topk_ids"][rows]] if row["topk_ids"] else None,
            "topk_logprobs": [list(r) for r in row["topk_logprobs"][rows]] if row["topk_logprobs"] else None,
        })
    if cut:
        warnings.warn(f"{cut} of {len(ds)} responses are longer than max_seq_len - 1 and were cut to their first "
                      f"{max_seq_len - 1} tokens; raise --max-seq-len to train on all of them", stacklevel=2)
    return examples


def batch_order(lengths: list[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Batches of similar-length examples (little padding), in an order shuffled by (seed, epoch)."""
    rng = random.Random(seed * 100003 + epoch)
    idx = list(range(len(lengths)))
    rng.shuffle(idx)  # ties in length broken randomly per epoch
    idx.sort(key=lambda i: lengths[i])
    batches = [idx[i: i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(batches)
    return batches


def micro_batch(examples: list[dict], order_fn, step: int, accum: int, world: int, rank: int, micro: int) -> list[dict]:
    """The examples of micro-batch `micro` of optimizer step `step` on `rank` (same answer on every resume)."""
    g = (step * accum + micro) * world + rank
    epoch_batches = []
    epoch = 0
    while True:
        epoch_batches = order_fn(epoch)
        if g < len(epoch_batches):
            return [examples[i] for i in epoch_batches[g]]
        g -= len(epoch_batches)
        epoch += 1


def collate(batch: list[dict], vocab: VocabMap | None, pad_id: int = 0) -> dict:
    """Right-padded inputs plus flat (N = sum of response lengths) teacher targets.

    input_ids, attention_mask: (B, T), student-space ids; sel: (N,) flat indices into B*T of the predicting positions;
    topk_ids: (N, k) student-space ids (-1 = not in the draft vocabulary); topk_logprobs: (N, k);
    labels: (N,) student-space ids; target_top1: (N,) target ids the proxy compares against.
    """
    T = max(len(e["input_ids"]) for e in batch)
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.long)
    sel, labels, tk_ids, tk_lp = [], [], [], []
    for b, e in enumerate(batch):
        n_in = len(e["input_ids"])
        ids[b, :n_in] = torch.tensor(e["input_ids"])
        mask[b, :n_in] = 1
        sel.extend(b * T + e["start"] + t for t in range(len(e["labels"])))
        labels.extend(e["labels"])
        if e["topk_ids"] is not None:
            tk_ids.extend(e["topk_ids"])
            tk_lp.extend(e["topk_logprobs"])
    labels = torch.tensor(labels, dtype=torch.long)
    if vocab is not None:  # a reduced-vocabulary draft reads context outside its vocabulary as draft id 0, as decode/ does
        ids = vocab.inputs(ids)
    out = {"input_ids": ids, "attention_mask": mask, "sel": torch.tensor(sel, dtype=torch.long)}
    if tk_ids:
        teacher = torch.tensor(tk_ids, dtype=torch.long)
        out["topk_ids"] = vocab.teacher(teacher) if vocab is not None else teacher
        out["topk_logprobs"] = torch.tensor(tk_lp, dtype=torch.float32)
        out["target_top1"] = teacher[:, 0]
    else:
        out["target_top1"] = labels
    out["labels"] = vocab.teacher(labels) if vocab is not None else labels
    return out
