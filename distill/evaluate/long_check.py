"""The drafts at long prompts (`--long-prompts long-heldout --long-limit N`): each design's best configuration from
the main run, timed again on N prompts of a long set against its own target-alone baseline, by context bucket.

The default pipeline trains on short prompts; this is how its drafts fare at 1K-7K tokens, and where their α
falls the report says to train with `--preset long` for such prompts. A prompt the target's context cannot hold
with its new tokens is left out with a note (the check is beside the main result, never in its way).
"""

from __future__ import annotations

import sys

from decode.bench.measure import measure_many
from decode.bench.results import draft_alpha, rounded
from decode.prompts import encode_prompt
from distill.evaluate.kinds import kind
from distill.prompts import load_prompts

ALPHA_KEPT = 0.9  # below this share of its short-prompt α on the long prompts, a draft is called short-prompt only


def chosen(entries: list[dict]) -> list[int]:
    """Indices of the fastest trained entry of each kind (standalone, feature head, parallel, ...)."""
    best: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.get("trained") and (kind(e) not in best or e["speedup"] > entries[best[kind(e)]]["speedup"]):
            best[kind(e)] = i
    return sorted(best.values())


def measure(cfg, target, tok, runs: list[tuple], entries: list[dict], notes: list[str]) -> dict | None:
    """The check's result for the report (None when off or nothing fits); runs: the main run's (draft, BenchConfig,
    hf) in the order of `entries`."""
    picks = chosen(entries) if cfg.long_prompts and cfg.long_limit else []
    if not picks:
        return None
    rows = load_prompts(cfg.long_prompts, limit=cfg.long_limit, spread=True)
    room = target.config.max_position_embeddings - cfg.max_new_tokens
    fit = [(r, ids) for r, ids in ((r, encode_prompt(tok, r)) for r in rows) if len(ids) <= room]
    if len(fit) < len(rows):
        notes.append(f"long check: {len(rows) - len(fit)} of {len(rows)} prompts of {cfg.long_prompts} do not fit the "
                     f"target's {target.config.max_position_embeddings} positions with {cfg.max_new_tokens} new "
                     "tokens, left out")
    if not fit:
        return None
    rows, encoded = [r for r, _ in fit], [ids for _, ids in fit]
    print(f"long check: {len(picks)} drafts on {len(rows)} prompts of {cfg.long_prompts} "
          f"({min(map(len, encoded))}-{max(map(len, encoded))} tokens)", file=sys.stderr, flush=True)
    again = [(runs[i][0], runs[i][1], False) for i in picks]
    results = measure_many(target, tok, again, rows, encoded, log=lambda m: print(m, file=sys.stderr, flush=True))
    return {"prompt_set": cfg.long_prompts, "prompts": len(rows), "buckets": list(results[0]["per_context"]),
            "entries": [_row(entries[i], r) for i, r in zip(picks, results)]}


def _row(short: dict, r: dict) -> dict:
    """One draft's long-prompt numbers beside its short-prompt ones from the main run."""
    s, b = r["speculative"], r["baseline"]
    # kept: the draft's own α over all the long prompts (lookup's proposals left out: at long prompts they copy from
    # the document and would hide a draft that lost its acceptance; a bucket of one prompt may hold no draft round)
    d_short, d_long = draft_alpha(short["speculative"]), draft_alpha(s)
    return {"label": short["label"], "kind": kind(short), "gamma": short["gamma"],
            "short": {"acceptance_rate": short["speculative"]["acceptance_rate"], "draft_acceptance_rate":
                      rounded(d_short), "speedup": short["speedup"]},
            "acceptance_rate": s["acceptance_rate"], "draft_acceptance_rate": rounded(d_long),
            "tau": s["tau"], "speedup": r["speedup"],
            "decode_speedup": round(s["decode_tokens_per_s"] / b["decode_tokens_per_s"], 4)
            if b["decode_tokens_per_s"] else None,
            # the time to the first token against the target alone's: the draft's own prompt forward is in it
            "first_token": round(s["prefill_seconds"] / b["prefill_seconds"], 4) if b["prefill_seconds"] else None,
            "alpha_kept": kept(d_long, d_short),
            "lossless": r.get("lossless"), "per_context": r["per_context"]}


def kept(d_long: float | None, d_short: float | None) -> float | None:
    """The draft's own α on the long prompts over its α on the main ones (None where either is unmeasured)."""
    return round(d_long / d_short, 4) if d_long is not None and d_short else None


def lines(result: dict) -> list[str]:
    """report.md's section; [] when the check did not run."""
    lc = result.get("long_check")
    if not lc:
        return []
    out = ["", f"## Long prompts: {lc['prompts']} of `{lc['prompt_set']}` ({', '.join(lc['buckets'])} tokens)", "",
           "Each design's best configuration above, timed again on these prompts against the target alone.", "",
           "α: all proposals (context lookup's too); draft α: the draft's own, and the share of it kept on these "
           "prompts against the main ones. First token: its time against the target alone's (the draft's own "
           "prompt forward is in it; on a CPU, `--draft-context 1024` shortens it).", "",
           "| draft | γ | α (short) | α (long) | draft α (short) | draft α (long) | draft α kept | "
           "speedup (short) | speedup (long) | after the first token | first token (time) | lossless |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in lc["entries"]:
        sh = e["short"]
        out.append(f"| {e['label']} | {e['gamma']} | {sh['acceptance_rate']:.3f} | {e['acceptance_rate']:.3f} | "
                   f"{_x(sh.get('draft_acceptance_rate'), 3)} | {_x(e.get('draft_acceptance_rate'), 3)} | "
                   f"{_x(e['alpha_kept'])} | {sh['speedup']:.2f}× | {e['speedup']:.2f}× | "
                   f"{_x(e['decode_speedup'])}× | {_x(e.get('first_token'))}× | {e['lossless']} |")
    lost = [e["label"] for e in lc["entries"] if e["alpha_kept"] is not None and e["alpha_kept"] < ALPHA_KEPT]
    if lost:
        out += ["", f"On these prompts {', '.join(lost)} keep{'s' if len(lost) == 1 else ''} less than "
                f"{ALPHA_KEPT:.0%} of {'its' if len(lost) == 1 else 'their'} short-prompt draft α: for long prompts, "
                "train with `--preset long` (whole prompts up to 8,192 tokens) and use that draft there."]
    return out


def headline(result: dict) -> str:
    """A second line for the evaluation's headline: the best draft at long prompts ('' without the check)."""
    lc, b = result.get("long_check"), result.get("best") or {}
    e = next((e for e in (lc or {}).get("entries", []) if e["label"] == b.get("label")), None)
    if e is None:
        return ""
    return (f"\nat long prompts ({lc['prompts']} of {lc['prompt_set']}, up to {lc['buckets'][-1]} tokens): α "
            f"{e['acceptance_rate']} (the draft's own: {_x(e['alpha_kept'])} of its short-prompt α), speedup "
            f"{e['speedup']}x, {_x(e['decode_speedup'])}x after the first token, the first token "
            f"{_x(e.get('first_token'))}x the target alone's time"
            + (": for such prompts train with --preset long" if (e["alpha_kept"] or 1) < ALPHA_KEPT else ""))


def _x(v, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, (int, float)) else "-"
