"""distill.evaluate.timing: implausible timings are named in report.json, report.md and the headline; a clean run
(the numbers of runs/pipeline-default, 2 CPU cores) is not. Synthetic result dicts, no clock."""

from __future__ import annotations

import copy

from distill.evaluate import report, timing


def _entry(label="step 550", gamma=2, speedup=1.10, tau=1.42, v=None, step_ms=27.2, run_ms=28.2, in_run_v=1.16,
           cats=None) -> dict:
    cats = cats or {"chat": (0.9985, 1.277), "code": (1.1767, 1.5242), "math": (1.2276, 1.6017),
                    "qa": (1.0133, 1.2908)}
    return {"label": label, "draft": f"/d/{label}", "gamma": gamma, "speedup": speedup, "trained": True, "step": 550,
            "lookup": 0, "tree_nodes": 0, "lossless": True, "speedup_vs_hf_assisted": None, "device": "cpu",
            "dtype": "float32", "max_new_tokens": 64, "temperature": 0.0, "schedule": "constant",
            "baseline": {"tokens_per_s": 35.2}, "speculative": {"acceptance_rate": 0.217, "tau": tau, "tokens_per_s": 38.6},
            "cost_model": {"c": 0.031, "alpha_iid": 0.3, "predicted_speedup": 1.17, "target_step_ms": step_ms,
                           "draft_step_ms": 0.85, "v": v or {"1": 1.10, "2": 1.16, "3": 1.30, "8": 1.76},
                           "best_gamma": 1, "best_gamma_predicted_speedup": 1.14,
                           "in_run": {"c": 0.065, "v": in_run_v, "target_forward_ms": run_ms, "predicted_speedup": 1.11}},
            "per_category": {n: {"prompts": 3, "speedup": s, "tau": t, "acceptance_rate": 0.2} for n, (s, t) in cats.items()}}


def _result(*entries) -> dict:
    entries = list(entries)
    return {"target": "default", "prompts": 24, "prompt_set": "heldout", "command": "x", "entries": entries,
            "errors": [], "anchors": {}, "best": report.best(entries), "output": "/o"}


def test_a_clean_run_is_not_flagged():
    clean = _result(_entry(), _entry(label="untrained layers:0,1", speedup=0.78, tau=1.04, step_ms=26.5))
    assert timing.check(clean) == {"reliable": True, "problems": []}
    assert "unreliable" not in report.markdown(clean, []).lower()
    assert report.headline(clean).startswith("best draft")


def test_v_below_one_is_flagged_once_per_measurement():
    bad = _result(_entry(v={"1": 1.1, "3": 0.64}), _entry(label="other", v={"1": 1.1, "3": 0.64}))
    problems = timing.check(bad)["problems"]
    assert problems == ["v(3) = 0.64 below 1 (verifying γ+1 tokens timed cheaper than one)"]


def test_a_target_step_far_from_the_runs_is_flagged():
    bad = _result(_entry(step_ms=690.0, run_ms=28.2))
    problems = timing.check(bad)["problems"]
    assert any("690.0 ms when timed apart but 28.2 ms during the run" in p for p in problems)
    # two per-draft measurements of the same step that disagree
    spread = _result(_entry(step_ms=27.0, run_ms=28.0), _entry(label="b", step_ms=50.0, run_ms=28.0))
    assert any("timed at 27.0 ms and at 50.0 ms" in p for p in timing.check(spread)["problems"])


def test_per_category_speedups_that_c_and_v_cannot_explain_are_flagged():
    # the report from the issue: 0.51x..5.64x at γ=3, where τ is at most 4
    cats = {"chat": (0.51, 1.3), "code": (5.64, 2.1), "math": (1.2, 1.6)}
    problems = timing.check(_result(_entry(gamma=3, cats=cats)))["problems"]
    assert any("speedup above τ in code" in p for p in problems)
    assert any("per-category speedups 0.51x..5.64x" in p for p in problems)
    # a wide but explainable spread (τ differs, the round cost does not) stays clean
    fine = {"chat": (0.8, 1.0), "code": (2.4, 3.0)}
    assert timing.check(_result(_entry(gamma=3, cats=fine)))["reliable"]


def test_a_category_of_one_prompt_is_left_to_the_entrys_own_checks():
    # the default pipeline's screen: one prompt a category, its shared baseline slow on one of them
    one = _entry(cats={"chat": (1.2, 1.3), "writing": (1.9, 1.66)})
    one["per_category"]["writing"]["prompts"] = 1
    assert timing.check(_result(one))["reliable"]
    one["per_category"]["writing"]["prompts"] = 2
    assert timing.check(_result(one))["problems"] == ["step 550 γ=2: speedup above τ in writing (a round costs at "
                                                      "least one target step)"]


def test_a_speedup_above_tau_is_flagged():
    problems = timing.check(_result(_entry(speedup=1.9, tau=1.42)))["problems"]
    assert problems == ["step 550 γ=2: speedup 1.9x above τ = 1.42"]


def test_report_md_and_headline_say_why_near_the_top():
    bad = _result(_entry(v={"1": 1.1, "3": 0.64}, step_ms=690.0))
    md = report.markdown(bad, []).splitlines()
    warn = next(i for i, line in enumerate(md) if line.startswith("**Timings unreliable**"))
    assert warn < md.index("| draft | design | step | γ | prompts | α | τ | target tok/s | spec tok/s | speedup | predicted | "
                           "vs HF assisted | c | lossless |")
    assert "v(3) = 0.64" in md[warn] and "690.0 ms" in md[warn]
    head = report.headline(bad)
    assert head.startswith("TIMINGS UNRELIABLE (v(3) = 0.64 below 1") and "1 more; see report.md" in head
    assert "\n" not in head


def test_a_stored_check_is_used_as_is():
    r = _result(_entry())
    stored = copy.deepcopy(r)
    stored["timing_check"] = {"reliable": False, "problems": ["measured on a laptop on battery"]}
    assert timing.check(stored)["problems"] == ["measured on a laptop on battery"]
    assert timing.check(r)["reliable"]
