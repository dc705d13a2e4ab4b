"""The pipeline fits its recipe to the target's architecture, and refuses what it cannot take before collecting."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from decode.models.targets import load_tokenizer
from distill import pipeline
from distill.evaluate import EvalConfig
from distill.train import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def _target(tmp_path: Path, model_type: str) -> str:
    """A tiny random model of this architecture with the default target's tokenizer, saved as a target folder
    (head_dim 64, the least the copy circuit takes)."""
    tok = load_tokenizer("default")
    config = AutoConfig.for_model(model_type, vocab_size=len(tok), hidden_size=256, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=512, eos_token_id=tok.eos_token_id,
                                  bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    folder = tmp_path / model_type
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("model_type, left_out", [
    ("llama", []),
    ("qwen2", ["copy circuit left out for this target: copy_circuit builds into Llama-architecture drafts; this "
               "draft is 'qwen2'"]),
    ("phi3", ["copy circuit left out"]),
    ("mistral", ["copy circuit left out", "evaluate: tree_nodes [0, 6] left out for this 'mistral' target: its 4096-token sliding window"]),
])
def test_the_default_recipe_leaves_out_what_the_architecture_cannot_run(tmp_path, model_type, left_out):
    c = pipeline.PipelineConfig(**yaml.safe_load((REPO / "configs/pipeline/default.yaml").read_text()))
    t = pipeline.stage_config(TrainConfig, {"target": "x"}, c.train, "train")
    # trees as an evaluate section may ask for them
    e = pipeline.stage_config(EvalConfig, {"target": "x", "run": "r"}, {**c.evaluate, "tree_nodes": [0, 6]}, "evaluate")
    t2, e2, notes = pipeline.fit_to_target(_target(tmp_path, model_type), t, e)
    assert len(notes) == len(left_out) and all(n.startswith(want) for n, want in zip(notes, left_out))
    assert t2.copy_circuit == (model_type == "llama") and e2.tree_nodes == ([0] if model_type == "mistral" else [0, 6])


@pytest.mark.parametrize("model_type, init", [("llama", "target_layers"), ("phi3", "random")])
def test_the_feature_head_starts_from_a_target_layer_only_where_the_layer_is_llama_style(tmp_path, model_type, init):
    c = pipeline.PipelineConfig(**yaml.safe_load((REPO / "configs/pipeline/default.yaml").read_text()))
    hd = pipeline.stage_config(TrainConfig, {"target": "x", "design": "feature_head"}, c.head, "head")
    notes = []
    assert pipeline.fit_head(_target(tmp_path, model_type), hd, notes).init == init
    assert bool(notes) == (init == "random") and all(n.startswith("feature head: init random") for n in notes)


def test_a_design_the_target_cannot_take_is_refused_before_collection(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=r"layers=3: the draft needs 1\.\.2 layers \(the target has 2\)"):
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--target", _target(tmp_path, "qwen2"),
                       "--output", str(out), "--train", "{layers: 3}"])
    assert not (out / "collect").exists() and not (out / "heldout").exists()  # nothing collected


def test_a_bad_stage_option_is_refused_before_collection(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=r"pipeline `evaluate` section: unknown option\(s\) \['gama'\]"):
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--output", str(out),
                       "--evaluate", "{gama: 3}"])
    assert not (out / "collect").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--train", "{max_steps: ten}", "pipeline `train` section: max_steps must be an int, got 'ten'"),
    ("--evaluate", "{gamma: [2, two]}", "pipeline `evaluate` section: gamma must be an int or a list of ints"),
    ("--collect", "{max_new_tokens: 1.5}", "pipeline `collect` section: max_new_tokens must be an int"),
    ("--train", "{loss: {fkl: 1.0, kld: 1.0}}", "pipeline `train` section: --loss"),
    ("--heldout", "{categories: [poetry]}", "unknown category ['poetry']"),
    ("--evaluate", "{prompts: no-such-prompts.jsonl}", "no-such-prompts.jsonl"),
    ("--accelerate-config", "no-such-accelerate.yaml", "--accelerate-config no-such-accelerate.yaml: no such file"),
])
def test_every_section_is_checked_before_collection(tmp_path, flag, value, message):
    """Before, a wrong type passed the section check and failed (with a traceback) where the stage used it, and the
    held-out and evaluate prompts were only read after the train collection (and training) ran."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--output", str(out), flag, value])
    assert str(exc.value.code).startswith("error: ") and message in str(exc.value.code), exc.value.code
    assert not (out / "collect").exists() and not (out / "heldout").exists()


def test_a_held_out_collection_with_other_settings_is_refused_before_the_train_collection(tmp_path):
    out = tmp_path / "run"
    (out / "heldout").mkdir(parents=True)
    (out / "heldout" / "collect.settings.json").write_text('{"limit": 3}')
    with pytest.raises(SystemExit, match=r"run/heldout holds a collection made with other settings"):
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--output", str(out)])
    assert not (out / "collect").exists()


@pytest.mark.parametrize("argv, folder", [
    (["--config", "configs/pipeline/default.yaml", "--preset", "quick"], "runs/pipeline-default-quick"),
    (["--preset", "quick"], "runs/pipeline-quick"),
    (["--config", "configs/pipeline/default.yaml"], "runs/pipeline-default"),
    (["--config", "configs/pipeline/default.yaml", "--preset", "quick", "--output", "runs/mine"], "runs/mine"),
    (["--config", "configs/pipeline/default.yaml", "--preset", "quick", "--out=runs/mine"], "runs/mine"),
])
def test_a_preset_writes_to_its_own_folder_unless_output_is_given(tmp_path, monkeypatch, capsys, argv, folder):
    """Before, `--preset quick` wrote to runs/pipeline-default, and the full run that followed refused the quick
    run's collection there (`holds a collection made with other settings`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs/pipeline").mkdir(parents=True)
    (tmp_path / "configs/pipeline/default.yaml").write_text((REPO / "configs/pipeline/default.yaml").read_text())
    seen = {}

    def stages(cfg, out, configs, command):
        seen.update(out=out, collect=configs[0].output)
        return {"best": None}, {}

    monkeypatch.setattr(pipeline, "run_stages", stages)
    monkeypatch.setattr(pipeline, "headline", lambda result: "")
    pipeline.main(argv)
    assert seen["out"] == Path(folder) and seen["collect"] == f"{folder}/collect"
    assert f"pipeline: writing to {folder}" in capsys.readouterr().out


def test_the_long_preset_trains_on_long_and_short_prompts_at_the_targets_length(tmp_path, monkeypatch):
    """--preset long: the bundled long prompts join the short ones in collection and evaluation, and both chain
    designs train whole prompts up to 8,192 positions in token-budget batches (no feature head)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs/pipeline").mkdir(parents=True)
    (tmp_path / "configs/pipeline/default.yaml").write_text((REPO / "configs/pipeline/default.yaml").read_text())
    seen = {}

    def stages(cfg, out, configs, command):
        seen.update(configs=configs, designs=cfg.designs)
        return {"best": None}, {}

    monkeypatch.setattr(pipeline, "run_stages", stages)
    monkeypatch.setattr(pipeline, "headline", lambda result: "")
    pipeline.main(["--config", "configs/pipeline/default.yaml", "--preset", "long"])
    c, h, trains, _, e = seen["configs"]
    assert seen["designs"] == ["standalone", "parallel"] and [t.parallel for t in trains][1] == e.gammas()[0] == 2
    assert c.prompts == "train+long" and h.prompts == "heldout" and e.prompts == "heldout+long-heldout"
    assert all(t.max_seq_len == t.batch_tokens == pipeline.LONG_SEQ for t in trains)
    assert c.output == "runs/pipeline-default-long/collect"
