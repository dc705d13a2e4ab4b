"""Training on bf16 targets of GPU shape (issue 41), on CPU with tiny random targets that share the default
tokenizer, trained on the session's tiny collected data: the documented train command on a Llama-3.1-shaped target
(bf16, llama3 RoPE, grouped-query attention, untied head) with its copy circuit; a feature head 1024 wide on bf16
features beyond float16's range, at the learning rate for its width; and a non-finite step skipped before any weight
changes, training going on after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from decode import cli
from distill.train import TrainConfig, losses, train

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("torch_single_thread")

# Llama-3.1's RoPE (transformers' rope_parameters layout)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _bf16_target(path: Path, tok, hidden: int, heads: int, kv: int, head_dim: int, massive: float = 0.0,
                 **kw) -> str:
    """A random bf16 Llama with the default tokenizer's vocabulary and an untied head, saved to `path`. massive:
    hidden-state channel 0 of every token set to this (Llama-class "massive activations"; float16 ends at 65,504)."""
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden, num_hidden_layers=4,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                         max_position_embeddings=512, tie_word_embeddings=False, initializer_range=0.3,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         **kw)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    if massive:
        with torch.no_grad():
            model.model.embed_tokens.weight[:, 0] = massive  # the residual carries it into every layer's input
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    return str(path)


def _train(argv: list[str]) -> Path:
    return train(cli.parse(TrainConfig, argv), argv)


def _common(setup, target: str, out: Path, *extra: str) -> list[str]:
    return ["--target", target, "--data", setup.data, "--eval-data", setup.heldout, "--output", str(out),
            "--batch-size", "4", "--log-every", "1", "--report-to", "none", "--eval-rows", "0", *extra]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_default_recipe_trains_a_llama31_shaped_bf16_target_with_its_copy_circuit(tiny_collected, tmp_path, capsys):
    """configs/train/default.yaml (copy circuit on) on bf16 + llama3 RoPE + GQA + untied head: it was refused
    ("copy_circuit assumes default RoPE; this draft uses 'llama3'") and, with default RoPE, crashed building the
    circuit in bf16 ("Index put requires the source and destination dtypes match")."""
    target = _bf16_target(tmp_path / "target", tiny_collected.tokenizer, hidden=128, heads=4, kv=2, head_dim=64,
                          rope_parameters=dict(LLAMA3_ROPE))
    out = _train(["--config", str(REPO / "configs/train/default.yaml"),
                  *_common(tiny_collected, target, tmp_path / "run", "--max-steps", "2", "--eval-every", "2",
                           "--save-every", "2")])
    printed = capsys.readouterr().out
    assert "lr: peak 0.003\n" in printed  # 128 wide: narrower than --lr-width 576, so --lr as given
    hf = out / "checkpoint-000002" / "hf"
    cfg = json.loads((hf / "config.json").read_text())
    assert cfg["copy_circuit"]["private"] == 128 and cfg["hidden_size"] % 8 == 0  # widened, 8-aligned
    assert cfg["rope_parameters"]["rope_type"] == "llama3" and cfg["num_key_value_heads"] == 3
    assert all(torch.isfinite(v).all() for v in load_file(hf / "model.safetensors").values())
    assert all(r["train/skipped_steps"] == 0 for r in _rows(out) if "train/loss" in r)
    # the pipeline's decision is the same check (copy_circuit.check_architecture): it keeps the circuit too
    import yaml

    from distill import pipeline
    from distill.evaluate import EvalConfig

    c = pipeline.PipelineConfig(**yaml.safe_load((REPO / "configs/pipeline/default.yaml").read_text()))
    t = pipeline.stage_config(TrainConfig, {"target": target}, c.train, "train")
    e = pipeline.stage_config(EvalConfig, {"target": target, "run": "r"}, c.evaluate, "evaluate")
    t2, _, notes = pipeline.fit_to_target(target, t, e)
    assert t2.copy_circuit and not notes


def test_a_1024_wide_feature_head_trains_on_bf16_features_beyond_float16(tiny_collected, tmp_path, capsys):
    """A feature head 1024 wide, its target's hidden states at 1e5 (beyond float16): the features are stored as
    bfloat16 and the head trains at its width's learning rate without a non-finite step. Before, float16 storage
    made them inf and the loss NaN at the first step."""
    target = _bf16_target(tmp_path / "target", tiny_collected.tokenizer, hidden=1024, heads=8, kv=4, head_dim=128,
                          massive=1e5)
    out = _train(_common(tiny_collected, target, tmp_path / "run", "--design", "feature_head", "--vocab", "512",
                         "--freeze", "[embed, head]", "--loss", "{fkl: 1.0, ce: 1.0}", "--lr", "3e-3",
                         "--warmup-steps", "1", "--max-steps", "3", "--eval-every", "3", "--save-every", "3"))
    printed = capsys.readouterr().out
    assert "lr: peak 0.00169 (--lr 0.003 x --lr-width 576 / width 1024)" in printed  # the pipeline's head lr, scaled
    info = json.loads((out / "features" / "features.json").read_text())
    assert info["dtype"] == "bfloat16" and (out / "features" / "train.bf16").is_file()
    rows = [r for r in _rows(out) if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["train/skipped_steps"] == 0 and r["train/loss"] == r["train/loss"] < 1e4 for r in rows), rows
    assert rows[0]["train/lr"] == pytest.approx(3e-3 * 576 / 1024)


def test_float16_features_beyond_its_range_are_refused_naming_the_fix(tiny_collected, tmp_path):
    from decode.errors import UserError

    target = _bf16_target(tmp_path / "target", tiny_collected.tokenizer, hidden=64, heads=4, kv=2, head_dim=16,
                          massive=1e5)
    with pytest.raises(UserError, match=r"reach 9.9\d+e\+04, beyond float16's range.*--feature-dtype bfloat16"):
        _train(_common(tiny_collected, target, tmp_path / "run", "--design", "feature_head", "--vocab", "512",
                       "--feature-dtype", "float16", "--max-steps", "1"))


def test_a_non_finite_step_is_skipped_before_any_weight_changes(tiny_collected, tmp_path, monkeypatch, capsys):
    """NaN in the loss (hence every gradient) at step 3: the fused AdamW skips that update on the device, so the
    weights after step 3 are those after step 2; step 4 trains again, and the run counts one skipped step."""
    real, calls = losses.combined_loss, []

    def nan_at_step_3(*args, **kwargs):
        loss, parts = real(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan"), parts) if len(calls) == 3 else (loss, parts)

    monkeypatch.setattr(losses, "combined_loss", nan_at_step_3)
    out = _train(_common(tiny_collected, tiny_collected.target, tmp_path / "run", "--vocab", "512",
                         "--max-steps", "4", "--save-every", "1", "--eval-every", "4", "--warmup-steps", "1"))
    assert "step 3: loss nan: non-finite loss or gradients, step skipped before any weight changed (1 skipped" \
        in capsys.readouterr().out
    w = {s: load_file(out / f"checkpoint-00000{s}" / "model.safetensors") for s in (2, 3, 4)}
    trained = [k for k in w[2] if not torch.equal(w[2][k], w[4][k])]
    assert trained  # step 4 trained
    for k in w[2]:
        assert torch.equal(w[2][k], w[3][k]), k  # step 3 changed nothing
    rows = [r for r in _rows(out) if "train/loss" in r]
    assert [r["train/skipped_steps"] for r in rows] == [0, 0, 1, 1]
    assert all(r["train/loss"] == r["train/loss"] for r in rows if r["step"] != 3)  # finite apart from step 3
    state = json.loads((out / "checkpoint-000004" / "trainer_state.json").read_text())
    assert state["skipped"] == 1  # a resumed run keeps counting
