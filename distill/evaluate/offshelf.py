"""Off-the-shelf drafts beside the distilled ones: is training worth it for this target?

An off-the-shelf draft is a model the user already has: one with another tokenizer than the target's (decoded through
its text, decode.drafting.translate) or one named in --drafts-extra (the pipeline's extras). It is measured like any
draft on the same prompts and baseline, never shipped or published (its entry says `trained: false`), and reported
apart: its shared vocabulary, the target tokens a draft step proposes, transformers' universal assisted generation
with the same pair, and the verdict below.
"""

from __future__ import annotations


def is_off_the_shelf(spec: str, draft_kind: str | None, extra: list[str]) -> bool:
    return spec in extra or draft_kind == "other_tokenizer"


def verdict(entries: list[dict]) -> dict | None:
    """The best distilled and the best off-the-shelf entry by measured speedup, and whether training paid: None unless
    the evaluation holds both kinds."""
    distilled = [e for e in entries if e.get("trained")]
    shelf = [e for e in entries if e.get("off_the_shelf")]
    if not distilled or not shelf:
        return None
    d, s = (max(x, key=lambda e: e["speedup"]) for x in (distilled, shelf))
    return {"training_worth_it": d["speedup"] > s["speedup"],
            "best_distilled": {"label": d["label"], "gamma": d["gamma"], "speedup": d["speedup"]},
            "best_off_the_shelf": {"label": s["label"], "gamma": s["gamma"], "speedup": s["speedup"],
                                   "kind": s.get("kind")},
            "speedup_ratio": round(d["speedup"] / s["speedup"], 4) if s["speedup"] else None}


def lines(result: dict) -> list[str]:
    """report.md's section on off-the-shelf drafts ([] without one)."""
    shelf = [e for e in result.get("entries", []) if e.get("off_the_shelf")]
    if not shelf:
        return []
    out = ["", "## Off-the-shelf drafts", "",
           "| draft | γ | shared ids | text coverage | target tokens a draft step | α | τ | speedup | transformers UAG tok/s | its tokens a target forward |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for e in shelf:
        o, hf = e.get("other_tokenizer") or {}, e.get("hf_assisted") or {}
        cov = f"{o['coverage']:.1%}" if "coverage" in o else "same tokenizer"
        out.append(f"| {e['label']} | {e['gamma']} | {o.get('shared_ids', '–')} | {cov} | "
                   f"{e['cost_model'].get('target_tokens_per_draft_step', 1.0)} | "
                   f"{e['speculative']['acceptance_rate']:.3f} | {e['speculative']['tau']:.2f} | {e['speedup']:.2f}× | "
                   f"{hf.get('tokens_per_s', '–')} | {hf.get('tokens_per_target_forward', '–')} |")
    v = verdict(result.get("entries", []))
    if v:
        d, s = v["best_distilled"], v["best_off_the_shelf"]
        out += ["", f"Is training worth it for this target? {'Yes' if v['training_worth_it'] else 'No'}: the best "
                f"distilled draft ({d['label']}, γ={d['gamma']}) measured {d['speedup']}× against {s['speedup']}× for "
                f"the best off-the-shelf one ({s['label']}, γ={s['gamma']})."]
    return out
