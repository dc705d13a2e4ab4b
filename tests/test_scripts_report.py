"""scripts/predict_device.py and scripts/bench_schedule.py's tables, on results of known numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_predict_device_prices_a_chain_by_its_steps_and_a_parallel_draft_by_one_forward(tmp_path, capsys):
    predict = _script("predict_device")
    assert predict.tau_from_depths([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    # rounds that accepted 0, 1, 2 drafts: depth acceptance 2/4 then 1/2
    entry = {"gamma": 2, "lookup": 0, "tree_nodes": 0, "speculative": {"accept_histogram": [2, 1, 1]}}
    report = {"entries": [{**entry, "kind": "standalone", "label": "chain"}, {**entry, "kind": "parallel", "label": "par"},
                          {**entry, "kind": "standalone", "label": "looked", "lookup": 2}]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    predict.main([str(path), "--c", "0.1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| chain") or line.startswith("| par")]
    assert rows == ["| chain | standalone | 2 | 0.500 0.500 | 1.75 | 1.20 | 1.46x |",
                    "| par | parallel | 2 | 0.500 0.500 | 1.75 | 1.10 | 1.59x |"]  # lookup rows are left out


def test_bench_schedule_prints_each_schedule_against_its_drafts_best_constant_gamma(capsys):
    bench = _script("bench_schedule")
    ctx = {"4K-8K": {"acceptance_rate": 0.2, "speedup": 1.1, "speculative_decode_tokens_per_s": 30.0,
                     "baseline_decode_tokens_per_s": 20.0,
                     "cost_model": {"target_step_ms": 30.0, "v": 1.14, "draft_per_round": 0.2, "target_prompt_steps": 500.0,
                                    "draft_prompt_steps": 50.0, "predicted_decode_speedup": 1.5, "predicted_speedup": 1.05}}}

    def row(draft, schedule, gamma, speedup, window=0):
        return {"draft": draft, "schedule": schedule, "gamma": gamma, "speedup": speedup, "per_context": ctx,
                "draft_context": window,
                "speculative": {"acceptance_rate": 0.2, "tau": 1.3, "decode_tokens_per_s": 30.0},
                "baseline": {"tokens_per_s": 10.0, "decode_tokens_per_s": 20.0, "prefill_seconds": 2.0},
                "hf_generate": {"tokens_per_s": 8.0, "decode_tokens_per_s": 10.0, "prefill_seconds": 2.2},
                "hf_assisted": None, "hf_assisted_skipped": "a parallel draft"}

    results = [row("a", "constant", 1, 1.2), row("a", "constant", 2, 1.25), row("a", "adaptive", 2, 1.24),
               row("b", "constant", 2, 0.9), row("b", "adaptive", 2, 0.99), row("b", "constant", 2, 1.0, 512),
               row("b", "adaptive", 2, 1.05, 512)]
    bench._print_anchor(results[0])
    bench._print_table(results, ["4K-8K"])
    bench._print_costs(results, ["4K-8K"])
    out = capsys.readouterr().out
    assert "after the first token 20.0 vs 10.0 tok/s (2.00x)" in out and "(1.10x)" in out
    assert "| a | all | adaptive | 2 | 0.200 | 1.30 | 1.240x | 1.500x | 0.200 | 1.100x | 1.500x |" in out
    assert "a (draft context all) adaptive: 0.992 of the best constant γ (2)" in out
    assert "b (draft context all) adaptive: 1.100 of the best constant γ (2)" in out
    assert "b (draft context 512) adaptive: 1.050 of the best constant γ (2)" in out  # each window its own best
    assert "| b | 512 | adaptive | 2 | 4K-8K | 30.0 | 1.14 | 0.2 | 500.0 | 50.0 | 1.500x | 1.500x | 1.050x | 1.100x |" in out


def test_bench_schedule_keeps_prompts_by_bucket():
    bench = _script("bench_schedule")
    lengths = [100, 5000, 200, 1500, 300, 6000, 7000]
    assert bench._kept(lengths, 0, ["<512", "4K-8K"], 2) == [0, 1, 2, 5]
    assert bench._kept(lengths, 1000, [], 0) == [1, 3, 5, 6]
