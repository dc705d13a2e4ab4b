"""The comparison's table: one row a draft, ours and the peer's, from the evaluations and what each training saw.

Per prompt set: α and τ of the draft alone (a chain at the evaluation's first γ, no context lookup: what the draft
itself proposes), and the best speedup over the evaluation's settings (trees, lookup) with the lossless verdict of
every setting. vLLM's α is from the first set, for each draft vLLM serves (a reduced-vocabulary standalone draft is
served only through publish's export: the reason is given instead).
"""

from __future__ import annotations

import json
from pathlib import Path

from distill.peers import ours

NAMES = {"standalone": "standalone", "feature_head": "feature head (EAGLE-3 style)", "parallel": "parallel (PARD style)"}
TIMES = {"standalone": "train_s", "feature_head": "train_head_s", "parallel": "train_parallel_s"}  # pipeline.json


def rows(run_dir: Path, mine: dict, peers: list[dict], proxies: dict, evals: dict, steps: int, our_tokens: int,
         tok) -> list[dict]:
    timings = _timings(run_dir)
    out = []
    for design, folder in ((d, mine[d]) for d in ours.RUNS if d in mine):
        cfg = ours.train_config(run_dir / ours.RUNS[design])
        n = ours.trained_steps(run_dir / ours.RUNS[design])
        tokens = our_tokens if design == "feature_head" else _tokens(cfg, tok, n)
        row = {"design": NAMES[design], "trainer": "specdistill", "draft": folder, "shipped": mine.get("shipped") == design,
               "steps": n, "tokens": tokens, "train_s": timings.get(TIMES[design]),
               "proxy": proxies.get(folder, _training_proxy(run_dir / ours.RUNS[design]))}
        out.append({**row, **_measured(folder, evals)})
    for p in peers:
        row = {"design": NAMES["feature_head"], "trainer": f"{p.get('trainer', 'speculators')} ({p['recipe']})",
               "draft": p.get("draft"), "shipped": False, "steps": p.get("steps"), "tokens": p.get("tokens"),
               "train_s": round(p["train_s"] + p["extract_s"], 1) if p.get("train_s") is not None else None,
               "proxy": proxies.get(p.get("draft")), "error": p.get("error")}
        out.append({**row, **(_measured(p["draft"], evals) if p.get("draft") else {})})
    return out


def _timings(run_dir: Path) -> dict:
    path = run_dir / "pipeline.json"
    return json.loads(path.read_text()).get("timings", {}) if path.is_file() else {}


def _tokens(cfg, tok, steps: int) -> int | None:
    train_ex, _ = ours.examples(cfg, tok)
    return ours.tokens_seen(cfg, train_ex, steps)


def _training_proxy(run_dir: Path) -> float | None:
    """The last eval/acceptance_proxy in a run's metrics.jsonl (what its training measured)."""
    found = None
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            found = json.loads(line).get("eval/acceptance_proxy", found)
        except (json.JSONDecodeError, AttributeError):
            continue
    return found


def _measured(folder: str, evals: dict) -> dict:
    """{set: {alpha, tau, speedup, lossless, best}} and vllm_alpha for one draft folder."""
    found, vllm = {}, None
    for name, result in evals.items():
        entries = [e for e in result.get("entries", []) if e["draft"] == folder]
        if not entries:
            found[name] = None
            continue
        g = min(e["gamma"] for e in entries)
        plain = next((e for e in entries if e["gamma"] == g and not e.get("lookup") and not e.get("tree_nodes")), None)
        best = max(entries, key=lambda e: e["speedup"])
        found[name] = {"alpha": plain and plain["speculative"]["acceptance_rate"], "tau": plain and plain["speculative"]["tau"],
                       "speedup": best["speedup"], "best": best["label"],
                       "lossless": all(e.get("lossless") is True for e in entries)}
        anchor = (result.get("anchors") or {}).get("vllm")
        if anchor and vllm is None:
            hit = next((d for d in anchor.get("drafts", []) if d.get("draft") == folder), None)
            vllm = (hit.get("acceptance_rate") if hit.get("acceptance_rate") is not None
                    else hit.get("not_servable") or hit.get("error")) if hit else anchor.get("error")
    return {"sets": found, "vllm_alpha": vllm}


def _cell(x, fmt="{:.3f}"):
    if x is None:
        return "—"
    return fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _vllm_cell(x) -> str:
    """vLLM's α, or why it has none: a reduced-vocabulary standalone draft is served through publish's export, which
    the table names in a few words (report.json keeps vLLM's whole reason)."""
    if isinstance(x, str) and x.startswith("not servable as is: a reduced-vocabulary"):
        return "not served as is (reduced vocabulary: publish's export is)"
    return _cell(x)


def markdown(result: dict) -> str:
    sets = list(result["evaluations"])
    head = ["design", "trainer", "tokens", "steps", "train wall", "held-out proxy"]
    for s in sets:
        head += [f"α {s}", f"τ {s}", f"speedup {s}"]
    head += ["lossless", "vLLM α"] if sets else []
    lines = [f"# Our drafts against speculators' trainer at equal data ({result['run']})", "",
             f"Command: `{result['command']}`", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        name = r["design"] + (" (shipped)" if r["shipped"] else "")
        cells = [name, r["trainer"], _cell(r["tokens"], "{:,}"), _cell(r["steps"], "{}"),
                 _cell(r["train_s"], "{:.0f} s"), _cell(r["proxy"])]
        measured = r.get("sets") or {}
        for s in sets:
            m = measured.get(s) or {}
            cells += [_cell(m.get("alpha")), _cell(m.get("tau"), "{:.2f}"), _cell(m.get("speedup"), "{:.3f}×")]
        lossless = [m.get("lossless") for m in measured.values() if m]
        cells += [_cell(all(lossless) if lossless else None), _vllm_cell(r.get("vllm_alpha"))] if sets else []
        if r.get("error"):
            cells = [name, r["trainer"]] + ["—"] * (len(head) - 3) + [f"failed: {r['error']}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "α, τ: the draft alone (a chain at the first γ, no context lookup); speedup: the best of the "
              "evaluation's settings (trees, lookup) over the target alone, same prompts, same process; lossless: "
              "every setting. Held-out proxy: teacher-forced top-1 agreement on the pipeline's held-out data (heads: "
              "the same function for ours and the peer's; standalone and parallel: their training's last). Train wall: "
              "the pipeline's stage time for ours (its feature extraction included); for the peer, its hidden-state "
              "extraction plus its trainer.", ""]
    lines += [f"- {s}: `{p}/report.md`" for s, p in result["evaluations"].items()]
    return "\n".join(lines) + "\n"
