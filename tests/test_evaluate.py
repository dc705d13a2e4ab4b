"""distill.evaluate and distill.pipeline: report schema, plots, ranking, bad input, the quick pipeline."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from decode.errors import UserError
from decode.models.targets import load_tokenizer
from distill import evaluate
from distill.train import checkpoints

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _save(model, tok, path):
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """A tiny target with the real default tokenizer, a perfect draft (its copy) and a random draft."""
    tok = load_tokenizer("default")
    root = tmp_path_factory.mktemp("eval")
    cfg = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.5,
               eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, **cfg))
    torch.manual_seed(1)
    random_draft = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, **cfg))
    paths = {"target": _save(target, tok, root / "target"), "good": _save(target, tok, root / "good"),
             "random": _save(random_draft, tok, root / "random")}
    prompts = root / "p.jsonl"
    rows = [{"id": f"p{i}", "category": ["chat", "code"][i % 2], "messages": [{"role": "user", "content": f"Say {w}."}]}
            for i, w in enumerate(["hi", "bye", "yes", "no"])]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths["prompts"] = str(prompts)
    paths["root"] = root
    return paths


def _cfg(p, out, **kw):
    base = dict(target=p["target"], prompts=p["prompts"], max_new_tokens=8, gamma=[1, 3], output=str(out), anchors=False)
    base.update(kw)
    return evaluate.EvalConfig(**base)


def test_report_schema_plots_and_ranking(tiny_pair, tmp_path):
    res = evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["good"], tiny_pair["random"]]))
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["entries"]) == 4  # 2 drafts x 2 gammas
    for e in report["entries"]:
        for key in ("target", "draft", "device", "dtype", "prompts", "max_new_tokens", "temperature", "gamma", "schedule",
                    "baseline", "speculative", "speedup", "lossless", "per_category", "cost_model"):
            assert key in e
        assert set(e["per_category"]) == {"chat", "code"}
        assert e["lossless"] is True
        cm = e["cost_model"]
        assert cm["c"] > 0 and "predicted_speedup" in cm and cm["v"]
    good = [e for e in report["entries"] if e["draft"] == tiny_pair["good"]]
    assert all(e["speculative"]["acceptance_rate"] == 1.0 for e in good)
    # the built-in difference: a perfect draft ranks above a random one on acceptance at every γ (measured
    # speedups of tiny models are timing noise on a shared box, so the ranking rule is checked on its own)
    bad = {e["gamma"]: e for e in report["entries"] if e["draft"] == tiny_pair["random"]}
    for e in good:
        assert e["speculative"]["tau"] > bad[e["gamma"]]["speculative"]["tau"]
    fastest = max(report["entries"], key=lambda e: e["speedup"])
    assert (res["best"]["draft"], res["best"]["gamma"]) == (fastest["draft"], fastest["gamma"])
    md = (tmp_path / "report.md").read_text()
    assert "| draft |" in md and "Per category" in md
    for png in ("speedup_by_gamma.png", "design_map.png"):
        data = (tmp_path / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 2000
        assert f"]({png})" in md
    b = res["best"]
    assert b["prediction_error"] == pytest.approx((b["predicted_speedup"] - b["speedup"]) / b["speedup"], abs=1e-3)
    assert "Cost model at the best measured γ" in md
    # report.md can be rewritten from report.json alone, without re-measuring
    (tmp_path / "report.md").unlink()
    from distill.evaluate import report as report_mod

    report_mod.main([str(tmp_path)])
    assert (tmp_path / "report.md").read_text() == md


def test_bad_drafts_are_reported_and_others_still_evaluated(tiny_pair, tmp_path):
    empty_run = tmp_path / "run-without-checkpoints"
    empty_run.mkdir()
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    res = evaluate.run(_cfg(tiny_pair, tmp_path / "eval", run=str(empty_run), drafts=[str(not_a_model), tiny_pair["good"]],
                            gamma=2))
    assert [e["draft"] for e in res["entries"]] == [tiny_pair["good"]]
    errors = {x["draft"]: x["error"] for x in res["errors"]}
    assert "no complete checkpoints" in errors[str(empty_run)]
    assert "config.json" in errors[str(not_a_model)]
    assert "Not evaluated" in (tmp_path / "eval" / "report.md").read_text()


def test_unknown_category_is_a_clear_error(tiny_pair, tmp_path):
    with pytest.raises(UserError, match="unknown categor"):
        evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["good"]], categories=["poetry"]))


def test_all_runs_share_one_baseline_and_earlier_checkpoints_run_at_the_first_gamma(tiny_pair, tmp_path):
    """One target-alone pass per prompt serves every draft x γ; a run's older checkpoints get only the first γ."""
    run = tmp_path / "run"
    for step in (2, 4):
        (run / f"checkpoint-{step:06d}").mkdir(parents=True)
        _save(LlamaForCausalLM.from_pretrained(tiny_pair["good"]), load_tokenizer("default"),
              run / f"checkpoint-{step:06d}" / "hf")
        (run / f"checkpoint-{step:06d}" / checkpoints.STATE_FILE).write_text("{}")
    res = evaluate.run(_cfg(tiny_pair, tmp_path / "eval", run=str(run), drafts=[tiny_pair["random"]]))
    got = sorted((e["step"], e["gamma"]) for e in res["entries"] if e["trained"] and e["draft"] != tiny_pair["random"])
    assert got == [(2, 1), (4, 1), (4, 3)]
    assert sorted(e["gamma"] for e in res["entries"] if e["draft"] == tiny_pair["random"]) == [1, 3]
    assert len({json.dumps(e["baseline"]) for e in res["entries"]}) == 1
    last = evaluate.run(_cfg(tiny_pair, tmp_path / "last", run=str(run), checkpoints="last"))
    assert sorted((e["step"], e["gamma"]) for e in last["entries"]) == [(4, 1), (4, 3)]


def test_lookup_settings_run_for_the_main_draft_only(tiny_pair, tmp_path):
    """--lookup [0, 1]: the main draft at every γ with and without the decoder's context lookup (labelled apart,
    lossless, cost model split by round kind); transformers' assisted generation once, next to the first setting."""
    res = evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["good"]], lookup=[0, 1], anchors=True))
    got = sorted((e["label"], e["gamma"], e["lookup"]) for e in res["entries"] if e["trained"])
    name = got[0][0]
    assert got == [(name, 1, 0), (name, 3, 0), (f"{name} + lookup 1", 1, 1), (f"{name} + lookup 1", 3, 1)]
    for e in res["entries"]:
        assert e["lossless"] is True
        lk = e["speculative"]["lookup"]
        assert (e["cost_model"]["lookup"] is not None) == (lk["rounds"] > 0)
        if e["lookup"]:
            assert e["hf_assisted"] is None  # transformers has no draft + lookup to compare with
    assert [e["hf_assisted"] is not None for e in res["entries"]] == [True, False, False, False]  # once per run
    assert "lookup 1" in (tmp_path / "report.md").read_text()
    with pytest.raises(UserError, match="--lookup"):
        evaluate.EvalConfig(drafts=["x"], lookup=[-1])


def test_token_trees_and_int8_draft(tiny_pair, tmp_path):
    """--tree-nodes [0, 4] --draft-weights int8: every γ as a chain and as a 4-node tree (labelled apart, lossless,
    v measured at the tree's 4 + 1 tokens, the tree's cost model); transformers' assisted generation only next to
    the first chain, once per evaluation."""
    res = evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["random"]], tree_nodes=[0, 4], draft_weights="int8",
                            anchors=True))
    got = sorted((e["label"], e["gamma"], e["tree_nodes"]) for e in res["entries"] if e["trained"])
    name = got[0][0]
    assert got == [(name, 1, 0), (name, 3, 0), (f"{name} tree-4", 1, 4), (f"{name} tree-4", 3, 4)]
    for e in res["entries"]:
        assert e["lossless"] is True and e["draft_weights"] == "int8"
        assert (e["hf_assisted"] is not None) == (e["tree_nodes"] == 0 and e["trained"] and e["gamma"] == 1)
        assert str(e["tree_nodes"] or e["gamma"]) in e["cost_model"]["v"]
        if e["tree_nodes"]:
            tree = e["cost_model"]["tree"]
            assert e["speculative"]["tree"]["nodes_per_pass"] <= 4 and tree["levels_per_round"] <= e["gamma"]
            assert len(tree["depth_acceptance"]) <= e["gamma"] and e["cost_model"]["predicted_speedup"] > 0
    assert "tree-4" in (tmp_path / "report.md").read_text()
    with pytest.raises(UserError, match="--tree-nodes"):
        evaluate.EvalConfig(drafts=["x"], tree_nodes=[-1])
    with pytest.raises(UserError, match="--draft-weights must be one of float32, float16, int8"):
        evaluate.EvalConfig(drafts=["x"], draft_weights="half")
    with pytest.raises(UserError, match="schedule constant"):
        evaluate.EvalConfig(drafts=["x"], tree_nodes=3, schedule="dynamic")


def test_drafts_in_folders_of_one_name_are_labelled_apart(tiny_pair, tmp_path):
    """Two pipelines' `draft` folders read `a/draft` and `b/draft` in the report (not `draft` twice), and the
    per-category table names the one it is for."""
    for run in ("a", "b"):
        shutil.copytree(tiny_pair["good"], tmp_path / run / "draft")
    res = evaluate.run(_cfg(tiny_pair, tmp_path / "eval", drafts=[str(tmp_path / r / "draft") for r in "ab"],
                            gamma=1))
    assert sorted(e["label"] for e in res["entries"]) == ["a/draft", "b/draft"]
    assert f"## Per category: {res['best']['label']} at" in (tmp_path / "eval" / "report.md").read_text()
    names = evaluate.job.draft_names
    assert names([("x/run/hf", None), ("y/run/hf", None), ("z/one", None)]) == {"x/run/hf": "x/run",
                                                                               "y/run/hf": "y/run", "z/one": "z/one"}
    assert names([("runs/only/hf", None), ("layers:0,1", None), ("run/checkpoint-000002/hf", 2)]) == {
        "runs/only/hf": "only"}


def test_gamma_and_missing_drafts_are_rejected():
    with pytest.raises(UserError, match="gamma"):
        evaluate.EvalConfig(drafts=["x"], gamma=0)
    with pytest.raises(UserError, match="--run"):
        evaluate.EvalConfig()


@pytest.mark.slow
def test_anchors_on_tiny_models(tiny_pair, tmp_path):
    res = evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["random"]], gamma=2, anchors=True))
    e = res["entries"][0]
    assert e["hf_assisted"]["outputs_matching_target"] == 4 and e["speedup_vs_hf_assisted"] > 0
    pl = res["anchors"]["prompt_lookup"]
    assert pl["prompts"] == 4 and pl["tokens_per_s"] > 0
    # timed in the drafts' loop against its plain generate, not in a second pass of its own; greedy, it is lossless
    assert pl["hf_target_alone_tokens_per_s"] == e["hf_generate"]["tokens_per_s"]
    assert pl["outputs_matching_target"] == 4


@pytest.mark.slow
def test_sweep_ranks_designs_and_resumes_without_redoing_finished_ones(tiny_pair, tmp_path, capsys):
    from distill import sweep

    out = tmp_path / "sweep"
    cfg = dict(target=tiny_pair["target"], output=str(out),
               collect={"prompts": tiny_pair["prompts"], "max_new_tokens": 6, "topk": 4},
               heldout={"prompts": tiny_pair["prompts"], "limit": 2},
               train={"max_steps": 2, "eval_every": 2, "save_every": 2, "batch_size": 2, "report_to": "none", "vocab": 256},
               evaluate={"prompts": tiny_pair["prompts"], "limit": 2, "max_new_tokens": 6, "gamma": 2},
               designs=[{"name": "one", "layers": 1}, {"name": "two", "layers": 2},
                        {"name": "impossible", "layers": [0, 7]}])
    ranking = sweep.run(sweep.SweepConfig(**cfg))
    names = [r["name"] for r in ranking]
    assert set(names) == {"one", "two", "impossible"}
    bad = next(r for r in ranking if r["name"] == "impossible")
    assert "out of range" in bad["error"] or "within" in bad["error"]
    ok = [r for r in ranking if "error" not in r]
    assert all(r["lossless"] for r in ok) and any(r["pareto"] for r in ok)
    assert "| rank | design |" in (out / "ranking.md").read_text()
    stamp = (out / "designs" / "one" / "eval" / "report.json").stat().st_mtime_ns
    capsys.readouterr()
    again = sweep.run(sweep.SweepConfig(**cfg))  # resume: nothing finished is redone
    assert "already evaluated (resume)" in capsys.readouterr().out
    assert (out / "designs" / "one" / "eval" / "report.json").stat().st_mtime_ns == stamp
    assert [r["name"] for r in again] == names


def test_pipeline_stage_settings_merge_yaml_then_preset_then_flags():
    from decode import cli
    from distill import pipeline

    argv = ["--config", "configs/pipeline/default.yaml", "--preset", "quick", "--train", "{max_steps: 7}"]
    cfg = cli.parse(pipeline.PipelineConfig, argv)
    s = {k: getattr(cfg, k) for k in pipeline.PipelineConfig.SECTIONS}
    assert s["train"]["max_steps"] == 7 and s["train"]["vocab"] == 8192  # flag wins, the YAML's recipe stays
    assert s["evaluate"]["limit"] == 8 and s["evaluate"]["gamma"] == 2  # preset over the YAML
    assert s["collect"]["limit"] == 96 and s["collect"]["topk"] == 32
    plain = ["--config", "configs/pipeline/default.yaml"]
    assert cli.parse(pipeline.PipelineConfig, plain).train["max_steps"] == 300


def _truncated_copy(src, dst):
    """A draft folder whose model.safetensors lost its second half (a full disk, a killed copy)."""
    import shutil

    shutil.copytree(src, dst)
    w = dst / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    return str(dst)


def test_a_truncated_draft_is_skipped_and_listed_while_the_others_are_evaluated(tiny_pair, tmp_path, capsys):
    broken = _truncated_copy(tiny_pair["root"] / "random", tmp_path / "broken")
    evaluate.main(["--target", tiny_pair["target"], "--prompts", tiny_pair["prompts"], "--max-new-tokens", "4",
                   "--gamma", "2", "--anchors", "none", "--drafts", broken, tiny_pair["good"],
                   "--output", str(tmp_path / "eval")])
    out, err = capsys.readouterr()
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert [e["draft"] for e in report["entries"]] == [tiny_pair["good"]]
    assert [x["draft"] for x in report["errors"]] == [broken]
    assert f"skipped {broken}: " in err and f"skipped {broken}: " in out and "skipped 1" in out
    assert f"- skipped `{broken}`: " in (tmp_path / "eval" / "report.md").read_text()


def test_nothing_loaded_is_an_error_and_leaves_an_existing_report_alone(tiny_pair, tmp_path):
    broken = _truncated_copy(tiny_pair["root"] / "random", tmp_path / "broken")
    out = tmp_path / "eval"
    out.mkdir()
    (out / "report.json").write_text('{"kept": true}\n')
    with pytest.raises(UserError, match="nothing evaluated, no draft could be loaded: .*broken"):
        evaluate.run(_cfg(tiny_pair, out, drafts=[broken, str(tmp_path / "missing")], gamma=2))
    assert json.loads((out / "report.json").read_text()) == {"kept": True}


def _run_with_checkpoint(run, good):
    ck = run / "checkpoint-000004"
    ck.mkdir(parents=True)
    _save(LlamaForCausalLM.from_pretrained(good), load_tokenizer("default"), ck / "hf")
    (ck / checkpoints.STATE_FILE).write_text("{}")
    (run / "metrics.jsonl").write_text('{"step": 0, "eval/acceptance_proxy": 0.1}\n'
                                       '{"step": 4, "eval/acceptance_proxy": 0.5}\n')


def test_a_pipeline_folder_as_run_evaluates_its_training_run(tiny_pair, tmp_path, capsys):
    pipe = tmp_path / "pipeline-default"
    _run_with_checkpoint(pipe / "train", tiny_pair["good"])
    (pipe / "pipeline.json").write_text("{}")
    (pipe / "eval").mkdir()
    (pipe / "eval" / "report.md").write_text("the pipeline's report\n")
    res = evaluate.run(_cfg(tiny_pair, None, run=str(pipe), gamma=2, output=None))
    assert "is a pipeline folder: evaluating its training run" in capsys.readouterr().err
    assert [e["step"] for e in res["entries"]] == [4] and res["output"] == str(pipe / "train" / "eval")
    assert res["training_proxy"] == [[0, 0.1], [4, 0.5]]
    assert (pipe / "eval" / "report.md").read_text() == "the pipeline's report\n"


class _Loaded(Exception):
    pass


def _no_target(monkeypatch):
    def load_target(*a, **k):
        raise _Loaded

    monkeypatch.setattr(evaluate.job, "load_target", load_target)


def test_a_run_without_checkpoints_stops_before_any_model_loads(tiny_pair, tmp_path, monkeypatch):
    _no_target(monkeypatch)
    pipe = tmp_path / "pipe"
    _run_with_checkpoint(pipe / "train", tiny_pair["good"])
    with pytest.raises(UserError, match=f"no complete checkpoints in {pipe}, nothing to evaluate; pass --run {pipe}/train"):
        evaluate.run(_cfg(tiny_pair, tmp_path / "eval", run=str(pipe)))
    (pipe / "eval").mkdir()  # the pipeline's report folder named instead of its training run
    with pytest.raises(UserError, match=f"no complete checkpoints in {pipe}/eval, .*; pass --run {pipe}/train"):
        evaluate.run(_cfg(tiny_pair, tmp_path / "eval", run=str(pipe / "eval")))
    with pytest.raises(UserError, match="is a file"):
        evaluate.run(_cfg(tiny_pair, tmp_path / "eval", run=tiny_pair["prompts"]))


def test_the_size_of_the_evaluation_is_said_before_the_target_loads(tiny_pair, tmp_path, monkeypatch, capsys):
    _no_target(monkeypatch)
    with pytest.raises(_Loaded):
        evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["good"], tiny_pair["random"]]))
    assert ("evaluating up to 4 draft x γ runs on 4 prompts x up to 8 new tokens (one shared target-alone baseline); "
            "--limit N takes N prompts, in turn from each category, for a shorter run") in capsys.readouterr().err


def test_the_long_check_times_each_designs_best_again_on_long_prompts(tiny_pair, tmp_path):
    """--long-prompts: the fastest trained entry of each kind, again on the long set and on --long-unfamiliar, against
    its own baseline, with the decoder's default schedule; before that its window of the prompt is chosen by cost
    on the first set and stored in its specdistill.json; a prompt the target's 512 positions cannot hold is left out
    with a note (distill/evaluate/long_check.py)."""
    long, other, good = tmp_path / "long.jsonl", tmp_path / "other.jsonl", tmp_path / "good"
    rows = [{"id": f"l{n}", "category": "long_qa", "messages": [{"role": "user", "content": "word " * n + "Why?"}]}
            for n in (300, 2000)]
    long.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other.write_text(json.dumps({"id": "o1", "category": "readme_qa", "messages": [
        {"role": "user", "content": "pip install " * 60 + "What?"}]}) + "\n")
    shutil.copytree(tiny_pair["good"], good)  # a copy: the check writes its window into the draft's folder
    (good / "specdistill.json").write_text(json.dumps({"step": 7}))
    res = evaluate.run(_cfg(tiny_pair, tmp_path / "ev", drafts=[str(good)], gamma=2,
                            long_prompts=str(long), long_unfamiliar=str(other), long_limit=2))
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    lc = report["long_check"]
    assert lc["prompts"] == 1 and lc["buckets"] == ["<512"] and len(lc["entries"]) == 1
    assert lc["schedule"] == "adaptive" and lc["unfamiliar"]["prompt_set"] == str(other)
    e = lc["entries"][0]
    assert e["label"] == report["best"]["label"] and e["lossless"] is True
    # its own copy: α 1 wherever it drafts (here a round costs the target's step twice over, so the adaptive schedule
    # may well settle on the target alone after its warm-up: no draft α then)
    assert e["alpha_kept"] is None or e["alpha_kept"] > 0.9
    assert lc["unfamiliar"]["entries"][0]["lossless"] is True
    assert any("1 of 2 prompts" in n for n in report["notes"])
    assert e["first_token"] > 0  # its time to the first token against the target alone's
    stored = json.loads((good / "specdistill.json").read_text())
    window = lc["windows"][e["label"]]
    assert stored["step"] == 7 and stored["draft_context"] == window  # kept with the draft, the decoder reads it
    whole = max(window["windows"], key=int)  # the whole prompt: the target's own copy predicts every token there
    assert window["windows"][whole]["agreement"] == 1.0 and window["window"] == int(whole)
    assert e["draft_window"] == {"stored": {"calls": 1, "tokens": [e["draft_window"]["stored"]["tokens"][0]] * 2}}
    md = (tmp_path / "ev" / "report.md").read_text()
    assert "## Long prompts: 1 of" in md and "first token (time)" in md and f"of `{other}`" in md
    from distill.evaluate import report as rep

    assert "\nat long prompts (1 of " in rep.headline(res)  # the second line the pipeline prints


def test_a_screen_decides_on_fewer_prompts_and_confirms_the_fastest_on_all(tiny_pair, tmp_path):
    """--screen-limit 2 of 4 prompts: every setting on the first 2 (the anchors too, once), the two fastest trained
    ones again on all 4; the faster of those is the best, and report.md says which rows ran on how many prompts."""
    res = evaluate.run(_cfg(tiny_pair, tmp_path, drafts=[tiny_pair["good"], tiny_pair["random"]], screen_limit=2,
                            anchors="hf"))
    tops = [e for e in res["entries"] if e.get("confirmed")]
    others = [e for e in res["entries"] if not e.get("confirmed")]
    assert len(tops) == 2 and {e["prompts"] for e in tops} == {4} and len(others) == 4
    assert {e["prompts"] for e in others} == {2}
    screened = sorted((e for e in others if e["trained"]), key=lambda e: -e["speedup"])[:2]
    assert [e["label"] for e in tops] == [f"{e['label']} (all 4 prompts)" for e in screened]
    assert all(t["screen"]["prompts"] == 2 and t["screen"]["speedup"] == s["speedup"] for t, s in zip(tops, screened))
    top = max(tops, key=lambda e: e["speedup"])
    assert res["best"]["label"] == top["label"] and res["best"]["prompts"] == 4 and res["best"]["speedup"] == top["speedup"]
    assert res["screen"] == top["screen"]
    assert res["anchors"]["prompt_lookup"]["prompts"] == 2 and sum(bool(e["hf_assisted"]) for e in res["entries"]) == 1
    md = (tmp_path / "report.md").read_text()
    assert "timed on 2 of the 4 prompts" in md and "| prompts |" in md
