"""Acceptance by position: of the rounds whose first k-1 proposals the target accepted, the share that accepted the
k-th too (decode.bench.costmodel.depth_acceptance of a run's accept histogram). A chain draft's k-th proposal reads
the k-1 drafted before it; a parallel draft's reads a mask k-1 places past its last real token, so its acceptance
falls faster with the position: the table in report.md and acceptance_by_position.png show how fast.

Entries with context lookup are left out (their histogram mixes lookup rounds in).
"""

from __future__ import annotations

from pathlib import Path

from decode.bench import costmodel
from distill.evaluate.kinds import kind

PLOT_FILE = "acceptance_by_position.png"


def rows(entries: list[dict]) -> list[dict]:
    """[{"label", "kind", "gamma", "tree_nodes", "alphas": [α_1, α_2, ...]}] for entries without lookup that
    proposed at least one token, in report order."""
    out = []
    for e in entries:
        s = e["speculative"]
        if e.get("lookup") or not s.get("proposed"):
            continue
        alphas = costmodel.depth_acceptance(s["accept_histogram"])
        out.append({"label": e["label"], "kind": kind(e), "gamma": e["gamma"], "tree_nodes": e.get("tree_nodes", 0),
                    "alphas": [round(a, 3) for a in alphas]})
    return out


def has_parallel(entries: list[dict]) -> bool:
    return any(kind(e) == "parallel" for e in entries)


def table(entries: list[dict]) -> list[str]:
    """report.md lines: one row per entry (rows()), a column per position; [] when no parallel draft was measured."""
    rs = rows(entries)
    if not rs or not has_parallel(entries):
        return []
    width = max(len(r["alphas"]) for r in rs)
    head = "| draft | kind | γ | " + " | ".join(f"α_{k}" for k in range(1, width + 1)) + " |"
    lines = ["", "## Acceptance by position", "",
             "Of the rounds that accepted proposals 1..k-1, the share that accepted proposal k too (draft rounds "
             "only: entries with context lookup are left out). A parallel draft's proposal k reads a mask k-1 "
             "places past its last real token.", "", head, "|---|---|---|" + "---|" * width]
    for r in rs:
        cells = [f"{a:.3f}" for a in r["alphas"]] + ["–"] * (width - len(r["alphas"]))
        tree = f" (tree {r['tree_nodes']})" if r["tree_nodes"] else ""
        lines.append(f"| {r['label']} | {r['kind']}{tree} | {r['gamma']} | " + " | ".join(cells) + " |")
    return lines


def plot(result: dict, path: Path) -> Path | None:
    """α_k against k, one line per entry of rows(); None without a parallel draft."""
    from distill.evaluate import plots

    rs = rows(result["entries"])
    if not rs or not has_parallel(result["entries"]):
        return None
    fig, ax = plots.plt.subplots(figsize=(6.4, 3.8))
    for i, r in enumerate(rs):
        col = plots.POINT_COLOURS[i % len(plots.POINT_COLOURS)]
        style = "-s" if r["kind"] == "parallel" else "--o"
        tree = f", tree {r['tree_nodes']}" if r["tree_nodes"] else ""
        ax.plot(range(1, len(r["alphas"]) + 1), r["alphas"], style, color=col, lw=1, ms=4,
                label=f"{r['label']} ({r['kind']}, γ={r['gamma']}{tree})")
    ax.set_ylim(0, 1)
    ax.set_xlabel("position k in the round")
    ax.set_ylabel("P(accept k | accepted 1..k-1)")
    ax.set_title("acceptance by position (squares: parallel drafts)")
    ax.legend(fontsize=6)
    return plots._save(fig, path)
