"""distill.train.speed's data: a synthetic collection written to disk in the collection's own format, read back by
training's own feed, so a timed step includes what a real one pays before the model: memory-mapped Arrow rows ->
collate (DataLoader workers on a GPU machine, a thread on the CPU) -> pinned memory -> the side-stream copy.

    rows      `count` sequences of prompt_len prompt tokens and up to response_len response tokens (lengths vary
              by up to 1/8 below, as length-bucketed batches do), ids below `vocab` (the draft's vocabulary: the
              ids train as they are, no vocabulary map), top-k teacher rows of distinct ids with descending
              float16 logprobs, one shard (shards.write_shard)
    features  for a feature head, a FeatureStore of `width` bf16 features a token (its memory-mapped file, as a
              run stores the target's), every example's rows cut from one random block (random numbers for 16k
              tokens x 12,288 features would take the host seconds)
    order     `batches` batches of `sequences` examples, cycled: StepBatches' order_fn
"""

from __future__ import annotations

from pathlib import Path

import torch

from distill.collect import shards
from distill.train import batches, head


def write_rows(out: Path, g: torch.Generator, count: int, prompt: int, response: int, vocab: int, topk: int) -> None:
    rows = []
    for i in range(count):
        n = response - int(torch.randint(0, max(1, response // 8), (1,), generator=g))
        top = (torch.randint(0, vocab, (n, 1), generator=g) + torch.arange(topk)) % vocab  # distinct in a row
        lp = torch.log_softmax(torch.randn(n, topk + 1, generator=g) * 2, -1).sort(-1, descending=True).values
        rows.append({"id": f"s{i}", "category": "synthetic", "source": "target",
                     "prompt_ids": torch.randint(0, vocab, (prompt,), generator=g).tolist(),
                     "response_ids": top[:, 0].tolist(), "topk_ids": top.tolist(),
                     "topk_logprobs": lp[:, :topk].half().tolist()})
    shards.write_shard(out, "r000-synthetic", rows, {"rank": 0, "rows": count, "tokens": 0, "seconds": 0.0})


def examples(out: Path, g: torch.Generator, count: int, prompt: int, response: int, vocab: int, topk: int,
             width: int = 0) -> batches.Examples:
    """The examples training reads from a synthetic collection written under `out` (module docstring); with
    `width`, each with its stored bf16 features."""
    write_rows(out / "data", g, count, prompt, response, vocab, topk)
    ex = batches.Examples.index(shards.load_collected(out / "data"), prompt + response)
    if width:
        store = head.FeatureStore(out / "features.bin", ex.lengths, width, "bfloat16")
        block = torch.randn(int(ex.lengths.max()), width, generator=g).bfloat16()
        for i, n in enumerate(ex.lengths):
            store.write(int(store.offsets[i]), block[:n])
        store.mark(len(ex))
        ex.features = store
    return ex


def order(count: int, sequences: int):
    """StepBatches' order_fn: the examples in `count // sequences` fixed batches of `sequences`, every epoch."""
    fixed = [list(range(b * sequences, (b + 1) * sequences)) for b in range(count // sequences)]
    return lambda epoch: fixed
