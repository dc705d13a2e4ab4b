"""PNG plots of an evaluation report (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from decode import costmodel  # noqa: E402


def by_step(entries: list[dict], path: Path) -> Path | None:
    """Acceptance rate and measured speedup against training step (checkpoints of one run)."""
    pts = sorted((e["step"], e["speculative"]["acceptance_rate"], e["speedup"], e["gamma"]) for e in entries
                 if e.get("step") is not None and not e.get("lookup"))  # the draft alone, comparable across steps
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for g in sorted({p[3] for p in pts}):
        s = [p for p in pts if p[3] == g]
        ax.plot([p[0] for p in s], [p[1] for p in s], "o-", label=f"α (γ={g})")
        ax.plot([p[0] for p in s], [p[2] for p in s], "s--", label=f"speedup (γ={g})")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("acceptance rate / speedup")
    ax.legend(fontsize=8)
    ax.set_title("acceptance and speedup by checkpoint")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def by_gamma(entries: list[dict], path: Path) -> Path | None:
    """Measured speedup against γ, one line per draft."""
    drafts = {}
    for e in entries:
        drafts.setdefault(e["label"], []).append((e["gamma"], e["speedup"]))
    if not drafts:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, pts in drafts.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("γ (draft tokens per round)")
    ax.set_ylabel("speedup over target alone")
    ax.legend(fontsize=7)
    ax.set_title("speedup against γ")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def design_map(entries: list[dict], path: Path) -> Path | None:
    """Each design placed by draft cost c and acceptance α, over the cost model's iso-speedup curves."""
    # placed at the per-token α the curves assume (cost_model.alpha_iid; older reports: accepted / proposed)
    pts = [(e["cost_model"]["c"], e["cost_model"].get("alpha_iid", e["speculative"]["acceptance_rate"]), e["label"], e)
           for e in entries if e.get("cost_model", {}).get("c") is not None]
    if not pts:
        return None
    ref = pts[0][3]["cost_model"]
    v = {int(g): x for g, x in ref["v"].items()}
    c_max = max(0.6, max(p[0] for p in pts) * 1.2)
    cs = [c_max * i / 100 for i in range(1, 101)]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for target_speedup in (0.8, 1.0, 1.2, 1.5, 2.0):
        # for each c, the smallest α reaching this speedup at its best γ
        alphas = []
        for c in cs:
            best = [a for g, vg in v.items() if (a := costmodel.alpha_for_speedup(target_speedup, g, c, vg)) is not None]
            alphas.append(min(best) if best else None)
        xs = [c for c, a in zip(cs, alphas) if a is not None]
        ys = [a for a in alphas if a is not None]
        if xs:
            ax.plot(xs, ys, lw=1, label=f"{target_speedup}×")
    for c, a, label, e in pts:
        ax.scatter([c], [a], zorder=3)
        ax.annotate(f"{label} γ={e['gamma']}: {e['speedup']}×", (c, a), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(0, c_max)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("c = draft step latency / target step latency (this device)")
    ax.set_ylabel("per-token acceptance α (i.i.d. estimate)")
    ax.set_title("design map: iso-speedup curves (cost model, best γ)")
    ax.legend(fontsize=7, title="predicted speedup", title_fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
