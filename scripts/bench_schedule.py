"""Schedules against each other and against the target alone, in one run (issue 53's "never slower"): for one draft,
constant γ = 1..G and the adaptive schedule (and any other schedule named), each timed on the same prompts against
ONE target-alone baseline, interleaved prompt by prompt after a warm-up (decode.bench.measure.measure_many), with
speedups overall and by context-length bucket (decode.bench.results.context_bucket). No transformers anchors: the
ratios between our own schedules are the result.

    python scripts/bench_schedule.py --draft RUN/draft --prompts heldout --limit 24 --max-new-tokens 64 \
        --gammas 1 2 3 4 --schedules adaptive --lookup 2 --out runs/schedules-heldout.json
    python scripts/bench_schedule.py --draft RUN/draft --prompts long-heldout --min-tokens 4096 --hf ...  # 4K-8K only

--prompts takes the bundled sets by name (heldout, long-heldout, ood) or a JSONL file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from decode.bench.config import BenchConfig
from decode.bench.measure import encode_all, measure_many
from decode.models.targets import load_draft, load_target
from distill.prompts import load_prompts


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="default")
    p.add_argument("--draft", required=True, help="a draft folder (or anything --draft takes)")
    p.add_argument("--prompts", default="heldout")
    p.add_argument("--limit", type=int, default=24, help="N prompts, taken in turn from each category (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4], help="constant γ values to time")
    p.add_argument("--schedules", nargs="*", default=["adaptive"], help="other schedules, each at max(--gammas) (none: give the flag alone)")
    p.add_argument("--lookup", type=int, default=0, help="context lookup for every run (the pipeline ships 2)")
    p.add_argument("--draft-weights", default="int8")
    p.add_argument("--min-tokens", type=int, default=0, help="only prompts of at least this many tokens (a bucket)")
    p.add_argument("--hf", action="store_true", help="also time transformers' generate (the target alone) and its "
                   "assisted generation at the first constant γ: the anchors, on the same prompts")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    torch.manual_seed(0)
    rows = load_prompts(a.prompts, limit=a.limit, spread=True)
    target, tok = load_target(a.target, "auto", "auto")
    draft = load_draft(a.draft, target, tok, device=str(target.device))
    common = dict(target=a.target, draft=a.draft, prompts=a.prompts, max_new_tokens=a.max_new_tokens,
                  lookup=a.lookup, draft_weights=a.draft_weights, hf_assisted=False)
    cfgs = [BenchConfig(gamma=g, **common) for g in a.gammas]
    cfgs += [BenchConfig(gamma=max(a.gammas), schedule=s, **common) for s in a.schedules]
    encoded = encode_all(rows, tok, a.max_new_tokens, target.config.max_position_embeddings)
    kept = [i for i, ids in enumerate(encoded) if len(ids) >= a.min_tokens]
    if not kept:
        sys.exit(f"error: no prompt of {a.prompts} has {a.min_tokens} tokens or more; lower --min-tokens")
    rows, encoded = [rows[i] for i in kept], [encoded[i] for i in kept]
    runs = [(draft, c, a.hf and i == 0) for i, c in enumerate(cfgs)]
    results = measure_many(target, tok, runs, rows, encoded, log=lambda m: print(m, file=sys.stderr))
    if a.out:  # first: a print below must not lose a long run
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    buckets = list(results[0]["per_context"])
    lengths = sorted(len(ids) for ids in encoded)
    print(f"{len(rows)} prompts of {a.prompts} ({lengths[0]}-{lengths[-1]} tokens), {a.max_new_tokens} new tokens, "
          f"draft {a.draft}, lookup {a.lookup}; target alone {results[0]['baseline']['tokens_per_s']} tok/s")
    if results[0].get("hf_generate"):
        hf, assisted = results[0]["hf_generate"]["tokens_per_s"], results[0].get("hf_assisted")
        print(f"transformers' generate (target alone): {hf} tok/s; ours {results[0]['baseline']['tokens_per_s'] / hf:.2f}x "
              "that; transformers' assisted at γ " + (f"{results[0]['gamma']}: {assisted['tokens_per_s']} tok/s" if assisted
                                                      else f"skipped: {results[0]['hf_assisted_skipped']}"))
    print("| schedule | γ | α | τ | speedup | " + " | ".join(f"speedup {b}" for b in buckets) + " |")
    print("|---|---|---|---|---|" + "---|" * len(buckets))
    for r in results:
        s = r["speculative"]
        by = " | ".join(f"{r['per_context'][b]['speedup']:.3f}x" for b in buckets)
        print(f"| {r['schedule']} | {r['gamma']} | {s['acceptance_rate']:.3f} | {s['tau']:.2f} | {r['speedup']:.3f}x "
              f"| {by} |")
    best = max((r for r in results if r["schedule"] == "constant"), key=lambda r: r["speedup"])
    for r in results:
        if r["schedule"] != "constant":
            print(f"{r['schedule']}: {r['speedup'] / best['speedup']:.3f} of the best constant γ ({best['gamma']}), "
                  f"{r['speedup']:.3f}x the target alone")


if __name__ == "__main__":
    main()
