"""How fast the training feed is without a model: collate (batches.collate over rows read from the collection on
disk) + host-to-device copy, over a collected dataset, in the order training reads it (batches.batch_order).

    python -m distill.train.feed_bench --data runs/pipeline-default/collect [--batch-size 8] [--feature-width 4096]

Two passes over the same micro-batches: the collection as a standalone draft reads it (token ids, top-k ids and
logprobs), then the same with synthetic bf16 head features of --feature-width per input token, as a feature head
is fed (its stored features, (T_i, F) 2-byte per example). tokens/s counts input tokens (prompt + response
positions read, padding excluded); the response positions trained are printed beside it. The last line holds both
rates. The feed runs in one thread here (no prefetch), so the rate is what one collating process sustains.
"""

from __future__ import annotations

import argparse
import time

import torch

from distill.collect.shards import collect_info, load_collected
from distill.train import batches
from distill.train.data import PROMPT_TOKENS


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_feed(examples: batches.Examples, order: list[list[int]], device: torch.device, features: torch.Tensor | None,
             warmup: int = 2) -> dict:
    """Collate + copy every micro-batch of `order` -> {"seconds", "tokens", "trained", "batches"} (the first `warmup`
    batches are run but not timed). `features`: one (T_max, F) buffer whose leading rows stand in for each example's
    stored features."""
    tokens = trained = 0
    start = None
    for i, idx in enumerate(order):
        if i == warmup or (start is None and i == len(order) - 1):
            _sync(device)
            start, tokens, trained = time.perf_counter(), 0, 0
        ex = examples.take(idx)
        if features is not None:
            for e in ex:
                e["features"] = features[: len(e["input_ids"])]
        b = batches.collate(ex, None)
        moved = {k: v.to(device, non_blocking=True) for k, v in b.items()}
        tokens += int(sum(len(e["input_ids"]) for e in ex))
        trained += len(b["sel"])
        del moved
    _sync(device)
    seconds = time.perf_counter() - start if start is not None else 0.0
    return {"seconds": seconds, "tokens": tokens, "trained": trained, "batches": len(order)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m distill.train.feed_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a collection folder (the output of python -m distill.collect)")
    ap.add_argument("--batch-size", type=int, default=8, help="sequences a micro-batch (the training default)")
    ap.add_argument("--batch-tokens", type=int, default=0, help="padded tokens a micro-batch instead (0 = --batch-size)")
    ap.add_argument("--max-seq-len", type=int, default=0, help="0 = the collection's max_new_tokens + 512, as training")
    ap.add_argument("--batches", type=int, default=200, help="micro-batches timed, the epoch repeated as needed (0 = one epoch)")
    ap.add_argument("--feature-width", type=int, default=4096, help="width of the synthetic bf16 head features")
    ap.add_argument("--device", default="auto", help="auto (cuda if there is one), cpu, cuda, cuda:1, ...")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    ds = load_collected(args.data)
    settings = collect_info(args.data).get("settings") or {}
    max_seq_len = args.max_seq_len or ((settings.get("max_new_tokens") or int(batches.row_lengths(ds)[1].max(initial=0)))
                                       + PROMPT_TOKENS)
    examples = batches.Examples.index(ds, max_seq_len)
    order = batches.batch_order(examples.lengths.tolist(), args.batch_size, args.seed, 0, args.batch_tokens)
    if args.batches:
        order = (order * (args.batches // max(1, len(order)) + 1))[: args.batches]
    device = _device(args.device)
    longest = int(examples.lengths.max(initial=1))
    gen = torch.Generator().manual_seed(args.seed)
    feats = torch.randn(longest, args.feature_width, generator=gen).to(torch.bfloat16)

    plain = run_feed(examples, order, device, None)
    print(f"collection: {plain['tokens'] / max(plain['seconds'], 1e-9):,.0f} tokens/s", flush=True)
    head = run_feed(examples, order, device, feats)
    rate = {name: r["tokens"] / r["seconds"] if r["seconds"] > 0 else float("inf")
            for name, r in (("collection", plain), ("features", head))}
    for name, r in (("collection", plain), ("features", head)):
        size = f"<= {args.batch_tokens} tokens" if args.batch_tokens else args.batch_size
        print(f"{name}: {r['batches']} micro-batches of {size}, {r['tokens']} input tokens "
              f"({r['trained']} trained) in {r['seconds']:.3f} s on {device}")
    print(f"feed_bench: {rate['collection']:,.0f} tokens/s for {args.data}; "
          f"{rate['features']:,.0f} tokens/s with {args.feature_width}-wide bf16 head features")
    return {"collection": plain, "features": head, "tokens_per_s": rate, "device": str(device)}


if __name__ == "__main__":
    main()
