"""Timings that cannot be right: an evaluation result's checks of its own clock (report.json "timing_check").

On a shared or busy machine a slow spell can land on one measurement and not the next: a report once showed a
690 ms target step (27 ms when idle), v(3) = 0.64 and per-category speedups from 0.51x to 5.64x, and nothing said
so. Each check below compares two numbers that physics or the decoder ties together; a mismatch means the clock
moved, not the drafts. Thresholds are loose enough that a clean 2-core run (runs/pipeline-default, docs/results.md:
v(1) = 1.10, target step 27.2 ms apart vs 28.2 ms in the run, per-category τ/speedup 1.28..1.31) stays unflagged.
"""

from __future__ import annotations

# v(γ) = target time for γ+1 tokens / for 1: it cannot be below 1. A GPU's v sits at ~1.0 for small γ (memory
# bound), so a few % under 1 is noise of the paired medians (decode.bench.latency.verify_ratio); 10% under is not.
V_FLOOR = 0.9
# the mean target forward during the run (in_run.target_forward_ms) vs the step timed apart (target_step_ms): the
# run's mean also holds one prefill per prompt, which lifts it 5-15% at 64 new tokens; a factor 2 either way is a
# machine that was busy during one of the two.
STEP_DRIFT = 2.0
# the same target step timed apart once per draft (decode.bench.latency.measure): identical work, so beyond 1.5x apart
# one of them ran on a busy machine.
STEP_SPREAD = 1.5
# τ / speedup = a round's cost in target-alone steps (γ·c + v under the cost model). A round holds at least one
# target forward that costs at least one step, so below 0.9 the speedup exceeds τ, which cannot happen.
ROUND_FLOOR = 0.9
# categories share c and v; their round cost differs only through context length (a few %). A 2x spread across
# categories of one run means the baseline's and the run's clocks drifted apart prompt by prompt.
CATEGORY_SPREAD = 2.0
# the per-category checks skip a category of fewer prompts: one prompt is ~1 s of clock, and a hiccup on its
# target-alone baseline, which every row shares, lifts every row's speedup there past τ (the screen of the default
# pipeline, one prompt a category, was flagged on every run so); the entry's own checks still cover its prompts
CATEGORY_MIN_PROMPTS = 2


def _round_cost(tau: float, speedup: float) -> float | None:
    return tau / speedup if speedup and speedup > 0 else None


def _v_problems(entries: list[dict]) -> list[str]:
    """v(γ) < V_FLOOR, once per distinct measurement (entries of one draft share it)."""
    out, seen = [], set()
    for e in entries:
        cm = e.get("cost_model") or {}
        low = {g: x for g, x in (cm.get("v") or {}).items() if x < V_FLOOR}
        key = tuple(sorted(low.items()))
        if low and key not in seen:
            seen.add(key)
            shown = ", ".join(f"v({g}) = {x}" for g, x in low.items())
            out.append(f"{shown} below 1 (verifying γ+1 tokens timed cheaper than one)")
        ir = cm.get("in_run") or {}
        if ir.get("v") is not None and ir["v"] < V_FLOOR:
            out.append(f"{e['label']} γ={e['gamma']}: in-run v = {ir['v']} below 1")
    return out


def _step_problems(entries: list[dict]) -> list[str]:
    """The target step timed apart vs during the run, and between the per-draft measurements."""
    out = []
    steps = [(e["cost_model"]["target_step_ms"], e) for e in entries if (e.get("cost_model") or {}).get("target_step_ms")]
    for ms, e in steps:
        run_ms = (e["cost_model"].get("in_run") or {}).get("target_forward_ms")
        if run_ms and not 1 / STEP_DRIFT <= ms / run_ms <= STEP_DRIFT:
            out.append(f"target step {ms} ms when timed apart but {run_ms} ms during the run ({e['label']})")
            break  # one line says it: every entry shares the run's baseline
    if steps:
        lo, hi = min(s[0] for s in steps), max(s[0] for s in steps)
        if hi / lo > STEP_SPREAD:
            out.append(f"the same target step timed at {lo} ms and at {hi} ms")
    return out


def _category_problems(e: dict) -> list[str]:
    """Per category of one entry: a speedup above τ, or round costs spread too far."""
    cats = {n: c for n, c in (e.get("per_category") or {}).items() if c.get("prompts", 0) >= CATEGORY_MIN_PROMPTS}
    costs = {name: r for name, c in cats.items() if (r := _round_cost(c.get("tau", 0), c.get("speedup", 0))) is not None}
    out = []
    name = f"{e['label']} γ={e['gamma']}"
    over = sorted(n for n, r in costs.items() if r < ROUND_FLOOR)
    if over:
        out.append(f"{name}: speedup above τ in {', '.join(over)} (a round costs at least one target step)")
    if len(costs) > 1 and min(costs.values()) > 0 and max(costs.values()) / min(costs.values()) > CATEGORY_SPREAD:
        speeds = [c["speedup"] for c in cats.values()]
        out.append(f"{name}: per-category speedups {min(speeds)}x..{max(speeds)}x at a round cost (τ/speedup) "
                   f"{min(costs.values()):.2f}..{max(costs.values()):.2f} target steps, which c and v keep within a few %")
    return out


def problems(entries: list[dict]) -> list[str]:
    """Every reason the timings of these entries cannot be trusted, one short sentence each ([] = none found)."""
    out = _v_problems(entries) + _step_problems(entries)
    for e in entries:
        r = _round_cost(e["speculative"]["tau"], e["speedup"])
        if r is not None and r < ROUND_FLOOR:
            out.append(f"{e['label']} γ={e['gamma']}: speedup {e['speedup']}x above τ = {e['speculative']['tau']}")
        out += _category_problems(e)
    return out


def check(result: dict) -> dict:
    """report.json's "timing_check": {"reliable", "problems"}; taken as stored when the result has one."""
    if "timing_check" in result:
        return result["timing_check"]
    found = problems(result.get("entries") or [])
    return {"reliable": not found, "problems": found}


def warning_line(result: dict) -> str | None:
    """The one line report.md shows near its top when the timings are unreliable (None when they are fine)."""
    tc = check(result)
    if tc["reliable"]:
        return None
    return ("**Timings unreliable** (the machine was likely busy; rerun on an idle one, speedups and c, v here are "
            "not to be trusted): " + "; ".join(tc["problems"]) + ".")


def headline_note(result: dict) -> str:
    """The prefix report.headline() gives unreliable timings ('' when they are fine)."""
    tc = check(result)
    if tc["reliable"]:
        return ""
    more = f"; {len(tc['problems']) - 1} more" if len(tc["problems"]) > 1 else ""
    return f"TIMINGS UNRELIABLE ({tc['problems'][0]}{more}; see report.md): "
