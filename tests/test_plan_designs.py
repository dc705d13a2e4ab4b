"""The pipeline's plan (distill/plan_designs.py): which designs train, decided from given timings: a CPU-like box
skips the feature head, a GPU-like one keeps it; the stored plan decides a resumed run; bad plans say why."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from decode.errors import UserError
from distill import pipeline, plan_designs
from distill.evaluate.plan import plausible

# v(γ) and c as a 2-core AVX2 EPYC measured them (issue 63: v(2) 1.22, the head's c 0.15-0.18, the int8 standalone's
# 0.03), and as a GPU gives them (v flat, a head cheaper than a 2-layer cut of the target)
CPU = {"v": {"1": 1.11, "2": 1.22, "3": 1.50}, "costs": {"standalone": {"c": 0.035}, "feature_head": {"c": 0.17},
                                                        "parallel": {"c": 0.04, "c_block": {"2": 0.045}}}}
GPU = {"v": {"1": 1.0, "2": 1.01, "3": 1.02}, "costs": {"standalone": {"c": 0.1}, "feature_head": {"c": 0.05},
                                                       "parallel": {"c": 0.1, "c_block": {"2": 0.11}}}}
GAMMAS = {d: [2] for d in plan_designs.ALPHA_CEILING}


def _decide(box: dict) -> dict:
    return plan_designs.decide(box["costs"], {int(g): x for g, x in box["v"].items()}, GAMMAS)


def test_a_cpu_like_box_skips_the_head_and_a_gpu_like_box_keeps_it():
    cpu = _decide(CPU)
    assert {d: x["train"] for d, x in cpu.items()} == {"standalone": True, "feature_head": False, "parallel": True}
    head = cpu["feature_head"]
    assert head["needs"] > head["ceiling"] and head["at_ceiling"] < head["bar"]  # its best case loses
    assert cpu["parallel"]["cost"] == pytest.approx(0.0225)  # one forward of 2 tokens: c_block(2) / 2 a token
    gpu = _decide(GPU)
    assert all(x["train"] for x in gpu.values()) and gpu["feature_head"]["needs"] < gpu["feature_head"]["ceiling"]


def test_a_design_no_alpha_makes_fast_enough_is_skipped_and_the_chain_stays_for_the_parallel_draft():
    costs = {"standalone": {"c": 2.0}, "parallel": {"c": 0.1, "c_block": {"2": 0.1}}}
    d = plan_designs.decide(costs, {2: 1.05}, GAMMAS)
    assert d["standalone"]["needs"] is None and not d["standalone"]["train"] and d["parallel"]["train"]
    plan_designs.keep_chain(d, needs_chain=True)  # the parallel draft continues it: trained, said so
    assert d["standalone"]["train"] and d["standalone"]["chain_for_parallel"]
    line = plan_designs.line({"v": {"2": 1.05}, "target_step_ms": 20.0, "decision": d})
    assert "standalone c 2.0: to beat" in line and "cannot reach it at any α" in line and "continues it" in line


def _stages():
    """The three training stages as pipeline.plan lists them, and evaluate's γ."""
    trains = [SimpleNamespace(design="standalone", parallel=0, init="target_layers"),
              SimpleNamespace(design="feature_head", parallel=0, init="target_layers"),
              SimpleNamespace(design="standalone", parallel=2, init="chain")]
    return trains, SimpleNamespace(gammas=lambda: [2], parallel_gammas=lambda: [2])


def _no_timing(*_):
    raise AssertionError("a stored plan is not timed again")


def test_the_stored_plan_decides_a_resumed_run_and_one_design_left_still_trains(tmp_path, monkeypatch, capsys):
    trains, e = _stages()
    (tmp_path / "plan.json").write_text(json.dumps({**CPU, "target_step_ms": 25.0}))
    monkeypatch.setattr(plan_designs, "measure", _no_timing)
    kept, plan = plan_designs.choose(trains, e, tmp_path)
    assert kept == [trains[0], trains[2]] and plan["line"] in capsys.readouterr().out
    assert plan["line"].startswith("plan: target step 25.0 ms, v (1) 1.11, (2) 1.22, (3) 1.5; standalone c 0.035")
    again, _ = plan_designs.choose(trains, e, tmp_path)  # a resume: same timings, same designs
    assert again == kept and json.loads((tmp_path / "plan.json").read_text())["decision"]["feature_head"]["train"] is False
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "plan.json").write_text(json.dumps({**GPU, "target_step_ms": 5.0}))
    kept, _ = plan_designs.choose(trains[1:2], e, tmp_path / "gpu")  # one design, and it beats the target: it trains
    assert kept == trains[1:2]


def test_no_design_to_train_says_why_and_busy_timings_train_every_design(tmp_path, monkeypatch, capsys):
    trains, e = _stages()
    slow = {"v": {"2": 1.05}, "target_step_ms": 1.0, "costs": {d: {"c": 0.7} for d in ("standalone", "feature_head")}}
    (tmp_path / "plan.json").write_text(json.dumps(slow))
    monkeypatch.setattr(plan_designs, "measure", _no_timing)
    with pytest.raises(UserError, match=r"no design to train: none beats the target alone .* give --designs all"):
        plan_designs.choose(trains[:2], e, tmp_path)
    busy = {"v": {"2": 21.7}, "target_step_ms": 52.3, "costs": CPU["costs"]}  # timed beside another job
    calls = []
    monkeypatch.setattr(plan_designs, "measure", lambda *a: calls.append(a) or json.loads(json.dumps(busy)))
    (tmp_path / "busy").mkdir()
    kept, plan = plan_designs.choose(trains, e, tmp_path / "busy")
    assert len(calls) == plan_designs.TRIES and kept == trains and plan["unreliable"] == ["v(2) = 21.7"]
    assert "timings unreliable (v(2) = 21.7; the machine was busy): every design is trained" in capsys.readouterr().out


def test_designs_auto_all_or_a_list_and_an_unknown_one_lists_the_known():
    assert pipeline.PipelineConfig().designs == "auto" and pipeline.PipelineConfig().design_list() == list(pipeline.DESIGNS)
    assert pipeline.PipelineConfig(designs="all").design_list() == list(pipeline.DESIGNS)
    assert pipeline.PipelineConfig(designs="parallel").designs == ["parallel"]  # `--designs parallel`: one design
    for bad in (["standalone", "medusa"], "some"):
        with pytest.raises(UserError, match=r"give auto, all, or one or more of \['standalone', 'feature_head', 'parallel'\]"):
            pipeline.PipelineConfig(designs=bad)


def test_a_screen_times_the_gammas_the_cost_model_puts_near_the_best():
    v = {1: 1.1, 2: 1.2, 3: 1.5, 4: 1.5, 6: 1.8}
    assert plausible([1, 2, 3, 4, 6], 0.3, {g: 0.03 for g in v}, v) == [1, 2]  # CPU: v climbs, short rounds win
    flat = {g: 1.0 for g in v}
    assert plausible([1, 2, 3, 4, 6], 0.5, {g: 0.02 for g in v}, flat) == [3, 4, 6]  # GPU-like: v flat


def test_each_designs_untrained_draft_is_timed_as_training_builds_it(tiny_collected, tmp_path):
    """measure: the chain draft, the feature head and the chain with its mask token, built from the target's files
    and the collected data, each timed against the target (a parallel draft: its forward of γ tokens)."""
    from distill.evaluate import EvalConfig
    from distill.train import TrainConfig, parallel

    base = dict(target=tiny_collected.target, data=tiny_collected.data, eval_data=tiny_collected.heldout, vocab=512,
                report_to="none")
    trains = [TrainConfig(**base, output=str(tmp_path / "t"), layers=2),
              TrainConfig(**base, output=str(tmp_path / "h"), design="feature_head"),
              TrainConfig(**base, output=str(tmp_path / "p"), **parallel.wiring([2]))]
    e = EvalConfig(target=tiny_collected.target, run="r", gamma=2, draft_weights="int8")
    plan = plan_designs.measure(trains, e, ["standalone", "feature_head", "parallel"])
    assert set(plan["costs"]) == {"standalone", "feature_head", "parallel"} and set(plan["v"]) == {"2"}
    assert all(x["c"] > 0 and x["draft_step_ms"] > 0 for x in plan["costs"].values())
    assert set(plan["costs"]["parallel"]["c_block"]) == {"2"} and "c_block" not in plan["costs"]["standalone"]
    kept = plan_designs.measure(trains, e, ["feature_head"], {**plan, "costs": {"standalone": {"c": 0.5}}})
    assert kept["costs"]["standalone"] == {"c": 0.5} and kept["v"] == plan["v"]  # known timings are kept as they are


def _stub_stages(out: Path, monkeypatch, costs: dict, stop_at: str | None = None) -> list[str]:
    """The pipeline's stages stubbed: collection does nothing, training records the run folder's name (and stops, as
    Ctrl-C does, on `stop_at` the first time), evaluation reports the first trained run's last checkpoint as the
    best lossless draft, the plan's timing returns `costs`. Returns the list of trained names."""
    trained, stopped = [], []
    monkeypatch.setattr(pipeline.collect, "run", lambda c, command: None)

    def train_one(cfg, out_, t, command):
        if Path(t.output).name == stop_at and not stopped:
            stopped.append(stop_at)
            raise KeyboardInterrupt
        (Path(t.output) / "checkpoint-000002" / "hf").mkdir(parents=True, exist_ok=True)
        trained.append(Path(t.output).name)

    monkeypatch.setattr(pipeline, "train_one", train_one)
    monkeypatch.setattr(pipeline, "last_draft", lambda run: Path(run) / "checkpoint-000002" / "hf")

    def evaluate(e, command):
        (out / "eval").mkdir(exist_ok=True)
        (out / "eval" / "report.json").write_text(json.dumps({"target": "t", "prompts": 1, "prompt_set": "p",
                                                              "command": command, "entries": []}))
        best = {"draft": str(Path(e.run) / "checkpoint-000002" / "hf"), "kind": "standalone", "speedup": 1.1, "acceptance_rate": 0.2, "tau": 1.4, "gamma": 2,
                "lossless": True, "predicted_speedup": 1.12, "prediction_error": -0.02}
        return {"best": best, "entries": []}

    monkeypatch.setattr(pipeline.evaluate, "run", evaluate)
    monkeypatch.setattr(plan_designs, "measure", lambda *a: {**json.loads(json.dumps(costs)), "target_step_ms": 25.0})
    return trained


def _argv(tmp_path: Path, out: Path) -> list[str]:
    from test_pipeline_checks import REPO, _target

    return ["--config", str(REPO / "configs/pipeline/default.yaml"), "--target", _target(tmp_path, "llama"),
            "--output", str(out)]


def test_the_pipeline_trains_what_its_plan_keeps_and_records_its_stage_times(tmp_path, monkeypatch, capsys):
    """run_stages with the stages stubbed: after collection the plan keeps the chain and the parallel draft (the CPU
    timings above), only those train, and the stage times are printed, in RUN/timings.json and in the report; a
    rerun decides from RUN/plan.json without timing again."""
    out = tmp_path / "run"
    trained = _stub_stages(out, monkeypatch, CPU)
    argv = _argv(tmp_path, out)
    pipeline.main(argv)
    printed = capsys.readouterr().out
    assert trained == ["train", "train-parallel"] and "plan: target step 25.0 ms" in printed
    times = json.loads((out / "timings.json").read_text())["runs"]
    assert list(times[0]["seconds"]) == ["collect_s", "plan_s", "train_s", "train_parallel_s", "evaluate_s", "total_s"]
    assert "pipeline: stage times\n| stage | seconds |\n|---|---|\n| collect (train + held-out prompts) |" in printed
    assert "## Pipeline stage times" in (out / "eval" / "report.md").read_text()
    monkeypatch.setattr(plan_designs, "measure", _no_timing)
    pipeline.main(argv)  # a rerun: the stored plan, the same designs
    assert trained == ["train", "train-parallel"] * 2 and len(json.loads((out / "timings.json").read_text())["runs"]) == 2


def test_a_plan_that_keeps_one_design_ships_it(tmp_path, monkeypatch, capsys):
    """The head and the parallel draft cost too much to win (c 0.17; a 2-token block at 0.25 a token): only the
    standalone draft trains, evaluation measures it alone, and it ships to RUN/draft."""
    out = tmp_path / "run"
    one = json.loads(json.dumps(CPU))
    one["costs"]["parallel"] = {"c": 0.5, "c_block": {"2": 0.5}}
    trained = _stub_stages(out, monkeypatch, one)
    pipeline.main(_argv(tmp_path, out))
    printed = capsys.readouterr().out
    decision = json.loads((out / "plan.json").read_text())["decision"]
    assert {d: x["train"] for d, x in decision.items()} == {"standalone": True, "feature_head": False, "parallel": False}
    assert trained == ["train"] and "parallel c 0.25: to beat" in printed and ": skip" in printed
    shipped = json.loads((out / "pipeline.json").read_text())["shipped"]
    assert shipped["from"] == str(out / "train" / "checkpoint-000002" / "hf") and (out / "draft").is_dir()
    assert f"pipeline: ships the standalone draft (1.1x, α 0.2) -> {out / 'draft'}" in printed


def test_an_interrupted_pipeline_resumes_at_the_stage_it_stopped_in(tmp_path, monkeypatch):
    """Stopped in the parallel draft's training: the plan and the chain's training are on disk, no stage times
    recorded. The same command again decides from RUN/plan.json (no timing), calls every stage again (each skips
    what it finished: collection's shards, training's checkpoints) and finishes."""
    out = tmp_path / "run"
    trained = _stub_stages(out, monkeypatch, CPU, stop_at="train-parallel")
    with pytest.raises(KeyboardInterrupt):
        pipeline.main(_argv(tmp_path, out))
    assert trained == ["train"] and (out / "plan.json").is_file() and not (out / "timings.json").exists()
    monkeypatch.setattr(plan_designs, "measure", _no_timing)
    pipeline.main(_argv(tmp_path, out))
    assert trained == ["train", "train", "train-parallel"] and (out / "draft").is_dir()
    assert len(json.loads((out / "timings.json").read_text())["runs"]) == 1
