"""The pipeline fits its recipe to the target's architecture, and refuses what it cannot take before collecting."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from decode.targets import load_tokenizer
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
    ("phi3", ["copy circuit left out", "evaluate: candidates [1, 3] left out for this 'phi3' target: the draft's "
              "top-K at the first position needs the FastLlama runner"]),
])
def test_the_default_recipe_leaves_out_what_the_architecture_cannot_run(tmp_path, model_type, left_out):
    c = pipeline.PipelineConfig(**yaml.safe_load((REPO / "configs/pipeline/default.yaml").read_text()))
    t = pipeline.stage_config(TrainConfig, {"target": "x"}, c.train, "train")
    e = pipeline.stage_config(EvalConfig, {"target": "x", "run": "r"}, c.evaluate, "evaluate")
    t2, e2, notes = pipeline.fit_to_target(_target(tmp_path, model_type), t, e)
    assert len(notes) == len(left_out) and all(n.startswith(want) for n, want in zip(notes, left_out))
    assert t2.copy_circuit == (model_type == "llama") and e2.candidates == ([1] if model_type == "phi3" else [1, 3])


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
