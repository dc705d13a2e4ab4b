"""Schedules against each other and against the target alone, in one run (issue 53's "never slower"): for one draft,
constant γ = 1..G and the adaptive schedule (and any other schedule named), each timed on the same prompts against
ONE target-alone baseline, interleaved prompt by prompt after a warm-up (decode.bench.measure.measure_many), with
speedups overall and by context-length bucket (decode.bench.results.context_bucket). No transformers anchors: the
ratios between our own schedules are the result.

    python scripts/bench_schedule.py --draft RUN/draft --prompts heldout --limit 24 --max-new-tokens 64 \
        --gammas 1 2 3 4 --schedules adaptive --lookup 2 --out runs/schedules-heldout.json
    python scripts/bench_schedule.py --draft RUN/draft --prompts long-heldout --min-tokens 4096 --hf ...  # 4K-8K only
    python scripts/bench_schedule.py --draft RUN/draft LONG_RUN/draft ...  # two drafts on one baseline
    python scripts/bench_schedule.py --draft LONG_RUN/draft --prompts heldout+long-heldout --limit 0 \
        --buckets "<512" 4K-8K --per-bucket 11 --draft-context 0 1024 ...  # short and 4K-8K prompts in one run

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
from decode.bench.results import context_bucket
from decode.models.targets import load_draft, load_target
from distill.prompts import load_prompts


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="default")
    p.add_argument("--draft", required=True, nargs="+", help="a draft folder (or anything --draft takes); several are "
                   "timed in the same run, each at every γ and schedule")
    p.add_argument("--prompts", default="heldout")
    p.add_argument("--limit", type=int, default=24, help="N prompts, taken in turn from each category (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4], help="constant γ values to time")
    p.add_argument("--schedules", nargs="*", default=["adaptive"], help="other schedules, each at max(--gammas) (none: give the flag alone)")
    p.add_argument("--lookup", type=int, default=0, help="context lookup for every run (the pipeline ships 2)")
    p.add_argument("--draft-weights", default="int8")
    p.add_argument("--draft-context", type=int, nargs="+", default=[0], help="the prompt's last N tokens the draft "
                   "reads (0 = all); several: each is timed")
    p.add_argument("--per-bucket", type=int, default=0, help="at most N prompts of each context-length bucket (taken "
                   "in turn from each category), e.g. with --prompts heldout+long-heldout --limit 0 --min-tokens 0")
    p.add_argument("--buckets", nargs="*", default=[], help="only these buckets (<512 512-2K 2K-4K 4K-8K)")
    p.add_argument("--min-tokens", type=int, default=0, help="only prompts of at least this many tokens (a bucket)")
    p.add_argument("--hf", action="store_true", help="also time transformers' generate (the target alone) and its "
                   "assisted generation at the first constant γ: the anchors, on the same prompts")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    torch.manual_seed(0)
    rows = load_prompts(a.prompts, limit=a.limit or (10 ** 9 if a.per_bucket else 0), spread=True)
    target, tok = load_target(a.target, "auto", "auto")
    runs = []
    for name in a.draft:
        draft = load_draft(name, target, tok, device=str(target.device))
        common = dict(target=a.target, draft=name, prompts=a.prompts, max_new_tokens=a.max_new_tokens,
                      lookup=a.lookup, draft_weights=a.draft_weights, hf_assisted=False)
        cfgs = [BenchConfig(gamma=g, schedule="constant", draft_context=w, **common)
                for w in a.draft_context for g in a.gammas]
        cfgs += [BenchConfig(gamma=max(a.gammas), schedule=s, draft_context=w, **common)
                 for w in a.draft_context for s in a.schedules]
        runs += [(draft, c, a.hf and not runs and i == 0) for i, c in enumerate(cfgs)]
    encoded = encode_all(rows, tok, a.max_new_tokens, target.config.max_position_embeddings)
    kept = _kept([len(ids) for ids in encoded], a.min_tokens, a.buckets, a.per_bucket)
    if not kept:
        sys.exit(f"error: no prompt of {a.prompts} has {a.min_tokens} tokens or more; lower --min-tokens")
    rows, encoded = [rows[i] for i in kept], [encoded[i] for i in kept]
    results = measure_many(target, tok, runs, rows, encoded, log=lambda m: print(m, file=sys.stderr))
    if a.out:  # first: a print below must not lose a long run
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    buckets = list(results[0]["per_context"])
    lengths = sorted(len(ids) for ids in encoded)
    print(f"{len(rows)} prompts of {a.prompts} ({lengths[0]}-{lengths[-1]} tokens), {a.max_new_tokens} new tokens, "
          f"lookup {a.lookup}; target alone {results[0]['baseline']['tokens_per_s']} tok/s")
    if results[0].get("hf_generate"):
        _print_anchor(results[0])
    _print_table(results, buckets)
    _print_costs(results, buckets)


def _kept(lengths: list[int], min_tokens: int, buckets: list[str], per_bucket: int) -> list[int]:
    """Indices of the prompts timed: at least min_tokens long, in `buckets` (all when empty), at most per_bucket of
    each bucket (0: no cap), in the order given."""
    taken: dict[str, int] = {}
    kept = []
    for i, n in enumerate(lengths):
        b = context_bucket(n)[4:]
        if n >= min_tokens and (not buckets or b in buckets) and (not per_bucket or taken.get(b, 0) < per_bucket):
            taken[b] = taken.get(b, 0) + 1
            kept.append(i)
    return kept


def _print_table(results: list[dict], buckets: list[str]) -> None:
    """One row per draft x schedule x γ: α, τ, speedup overall and by bucket, end to end and after the first token
    (decode: the prompt's forward left out, the draft's own prefill of it kept in); then each schedule against the
    best constant γ of its draft."""
    print("| draft | draft context | schedule | γ | α | τ | speedup | speedup after the first token | "
          + " | ".join(f"α {b} | speedup {b} | after 1st {b}" for b in buckets) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|---|---|" * len(buckets))
    for r in results:
        s, b = r["speculative"], r["baseline"]
        ctx = r["per_context"]
        by = " | ".join(f"{ctx[k]['acceptance_rate']:.3f} | {ctx[k]['speedup']:.3f}x | "
                        f"{_ratio(ctx[k]['speculative_decode_tokens_per_s'], ctx[k]['baseline_decode_tokens_per_s'])}"
                        for k in buckets)
        print(f"| {r['draft']} | {r['draft_context'] or 'all'} | {r['schedule']} | {r['gamma']} | {s['acceptance_rate']:.3f} | {s['tau']:.2f} | "
              f"{r['speedup']:.3f}x | {_ratio(s['decode_tokens_per_s'], b['decode_tokens_per_s'])} | {by} |")
    for draft, w in dict.fromkeys((r["draft"], r["draft_context"]) for r in results):
        mine = [r for r in results if (r["draft"], r["draft_context"]) == (draft, w)]
        best = max((r for r in mine if r["schedule"] == "constant"), key=lambda r: r["speedup"])
        for r in mine:
            if r["schedule"] != "constant":
                print(f"{draft} (draft context {w or 'all'}) {r['schedule']}: {r['speedup'] / best['speedup']:.3f} of the best constant γ "
                      f"({best['gamma']}), {r['speedup']:.3f}x the target alone")


def _print_costs(results: list[dict], buckets: list[str]) -> None:
    """The cost model at each bucket's length (decode.bench.context_cost), in target decoding steps, beside the
    measurement: where the time of a long prompt goes."""
    print("| draft | draft context | schedule | γ | bucket | t1 ms | v | draft a round | prompt: target | prompt: draft "
          "| predicted after 1st | measured after 1st | predicted | measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for k in buckets:
            row, m = r["per_context"][k], r["per_context"][k].get("cost_model")
            if not m:
                continue
            measured = _ratio(row["speculative_decode_tokens_per_s"], row["baseline_decode_tokens_per_s"])
            print(f"| {r['draft']} | {r['draft_context'] or 'all'} | {r['schedule']} | {r['gamma']} | {k} | "
                  f"{m['target_step_ms']} | {m['v']} | {m['draft_per_round']} | {m['target_prompt_steps']} | "
                  f"{m['draft_prompt_steps']} | {m['predicted_decode_speedup']:.3f}x | {measured} | "
                  f"{m['predicted_speedup'] or 0:.3f}x | {row['speedup']:.3f}x |")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}x" if b else "-"


def _print_anchor(r: dict) -> None:
    """The target alone, ours against transformers' generate: end to end, after the first token (the decoding rate
    at the prompt's length) and the prompt's forward (the time to the first token), all in the same run."""
    hf, ours, assisted = r["hf_generate"], r["baseline"], r.get("hf_assisted")
    print(f"target alone, ours against transformers' generate: {ours['tokens_per_s']} vs {hf['tokens_per_s']} tok/s end "
          f"to end ({ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x); after the first token "
          f"{ours['decode_tokens_per_s']} vs {hf['decode_tokens_per_s']} tok/s "
          f"({ours['decode_tokens_per_s'] / hf['decode_tokens_per_s']:.2f}x); to the first token {ours['prefill_seconds']} "
          f"vs {hf['prefill_seconds']} s in all ({hf['prefill_seconds'] / ours['prefill_seconds']:.2f}x)")
    print(f"transformers' assisted at γ {r['gamma']}: " + (f"{assisted['tokens_per_s']} tok/s" if assisted
                                                          else f"skipped: {r['hf_assisted_skipped']}"))


if __name__ == "__main__":
    main()
