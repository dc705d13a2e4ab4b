"""The pipeline refuses what the target's architecture cannot take before it collects anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from decode.targets import load_tokenizer
from distill import pipeline

REPO = Path(__file__).resolve().parents[1]


def _target(tmp_path: Path, model_type: str) -> str:
    """A tiny random model of this architecture with the default target's tokenizer, saved as a target folder."""
    tok = load_tokenizer("default")
    config = AutoConfig.for_model(model_type, vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=512, eos_token_id=tok.eos_token_id,
                                  bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    folder = tmp_path / model_type
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("model_type, extra, message", [
    ("qwen2", [], r"copy_circuit builds into Llama-architecture drafts; this draft is 'qwen2': train without it"),
    ("phi3", ["--train", "{copy_circuit: false}"],
     r"candidates \[1, 3\] .* needs the FastLlama runner .* this target is 'phi3': set evaluate: \{candidates: 1\}"),
])
def test_the_default_config_is_refused_before_collection(tmp_path, model_type, extra, message):
    out = tmp_path / "run"
    argv = ["--config", str(REPO / "configs/pipeline/default.yaml"), "--target", _target(tmp_path, model_type),
            "--output", str(out), *extra]
    with pytest.raises(SystemExit, match=message):
        pipeline.main(argv)
    assert not (out / "collect").exists() and not (out / "heldout").exists()  # nothing collected


def test_a_bad_stage_option_is_refused_before_collection(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=r"pipeline `evaluate` section: unknown option\(s\) \['gama'\]"):
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--output", str(out),
                       "--evaluate", "{gama: 3}"])
    assert not (out / "collect").exists()
