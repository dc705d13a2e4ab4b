"""Training batches for a parallel draft (--parallel K, distill/train/parallel.py): one packed sequence per example.

An example (batches.Examples: prompt + response[:-1], position start + j predicting response token r_j) is packed
as its real tokens followed by mask tokens at K-1 levels (PARD's layout):

    [x_0 .. x_{T-1} | level 1: a mask for each anchor in A_1 | level 2: one for each anchor in A_2 | ...]

The mask of anchor j at level k sits at rotary position start + j + k, sees the real tokens up to the anchor
(x_0 .. x_{start+j}) and the anchor's masks at levels 1..k, and is trained on r_{j+k} against teacher row j + k,
with the losses of the chain (the stored top-k there): exactly what decoding asks of mask k after the last real
token. Level 0 is the chain draft's own training on every response position (A_0 = every j).

Conditional drop bounds the cost: A_k is a random subset of A_{k-1} (those whose r_{j+k} exists) of
ceil(keep x its size), nested so that every mask's lower levels are there for it to attend to. An example of T
tokens and n response tokens then packs at most T + n (keep + keep^2 + ...) + K - 1 <= T + n keep / (1 - keep) + K
tokens (2T + K at keep 0.5), however large K is, and trains at most as many positions. The subsets come from a
generator seeded by (seed, step, micro-batch, rank), so a resumed run packs the same batches.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from decode.models.draft_folder import VocabMap
from distill.train import batches

PAD_LEVEL = -1  # level (and anchor) of padding: it sees itself only


def anchor_levels(n: int, block: int, keep: float, rng: np.random.Generator) -> list[np.ndarray]:
    """[A_1, .., A_{block-1}]: each the sorted response positions j whose mask is packed at that level (A_0, every
    j in 0..n-1, is the real tokens'). A_k is ceil(keep x |eligible|) of the eligible anchors of A_{k-1} (those
    with j + k <= n - 1), drawn without replacement."""
    levels, prev = [], np.arange(n)
    for k in range(1, block):
        eligible = prev[prev + k <= n - 1]
        take = math.ceil(keep * len(eligible))
        prev = np.sort(rng.choice(eligible, size=take, replace=False)) if take else eligible[:0]
        levels.append(prev)
    return levels


def pack(example: dict, block: int, keep: float, rng: np.random.Generator, mask: int) -> dict:
    """One example -> its packed sequence (numpy; ids in the example's own space, the mask as `mask`):
    input_ids, position_ids, anchor (the packed index of the real token each row reads up to), level (L,); the
    trained rows: sel (N,) packed indices, sel_level (N,), sel_prev (N,) the row in sel of the same anchor's
    level k-1 (-1 at level 0), teacher (N,) the response position whose label and teacher row each trains on."""
    ids = np.asarray(example["input_ids"], dtype=np.int64)
    T, n, start = len(ids), len(example["labels"]), int(example["start"])
    j0 = np.arange(n)
    parts_ids, pos, anchor, level = [ids], [np.arange(T)], [np.arange(T)], [np.zeros(T, np.int64)]
    sel, sel_level, teacher = [start + j0], [np.zeros(n, np.int64)], [j0]
    prev_row = [np.full(n, -1)]
    index_in_sel = {(0, int(j)): int(j) for j in j0}  # (level, anchor j) -> its row in sel, for sel_prev
    offset, count = T, n
    for k, a in enumerate(anchor_levels(n, block, keep, rng), start=1):
        m = len(a)
        parts_ids.append(np.full(m, mask, np.int64))
        pos.append(start + a + k)
        anchor.append(start + a)
        level.append(np.full(m, k, np.int64))
        sel.append(offset + np.arange(m))
        sel_level.append(np.full(m, k, np.int64))
        teacher.append(a + k)
        prev_row.append(np.array([index_in_sel[(k - 1, int(j))] for j in a], np.int64))
        index_in_sel.update({(k, int(j)): count + i for i, j in enumerate(a)})
        offset, count = offset + m, count + m
    cat = np.concatenate
    return {"input_ids": cat(parts_ids), "position_ids": cat(pos), "anchor": cat(anchor), "level": cat(level),
            "sel": cat(sel), "sel_level": cat(sel_level), "sel_prev": cat(prev_row), "teacher": cat(teacher)}


def collate(examples: list[dict], vocab: VocabMap | None, block: int, keep: float, rng: np.random.Generator,
            mask: int) -> dict:
    """batches.collate's batch for packed examples (B, L right-padded): input_ids (draft ids, masks as `mask`),
    attention_mask (B, L) 1 on real and mask rows, position_ids, anchor, level (B, L; padding: anchor and level
    PAD_LEVEL); sel (N,) flat indices into B*L; sel_level, sel_prev (N,) (sel_prev flat into N); topk_ids,
    topk_logprobs, labels, target_top1 as batches.collate gives them, per trained row. A teacher id that is the
    mask's own reserved target id is dropped to -1 (the rest bin): the draft never proposes its mask."""
    packed = [pack(e, block, keep, rng, -1) for e in examples]  # -1 marks the mask rows until mapped below
    B, L = len(packed), max(len(p["input_ids"]) for p in packed)
    out = {name: np.full((B, L), fill, np.int64) for name, fill in
           (("input_ids", 0), ("position_ids", 0), ("anchor", PAD_LEVEL), ("level", PAD_LEVEL))}
    sel, sel_level, sel_prev, rows, base = [], [], [], [], 0
    for b, p in enumerate(packed):
        n = len(p["input_ids"])
        for name in out:
            out[name][b, :n] = p[name]
        sel.append(b * L + p["sel"])
        sel_level.append(p["sel_level"])
        sel_prev.append(np.where(p["sel_prev"] >= 0, p["sel_prev"] + base, -1))
        rows.append(p["teacher"])
        base += len(p["sel"])
    ids = torch.from_numpy(out["input_ids"])
    is_mask = ids < 0
    ids = vocab.inputs(ids.clamp(min=0)) if vocab is not None else ids.clamp(min=0)
    out["input_ids"] = ids.masked_fill(is_mask, mask)
    batch = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in out.items()}
    batch["attention_mask"] = (batch["level"] >= 0).long()
    batch.update(sel=torch.from_numpy(np.concatenate(sel)), sel_level=torch.from_numpy(np.concatenate(sel_level)),
                 sel_prev=torch.from_numpy(np.concatenate(sel_prev)))
    batch.update(teacher_rows(examples, rows, vocab, mask))
    return batch


def teacher_rows(examples: list[dict], rows: list[np.ndarray], vocab: VocabMap | None, mask: int) -> dict:
    """labels, target_top1 (N,), topk_ids, topk_logprobs (N, k) of the trained rows: example b's response positions
    rows[b], in draft ids (-1 outside the draft's vocabulary, and for the mask's reserved id)."""
    labels = torch.from_numpy(np.concatenate([np.asarray(e["labels"], np.int64)[r] for e, r in zip(examples, rows)]))
    out = {"target_top1": labels}
    if all(e["topk_ids"] is not None for e in examples):
        ids = torch.from_numpy(np.concatenate([np.asarray(e["topk_ids"], np.int64)[r] for e, r in zip(examples, rows)]))
        lps = np.concatenate([np.asarray(e["topk_logprobs"], np.float16)[r] for e, r in zip(examples, rows)])
        out["topk_ids"] = _drop_mask(vocab.teacher(ids) if vocab is not None else ids, mask)
        out["topk_logprobs"] = torch.from_numpy(lps)
        out["target_top1"] = ids[:, 0]
    out["labels"] = _drop_mask(vocab.teacher(labels) if vocab is not None else labels, mask)
    return out


def _drop_mask(ids: torch.Tensor, mask: int) -> torch.Tensor:
    return ids.masked_fill(ids == mask, -1)


def visible(anchor: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
    """(B, L) anchor and level of each packed row -> (B, L, L) bool, True where query row t may attend key row s:
    s a real row at or before t's anchor, or s a mask row of t's anchor at a level <= t's, or s = t (padding)."""
    L = anchor.shape[1]
    idx = torch.arange(L, device=anchor.device)
    real_key = (level == 0)[:, None, :]
    reads = real_key & (idx[None, None, :] <= anchor[:, :, None])
    same = (anchor[:, :, None] == anchor[:, None, :]) & (level[:, None, :] > 0) & (level[:, None, :] <= level[:, :, None])
    return reads | same | torch.eye(L, dtype=torch.bool, device=anchor.device)[None]


class StepBatches(batches.StepBatches):
    """batches.StepBatches with packed examples: micro-batch i's anchor subsets are drawn from a generator seeded by
    (seed, step, micro-batch, rank), a pure function of i like the rest of the batch."""

    def __init__(self, *args, block: int, keep: float, mask: int, seed: int, **kw):
        super().__init__(*args, **kw)
        self.block, self.keep, self.mask, self.seed = block, keep, mask, seed

    def __getitem__(self, i: int) -> dict:
        step, micro = divmod(i, self.accum)
        idx = batches.batch_indices(self.order_fn, self.first_step + step, self.accum, self.world, self.rank, micro)
        rng = np.random.default_rng((self.seed, self.first_step + step, micro, self.rank))
        return collate(self.examples.take(idx), self.vocab, self.block, self.keep, rng, self.mask)
