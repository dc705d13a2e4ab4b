"""Training speed (issue 49): the FLOPs MFU counts (distill/train/flops.py) against torch's FLOP counter on real
training steps of both draft designs, attention counted by hand, and the `speed` command at the tiny shape."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM

from decode.models.feature_head import FeatureHead, layer_config
from distill.train import flops, head, speed
from distill.train.student import Student

pytestmark = pytest.mark.usefixtures("torch_single_thread")

LOSS = {"fkl": 1.0, "ce": 1.0}


def _config(**kw) -> LlamaConfig:
    sizes = dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    return LlamaConfig(**{**sizes, **kw})


def _batch(vocab: int, B: int = 3, T: int = 24, prompt: int = 8, k: int = 4, features: int = 0):
    """Unpadded sequences (torch's counter sees padded work; flops.py counts real tokens only), trained from
    `prompt` on."""
    g = torch.Generator().manual_seed(0)
    sel = torch.cat([b * T + torch.arange(prompt, T) for b in range(B)])
    N = len(sel)
    targets = {"topk_ids": torch.randint(0, vocab, (N, k), generator=g), "labels": torch.randint(0, vocab, (N,), generator=g),
               "topk_logprobs": torch.randn(N, k, generator=g).log_softmax(-1)}
    if features:
        targets["features"] = torch.randn(B, T, features, generator=g).bfloat16()
    tokens = flops.StepTokens(inputs=B * T, sequences=B, squares=B * T * T, trained=N)
    return torch.randint(0, vocab, (B, T), generator=g), torch.ones(B, T, dtype=torch.long), sel, targets, tokens


def _counted(student, ids, mask, sel, targets) -> int:
    """FLOPs torch counts in one training step's forward and backward."""
    with FlopCounterMode(display=False) as counter:
        loss, _ = student(ids, mask, sel, targets=targets)
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("freeze_head", [True, False])
def test_standalone_matmul_flops_match_torchs_count_of_a_training_step(freeze_head):
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config())
    model.get_input_embeddings().weight.requires_grad_(False)
    model.get_output_embeddings().weight.requires_grad_(not freeze_head)
    ids, mask, sel, targets, tokens = _batch(300)
    shape = flops.standalone_shape(model)
    assert (shape.layers, shape.mlp_matrices, shape.vocab, shape.train_head) == (2, 3, 300, not freeze_head)
    # SDPA on CPU is not counted by torch (no formula for its CPU kernel): the rest must match exactly
    assert _counted(Student(model, LOSS), ids, mask, sel, targets) == flops.train_flops(shape, tokens)["matmul"]


def test_feature_head_flops_match_torchs_count_of_a_training_step_with_its_ttt_unroll():
    torch.manual_seed(0)
    model = FeatureHead(layer_config(_config(num_hidden_layers=4)), [1, 2, 3], list(range(200)))
    head.freeze_head(model, ["head"])  # the embedding (always) and the head frozen, as configs/train/gpu-8b.yaml
    ids, mask, sel, targets, tokens = _batch(200, features=3 * 64)
    shape = flops.head_shape(model, ttt_steps=3)
    assert (shape.features, shape.qkv_in, shape.ttt_steps, shape.train_head) == (192, 128, 3, False)
    student = head.HeadStudent(model, LOSS, 0.5, 2**20, 3, 0.8)
    assert _counted(student, ids, mask, sel, targets) == flops.train_flops(shape, tokens)["matmul"]


def test_attention_flops_counted_over_causal_pairs():
    """Eager attention is plain matmuls, which torch counts over the whole T x T square: the difference from the
    matmul part is the attention of flops.py scaled from causal pairs, T (T + 1) / 2 a sequence, to T^2."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config(attn_implementation="eager"))
    model.get_input_embeddings().weight.requires_grad_(False)
    ids, mask, sel, targets, tokens = _batch(300, T=24)
    f = flops.train_flops(flops.standalone_shape(model), tokens)
    counted = _counted(Student(model, LOSS), ids, mask, sel, targets) - f["matmul"]
    assert counted * (24 * 25 / 2) == f["attention"] * 24 * 24
    # by hand: sequences of 3 and 5 tokens have 6 + 15 causal pairs; 4 heads x 16 dims x 4 FLOPs a pair forward,
    # twice that backward; two layers
    shape = flops.DraftShape(layers=2, hidden=64, intermediate=1, heads=4, kv_heads=2, head_dim=16, vocab=1)
    t = flops.StepTokens(inputs=8, sequences=2, squares=9 + 25, trained=0)
    assert flops.attention_pairs(shape, t) == 2 * 21
    assert flops.train_flops(shape, t)["attention"] == 3 * 4 * 4 * 16 * 2 * 21
    # a feature head over L - 1 positions a sequence; TTT step k adds k keys a position (its own earlier steps)
    h = flops.DraftShape(1, 64, 1, 4, 2, 16, 1, features=192, ttt_steps=3)
    assert flops.attention_pairs(h, t) == 3 * (3 + 10) + (1 + 2) * (2 + 4)  # (L - 1) = 2 and 4 positions


def test_a_frozen_or_trained_part_changes_only_its_weight_gradients():
    s = flops.DraftShape(layers=2, hidden=64, intermediate=160, heads=4, kv_heads=2, head_dim=16, vocab=300)
    t = flops.StepTokens(inputs=100, sequences=4, squares=2600, trained=60)
    frozen, trained = flops.train_flops(s, t), flops.train_flops(flops.DraftShape(**{**s.__dict__, "train_head": True}), t)
    assert trained["total"] - frozen["total"] == 2 * 64 * 300 * 60  # dW of the head, at the trained positions
    lora = flops.train_flops(flops.DraftShape(**{**s.__dict__, "train_layers": False}), t)
    assert frozen["forward"] == lora["forward"] and lora["backward"] < frozen["backward"]


# --- the speed command


SMALL = ["--shape", "tiny", "--steps", "2", "--warmup", "1", "--batch-tokens", "256", "--prompt-len", "16",
         "--response-len", "48"]


@pytest.mark.parametrize("design", ["standalone", "head"])
def test_the_speed_command_trains_the_tiny_shape_and_prints_json(design, tmp_path, capsys):
    out = tmp_path / "speed.json"
    r = speed.main([*SMALL, "--design", design, "--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == r == json.loads(out.read_text())
    assert lines[-2].startswith(f"speed: {design} draft of the tiny shape on cpu")
    assert r["input_tokens_per_s"] > r["tokens_per_s"] > 0 and r["mfu"] is None  # no bf16 peak on a CPU
    assert r["batch_tokens"] == 256 and r["sequences"] == 256 // 63 and r["deepspeed"] is None
    assert r["feed"] == "one collating thread"  # training's own feed over a synthetic collection on disk (issue 62)
    assert r["flops_per_step"] > 0 and r["loss"] == r["loss"] and r["steps"] == 2
    assert 0 < r["trainable_params"] < r["params"]  # the embedding (and the head) stay frozen, as the recipe says


def test_the_speed_command_lists_its_flags_and_refuses_a_bad_design(capsys):
    with pytest.raises(SystemExit):
        speed.main(["--help"])
    shown = capsys.readouterr().out
    assert all(f"--{flag}" in shown for flag in ("shape", "design", "steps", "warmup", "batch-tokens", "out"))
    with pytest.raises(SystemExit, match="--design must be one of standalone, head, got 'eagle'"):
        speed.main(["--design", "eagle"])


@pytest.mark.slow
def test_the_speed_command_runs_under_accelerate_launch_with_zero2(tmp_path):
    """As the GPU check runs it for the ZeRO-2 ratio: one process under configs/accelerate/zero2.yaml."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--config_file", "configs/accelerate/zero2.yaml",
           "--num_processes", "1", "--mixed_precision", "no", "-m", "distill.train.speed", *SMALL, "--design",
           "standalone"]
    done = subprocess.run(cmd, cwd=repo, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["deepspeed"] == "zero2" and r["processes"] == 1 and r["tokens_per_s"] > 0
    plain = speed.main([*SMALL, "--design", "standalone"])
    # the same steps in fp32: ZeRO-2 changes where the optimizer state lives, not the math
    assert r["loss"] == pytest.approx(plain["loss"], abs=1e-4)
