"""The drafts at long prompts (`--long-prompts long-heldout --long-unfamiliar long-ood --long-limit N`): each design's
best configuration from the main run, timed again as the decoder runs it by default (`--long-schedule`) on N
prompts of each long set, against its own target-alone baseline, by context bucket.

The default pipeline trains on short prompts; this is how its drafts fare at 1K-7K tokens, and where their α
falls the report says to train with `--preset long` for such prompts. Two sets: `long-heldout`, the held-out part
of the bundled long set (documents like those the long preset trains on), and `long-ood`, long documents from
other sources (distill/data/long_ood), so that the report's long-prompt line is not the optimistic one.

Before timing, each standalone or parallel draft's window of the prompt is chosen by cost on the first set
(decode/bench/window_cost.py: the acceptance it keeps at each window against its step and read there) and stored
with the draft (specdistill.json's `draft_context`; `--long-window false` leaves the draft folder alone), so both
timings already run with it. A prompt the target's context cannot hold with its new tokens is left out with a note
(the check is beside the main result, never in its way).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from decode.bench import window_cost
from decode.bench.config import is_head
from decode.bench.measure import measure_many
from decode.bench.results import draft_alpha, rounded
from decode.drafting.prompt_read import trained_length
from decode.drafting.speculative import generate
from decode.models import draft_folder
from decode.models.targets import eos_ids
from decode.options import DecodeOptions
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
    hf) in the order of `entries`. Its first set's fields at the top (as before the second set), the second's under
    `unfamiliar`, the windows stored under `windows`."""
    picks = chosen(entries) if cfg.long_prompts and cfg.long_limit else []
    if not picks:
        return None
    first = _fit(cfg, cfg.long_prompts, target, tok, notes)
    if first is None:
        return None
    windows = _windows(cfg, target, tok, [runs[i] for i in picks], [entries[i] for i in picks], *first, notes) \
        if cfg.long_window else {}
    again = [(runs[i][0], replace(runs[i][1], schedule=cfg.long_schedule), False) for i in picks]
    out = {**_timed(cfg.long_prompts, target, tok, again, [entries[i] for i in picks], *first), "windows": windows}
    second = _fit(cfg, cfg.long_unfamiliar, target, tok, notes) if cfg.long_unfamiliar else None
    if second is not None:
        out["unfamiliar"] = _timed(cfg.long_unfamiliar, target, tok, again, [entries[i] for i in picks], *second)
    return out


def _fit(cfg, spec: str, target, tok, notes: list[str]) -> tuple[list[dict], list[list[int]]] | None:
    """(rows, encoded) of `spec`'s first --long-limit prompts (in turn from each category) that fit the target."""
    rows = load_prompts(spec, limit=cfg.long_limit, spread=True)
    room = target.config.max_position_embeddings - cfg.max_new_tokens
    fit = [(r, ids) for r, ids in ((r, encode_prompt(tok, r)) for r in rows) if len(ids) <= room]
    if len(fit) < len(rows):
        notes.append(f"long check: {len(rows) - len(fit)} of {len(rows)} prompts of {spec} do not fit the "
                     f"target's {target.config.max_position_embeddings} positions with {cfg.max_new_tokens} new "
                     "tokens, left out")
    return ([r for r, _ in fit], [ids for _, ids in fit]) if fit else None


def _timed(spec: str, target, tok, again: list[tuple], short: list[dict], rows, encoded) -> dict:
    print(f"long check: {len(again)} drafts on {len(rows)} prompts of {spec} "
          f"({min(map(len, encoded))}-{max(map(len, encoded))} tokens)", file=sys.stderr, flush=True)
    # no warm-up pass: the main measurement warmed these drafts and the target up in this process, and on these
    # prompts that pass would cost as much as a timed one
    results = measure_many(target, tok, again, rows, encoded, log=lambda m: print(m, file=sys.stderr, flush=True),
                           warm_up=False)
    return {"prompt_set": spec, "prompts": len(rows), "schedule": again[0][1].schedule,
            "buckets": list(results[0]["per_context"]), "entries": [_row(e, r) for e, r in zip(short, results)]}


def _windows(cfg, target, tok, picks: list[tuple], short: list[dict], rows, encoded, notes) -> dict:
    """{label: the window record} for each standalone or parallel draft folder, chosen on these prompts from the
    target's own greedy outputs (decode/bench/window_cost.py) and stored with the draft."""
    todo = [(draft, bcfg, e) for (draft, bcfg, _), e in zip(picks, short)
            if not is_head(draft) and draft.other is None and draft_folder.read_meta(bcfg.draft)]
    if not todo:
        return {}
    print(f"long check: the prompt window of {len(todo)} drafts, on {len(rows)} prompts of {cfg.long_prompts}",
          file=sys.stderr, flush=True)
    alone = DecodeOptions(temperature=cfg.temperature)
    outputs = [generate(target, None, ids, cfg.max_new_tokens, alone, eos_token_ids=eos_ids(target, tok))[0]
               for ids in encoded]
    found = {}
    for draft, bcfg, e in todo:
        record = window_cost.choose(draft, target, encoded, outputs, bcfg.gamma, cfg.max_new_tokens,
                                    bcfg.draft_weights, trained_length(draft.model)[0])
        record["prompt_set"] = cfg.long_prompts
        draft_folder.store_window(bcfg.draft, record)
        found[e["label"]] = record
        notes.append(f"long check: {e['label']} reads the prompt's last {record['window']} tokens at long prompts "
                     f"(stored in {bcfg.draft}/{draft_folder.META_FILE}; predicted "
                     f"{record['windows'][str(record['window'])]['predicted_after_first_token']}x after the first "
                     "token)")
    return found


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
            # the time to the first token against the target alone's (the draft reads its window later, if at all)
            "first_token": round(s["prefill_seconds"] / b["prefill_seconds"], 4) if b["prefill_seconds"] else None,
            "draft_window": s.get("draft_window"), "alpha_kept": kept(d_long, d_short),
            "lossless": r.get("lossless"), "per_context": r["per_context"]}


def kept(d_long: float | None, d_short: float | None) -> float | None:
    """The draft's own α on the long prompts over its α on the main ones (None where either is unmeasured)."""
    return round(d_long / d_short, 4) if d_long is not None and d_short else None


def lines(result: dict) -> list[str]:
    """report.md's section; [] when the check did not run."""
    lc = result.get("long_check")
    if not lc:
        return []
    out = []
    for part in [lc] + ([lc["unfamiliar"]] if lc.get("unfamiliar") else []):
        out += _table(part)
    for label, w in (lc.get("windows") or {}).items():
        out += ["", f"{label} reads the prompt's last **{w['window']}** tokens at long prompts (stored with it): "
                + ", ".join(f"{n}: agreement {x['agreement']:.3f}, read {x['read_ms']:.0f} ms, predicted "
                            f"{x['predicted_after_first_token']:.3f}×" for n, x in w["windows"].items())
                + f" (t1 {w['target_step_ms']:.1f} ms at {w['prompt_tokens'][0]}-{w['prompt_tokens'][1]} tokens)."]
    entries = lc["entries"] + (lc.get("unfamiliar") or {}).get("entries", [])
    lost = sorted({e["label"] for e in entries if e["alpha_kept"] is not None and e["alpha_kept"] < ALPHA_KEPT})
    if lost:
        out += ["", f"On these prompts {', '.join(lost)} keep{'s' if len(lost) == 1 else ''} less than "
                f"{ALPHA_KEPT:.0%} of {'its' if len(lost) == 1 else 'their'} short-prompt draft α: for long prompts, "
                "train with `--preset long` (whole prompts up to 8,192 tokens) and use that draft there."]
    return out


def _table(part: dict) -> list[str]:
    out = ["", f"## Long prompts: {part['prompts']} of `{part['prompt_set']}` ({', '.join(part['buckets'])} tokens)", "",
           f"Each design's best configuration above, timed again on these prompts against the target alone, with the "
           f"{part.get('schedule', 'constant')} schedule.", "",
           "α: all proposals (context lookup's too); draft α: the draft's own, and the share of it kept on these "
           "prompts against the main ones. First token: its time against the target alone's (the draft reads its "
           "window of the prompt at its first drafted round, after it).", "",
           "| draft | γ | α (short) | α (long) | draft α (short) | draft α (long) | draft α kept | "
           "speedup (short) | speedup (long) | after the first token | first token (time) | lossless |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in part["entries"]:
        sh = e["short"]
        out.append(f"| {e['label']} | {e['gamma']} | {sh['acceptance_rate']:.3f} | {e['acceptance_rate']:.3f} | "
                   f"{_x(sh.get('draft_acceptance_rate'), 3)} | {_x(e.get('draft_acceptance_rate'), 3)} | "
                   f"{_x(e['alpha_kept'])} | {sh['speedup']:.2f}× | {e['speedup']:.2f}× | "
                   f"{_x(e['decode_speedup'])}× | {_x(e.get('first_token'))}× | {e['lossless']} |")
    return out


def headline(result: dict) -> str:
    """A second line for the evaluation's headline: the best draft at long prompts, on the unfamiliar set where the
    check timed one ('' without the check)."""
    lc, b = result.get("long_check"), result.get("best") or {}
    part = (lc or {}).get("unfamiliar") or lc
    e = next((e for e in (part or {}).get("entries", []) if e["label"] == b.get("label")), None)
    if e is None:
        return ""
    return (f"\nat long prompts ({part['prompts']} of {part['prompt_set']}, up to {part['buckets'][-1]} tokens): α "
            f"{e['acceptance_rate']} (the draft's own: {_x(e['alpha_kept'])} of its short-prompt α), speedup "
            f"{e['speedup']}x, {_x(e['decode_speedup'])}x after the first token, the first token "
            f"{_x(e.get('first_token'))}x the target alone's time"
            + (": for such prompts train with --preset long" if (e["alpha_kept"] or 1) < ALPHA_KEPT else ""))


def _x(v, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, (int, float)) else "-"
