"""A data-scaling curve from a sweep whose designs differ in --data-tokens: held-out proxy, α and speedup against
the collected tokens each design trained on, one line per kind of draft (SWEEP/scaling.md, scaling.png).

    python -m distill.sweep --config configs/sweep/data_scaling.yaml      # writes them beside ranking.md
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from distill.evaluate.job import training_proxy  # noqa: E402

METRICS = (("proxy", "held-out proxy (top-1 agreement)"), ("alpha", "α, measured in the decoder"))


def final_proxy(run_dir: Path) -> float | None:
    """The last eval/acceptance_proxy a training run logged (RUN/metrics.jsonl)."""
    curve = training_proxy(run_dir)
    return curve[-1][1] if curve else None


def points(ranking: list[dict]) -> dict[str, list[dict]]:
    """kind -> its ranked rows that name their training tokens, fewest tokens first (one row per design: the draft
    alone at its first γ)."""
    out: dict[str, list[dict]] = {}
    seen = set()
    for r in ranking:
        if "error" in r or r.get("tokens") is None or r["name"] in seen:
            continue
        seen.add(r["name"])
        out.setdefault(r["kind"], []).append(r)
    return {k: sorted(v, key=lambda r: r["tokens"]) for k, v in out.items()}


def table(curves: dict[str, list[dict]]) -> list[str]:
    lines = ["| kind | tokens | design | held-out proxy | α | τ | speedup |", "|---|---|---|---|---|---|---|"]
    for k, rows in curves.items():
        lines += [f"| {k.replace('_', ' ')} | {r['tokens']:,} | {r['name']} | {r['proxy']} | {r['alpha']} | "
                  f"{r['tau']} | {r['speedup']}× |" for r in rows]
    return lines


def plot(curves: dict[str, list[dict]], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(METRICS), figsize=(9.6, 3.6))
    for ax, (key, label) in zip(axes, METRICS):
        for k, rows in curves.items():
            xs = [r["tokens"] for r in rows if r.get(key) is not None]
            ax.plot(xs, [r[key] for r in rows if r.get(key) is not None], "o-" if k == "standalone" else "^-",
                    label=k.replace("_", " "))
        ax.set_xscale("log")
        ax.set_xlabel("collected tokens trained on")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(out: Path, ranking: list[dict]) -> Path | None:
    """scaling.md (+ scaling.png) when at least two designs of one kind name their tokens; else nothing."""
    curves = {k: v for k, v in points(ranking).items() if len(v) >= 2}
    if not curves:
        return None
    png = plot(curves, out / "scaling.png")
    text = ["# Data scaling", "", "Each design's training tokens (`data_tokens`, nested subsets of one collection), "
            "its final held-out proxy, and the decoder's measured α, τ and speedup (the draft alone).", "",
            *table(curves), "", f"![data scaling]({png.name})", ""]
    (out / "scaling.md").write_text("\n".join(text))
    return out / "scaling.md"
