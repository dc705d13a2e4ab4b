"""PNG plots of an evaluation report (matplotlib, headless). Each plot draws from a data function above it
(proxy_curve / step_points, gamma_curves, map_points / iso_curves), which the tests check instead of pixels.

The pipeline evaluates one checkpoint at one γ, so each plot brings what a single measurement cannot show: the
training run's proxy curve beside the measured α, the cost model's speedup over γ = 1..8 through the measured
point, and iso-speedup curves at the measured γ in the same α the table shows.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from decode.bench import costmodel  # noqa: E402
from distill.evaluate.kinds import kind  # noqa: E402

GAMMAS = range(1, 9)  # the γ the speedup curve covers: v is measured at 1..6 and 8 (decode.bench), 7 interpolated
ISO_SPEEDUPS = (0.8, 1.0, 1.2, 1.5, 2.0)
ISO_COLOURS = ("0.75", "0.6", "0.45", "0.3", "0.15")  # greys: the curves are the background
POINT_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                 "tab:cyan")  # no grey among them: a point never looks like a curve


def _plain(e: dict) -> bool:
    """The draft alone: no context lookup, a chain (comparable across steps and γ)."""
    return not e.get("lookup") and not e.get("tree_nodes")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- acceptance by training step
def proxy_curve(result: dict) -> list[tuple[int, float]]:
    """(step, eval/acceptance_proxy) of the training run, as distill.evaluate stored it from RUN/metrics.jsonl."""
    return [(int(s), float(a)) for s, a in result.get("training_proxy") or []]


def step_points(entries: list[dict]) -> list[tuple[int, float, float, float, int]]:
    """(step, α as in the table, per-token α i.i.d., speedup, γ) of each evaluated checkpoint, the draft alone."""
    return sorted((e["step"], e["speculative"]["acceptance_rate"], e["cost_model"].get("alpha_iid", e["speculative"]
                   ["acceptance_rate"]), e["speedup"], e["gamma"]) for e in entries if e.get("step") is not None and _plain(e))


def by_step(result: dict, path: Path) -> Path | None:
    """The training run's acceptance proxy by step, with each evaluated checkpoint's measured α (and speedup)."""
    proxy, pts = proxy_curve(result), step_points(result["entries"])
    if not proxy and not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    if proxy:
        ax.plot([p[0] for p in proxy], [p[1] for p in proxy], "-", color="0.4", label="training proxy (top-1 agreement)")
    for i, g in enumerate(sorted({p[4] for p in pts})):
        s, col = [p for p in pts if p[4] == g], POINT_COLOURS[i % len(POINT_COLOURS)]
        ax.plot([p[0] for p in s], [p[2] for p in s], "o", color=col, label=f"measured per-token α, i.i.d. (γ={g})")
        ax.plot([p[0] for p in s], [p[1] for p in s], "x", color=col, label=f"measured α, table (γ={g})")
        for p in s:
            ax.annotate(f"{p[3]:.2f}×", (p[0], p[2]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_ylim(0, 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("acceptance")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("acceptance by step (labels: measured speedup)")
    return _save(fig, path)


# --- speedup against γ
def gamma_curves(entries: list[dict]) -> list[dict]:
    """Per draft: the cost model's speedup at γ = 1..8 from its measured per-token α, c and v(γ) (v at unmeasured
    γ: costmodel.v_at), and its measured points. Entries with lookup, a token tree or a parallel draft are points
    only (the prediction needs their round mix, measured at their γ alone).
    -> [{"label", "predicted": [(γ, speedup)] or [], "measured": [(γ, speedup)]}]"""
    out: dict[str, dict] = {}
    for e in entries:
        d = out.setdefault(e["label"], {"label": e["label"], "entries": [], "measured": []})
        d["entries"].append(e)
        d["measured"].append((e["gamma"], e["speedup"]))
    for d in out.values():
        es = [e for e in d.pop("entries") if _plain(e) and e.get("schedule", "constant") == "constant"
              and not (e.get("cost_model") or {}).get("parallel")]  # a parallel draft's round is not the chain's
        d["measured"].sort()
        d["predicted"] = []
        if es and all((e.get("cost_model") or {}).get("c") is not None for e in es):
            alpha = sum(e["cost_model"]["alpha_iid"] for e in es) / len(es)
            c = sum(e["cost_model"]["c"] for e in es) / len(es)
            v = {int(g): x for g, x in es[0]["cost_model"]["v"].items()}
            d["predicted"] = [(g, round(costmodel.speedup(alpha, g, c, costmodel.v_at(v, g)), 4)) for g in GAMMAS]
    return list(out.values())


def by_gamma(result: dict, path: Path) -> Path | None:
    """Predicted speedup over γ (lines) through the measured speedups (markers), one colour per draft."""
    curves = gamma_curves(result["entries"])
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, d in enumerate(curves):
        col = POINT_COLOURS[i % len(POINT_COLOURS)]
        if d["predicted"]:
            ax.plot([p[0] for p in d["predicted"]], [p[1] for p in d["predicted"]], "-", color=col, lw=1,
                    label=f"{d['label']}: predicted")
        ax.plot([p[0] for p in d["measured"]], [p[1] for p in d["measured"]], "o" if d["predicted"] else "D",
                color=col, label=f"{d['label']}: measured")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(GAMMAS))
    ax.set_xlabel("γ (draft tokens per round)")
    ax.set_ylabel("speedup over target alone")
    ax.legend(fontsize=6)
    ax.set_title("speedup against γ: cost model from measured α, c, v(γ)")
    return _save(fig, path)


# --- design map
# a draft's design kind (report.json entry "kind") as a marker: feature heads and standalone drafts side by side
KIND_MARKERS = {"standalone": "o", "feature_head": "^"}
KIND_TAGS = {"standalone": "", "feature_head": " [feature head]"}


def map_points(entries: list[dict]) -> list[dict]:
    """Numbered points: {"n", "c", "alpha" (the table's α: accepted / proposed), "text", "colour", "kind",
    "marker"}: a circle for a standalone draft, a triangle for a feature head (the legend text says so too)."""
    pts = [e for e in entries if (e.get("cost_model") or {}).get("c") is not None]
    return [{"n": i + 1, "c": e["cost_model"]["c"], "alpha": e["speculative"]["acceptance_rate"],
             "text": f"{i + 1}: {e['label']}{KIND_TAGS.get(k, f' [{k}]')} γ={e['gamma']}, {e['speedup']}×",
             "colour": POINT_COLOURS[i % len(POINT_COLOURS)], "kind": k, "marker": KIND_MARKERS.get(k, "s")}
            for i, (e, k) in enumerate((e, kind(e)) for e in pts)]


def table_alpha(alpha_iid: float, gamma: int) -> float:
    """accepted / proposed expected at γ for per-token α (i.i.d.): (τ − 1) / γ; the table's α at that γ."""
    return (costmodel.tau(alpha_iid, gamma) - 1) / gamma


def iso_curves(entries: list[dict], c_max: float, n: int = 100) -> tuple[int, list[tuple[float, list, list, str]]]:
    """(γ, [(speedup, cs, αs, colour)]): for each c, the smallest table α that reaches the speedup at the γ the
    entries ran (the first entry's γ when they differ), with the first entry's v(γ)."""
    ref = next(e for e in entries if (e.get("cost_model") or {}).get("c") is not None)
    g = ref["gamma"]
    vg = costmodel.v_at({int(k): x for k, x in ref["cost_model"]["v"].items()}, g)
    out = []
    for s, col in zip(ISO_SPEEDUPS, ISO_COLOURS):
        xy = [(c, a) for c in (c_max * i / n for i in range(1, n + 1))
              if (a := costmodel.alpha_for_speedup(s, g, c, vg)) is not None]
        if xy:
            out.append((s, [x for x, _ in xy], [table_alpha(a, g) for _, a in xy], col))
    return g, out


def spread(ys: list[float], gap: float) -> list[float]:
    """Label heights near ys, in the same order, at least `gap` apart (nudged upward in sorted order)."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out, last = list(ys), None
    for i in order:
        if last is not None and out[i] < last + gap:
            out[i] = last + gap
        last = out[i]
    return out


def design_map(result: dict, path: Path) -> Path | None:
    """Each design placed by draft cost c and the table's α, numbered (legend: label, γ, measured speedup), over
    the cost model's iso-speedup curves at the measured γ; feature heads as triangles, standalone drafts as circles."""
    pts = map_points(result["entries"])
    if not pts:
        return None
    # drafts sit at small c (a few % of the target): 2.5x the largest keeps them apart and still shows the trade-off
    c_max = max(0.2, max(p["c"] for p in pts) * 2.5)
    g, curves = iso_curves(result["entries"], c_max)
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    for s, xs, ys, col in curves:
        ax.plot(xs, ys, "--", lw=1, color=col)
        inside = [j for j, y in enumerate(ys) if y <= 0.97]  # none: the whole curve lies in the plot's top edge
        if inside:  # (a slow target step on a busy machine makes every speedup cheap), so it gets no label
            i = inside[-1]  # the curve's label where it leaves the plot
            ax.annotate(f"{s}×", (xs[i], ys[i]), fontsize=7, color=col, xytext=(-20, 2), textcoords="offset points")
    for p in pts:
        ax.scatter([p["c"]], [p["alpha"]], color=p["colour"], marker=p["marker"], s=48 if p["marker"] != "o" else 36,
                   zorder=3, label=p["text"])
    # numbers beside the points, stacked so that none overprints another (points often sit close together)
    for p, y in zip(pts, spread([p["alpha"] for p in pts], gap=0.035)):
        ax.annotate(str(p["n"]), (p["c"], p["alpha"]), xytext=(p["c"] + c_max * 0.03, y), fontsize=7,
                    color=p["colour"], arrowprops={"arrowstyle": "-", "color": p["colour"], "lw": 0.5})
    ax.set_xlim(0, c_max)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("c = draft step latency / target step latency (this device)")
    ax.set_ylabel("α = accepted / proposed (the table's α)")
    heads = any(p["kind"] == "feature_head" for p in pts)
    ax.set_title(f"design map: iso-speedup curves of the cost model at γ={g} (dashed)"
                 + ("\ntriangles: feature heads, circles: standalone drafts" if heads else ""))
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    return _save(fig, path)
