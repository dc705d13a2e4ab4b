"""Checkpoints and exports in the training dtype (issue 38): a bf16 run's HF folder holds bf16 tensors, says so in
config.json and specdistill.json and loads as bf16, while its checkpoint keeps the fp32 master weights the
optimizer steps; an fp32 run resumes bitwise; --compile resolves and compiles in place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from decode import cli
from decode.errors import UserError
from distill.train import TrainConfig, checkpoints, loop, train

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def _argv(setup, out: Path, *extra: str) -> list[str]:
    return ["--target", setup.target, "--data", setup.data, "--eval-data", setup.heldout, "--output", str(out),
            "--batch-size", "4", "--log-every", "1", "--eval-every", "50", "--eval-rows", "2", "--warmup-steps", "1",
            "--vocab", "512", "--report-to", "none", *extra]


def _train(argv: list[str]) -> Path:
    return train(cli.parse(TrainConfig, argv), argv)


@pytest.fixture
def fresh_accelerator_state():
    """accelerate keeps one process-wide state whose mixed precision a later Accelerator may not change: a bf16
    run in this process starts and leaves it fresh, so the fp32 runs before and after it work."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


def test_a_bf16_run_exports_bf16_and_keeps_fp32_master_weights(tiny_collected, tmp_path, fresh_accelerator_state):
    run = _train(_argv(tiny_collected, tmp_path / "run", "--precision", "bf16", "--max-steps", "2", "--save-every", "2"))
    ckpt = run / "checkpoint-000002"
    hf = load_file(ckpt / "hf" / "model.safetensors")
    assert hf and all(v.dtype == torch.bfloat16 for v in hf.values())
    assert json.loads((ckpt / "hf" / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((ckpt / "hf" / "specdistill.json").read_text())["dtype"] == "bfloat16"
    master = load_file(ckpt / "model.safetensors")  # accelerate's state: the weights AdamW steps, in fp32
    assert all(v.dtype == torch.float32 for v in master.values())
    shared = [k for k in hf if "model." + k in master]  # accelerate's state leaves out a tied head's copy
    assert len(shared) >= len(hf) - 1
    for k in shared:  # the export is the master weights rounded once
        assert torch.equal(hf[k], master["model." + k].to(torch.bfloat16)), k
    model = AutoModelForCausalLM.from_pretrained(ckpt / "hf", dtype="auto")
    assert model.dtype == torch.bfloat16
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits.float()).all()


def test_a_bf16_feature_head_exports_bf16(tiny_collected, tmp_path, fresh_accelerator_state):
    from decode.models.feature_head import FeatureHead

    run = _train(_argv(tiny_collected, tmp_path / "run", "--design", "feature_head", "--precision", "bf16",
                       "--max-steps", "2", "--save-every", "2"))
    hf = run / "checkpoint-000002" / "hf"
    sd = load_file(hf / "model.safetensors")
    assert {v.dtype for v in sd.values() if v.is_floating_point()} == {torch.bfloat16}
    assert all(not v.is_floating_point() for k, v in sd.items() if k in ("d2t", "t2d"))  # maps stay integers
    assert json.loads((hf / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert json.loads((hf / "specdistill.json").read_text())["dtype"] == "bfloat16"
    FeatureHead.load(hf, torch.bfloat16)


def test_an_fp32_run_exports_fp32_and_resumes_bitwise(tiny_collected, tmp_path):
    whole = _train(_argv(tiny_collected, tmp_path / "whole", "--max-steps", "4", "--save-every", "2"))
    hf = whole / "checkpoint-000004" / "hf"
    assert json.loads((hf / "config.json").read_text())["dtype"] == "float32"
    assert all(v.dtype == torch.float32 for v in load_file(hf / "model.safetensors").values())

    cut = tmp_path / "cut"
    real = loop.train_step

    def die_in_step_3(run, feed, s):
        if s == 2:
            raise KeyboardInterrupt("killed in step 3")
        return real(run, feed, s)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "train_step", die_in_step_3)
        with pytest.raises(KeyboardInterrupt):
            _train(_argv(tiny_collected, cut, "--max-steps", "4", "--save-every", "2"))
    assert [p.name for p in checkpoints.complete(cut)] == ["checkpoint-000002"]
    _train(_argv(tiny_collected, cut, "--max-steps", "4", "--save-every", "2"))
    for name in ("model.safetensors", "hf/model.safetensors"):
        a, b = load_file(whole / "checkpoint-000004" / name), load_file(cut / "checkpoint-000004" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    shutil.rmtree(tmp_path / "whole")


@pytest.mark.parametrize("precision, cuda, cpu_bf16, want", [
    ("auto", True, False, "bf16"), ("auto", False, True, "fp32"), ("native", True, False, "bf16"),
    ("native", False, True, "bf16"), ("native", False, False, "fp32"), ("fp32", True, True, "fp32"),
    ("bf16", False, False, "bf16")])
def test_precision_resolves_by_hardware(monkeypatch, precision, cuda, cpu_bf16, want):
    """auto: bf16 on a GPU, fp32 on every CPU; native: bf16 also on a CPU with bf16 instructions (AVX512-BF16 or
    AMX), where torch does not emulate it; bf16 and fp32 as given."""
    from distill.train import setup

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(setup, "cpu_computes_bf16", lambda: cpu_bf16)
    assert setup.resolved_precision(TrainConfig(precision=precision)) == want


def test_one_process_runs_fp32_then_bf16(fresh_accelerator_state):
    """The pipeline's stages share a process: a bf16 stage after an fp32 one gets a bf16 Accelerator, not accelerate's
    'already initialized' error."""
    from distill.train.setup import make_accelerator

    assert make_accelerator(TrainConfig(precision="fp32")).mixed_precision == "no"
    assert make_accelerator(TrainConfig(precision="bf16")).mixed_precision == "bf16"
    assert make_accelerator(TrainConfig(precision="fp32")).mixed_precision == "no"


def test_precision_refuses_other_words():
    with pytest.raises(UserError, match="--precision must be auto, native, bf16 or fp32, got 'half'"):
        TrainConfig(precision="half")


@pytest.mark.parametrize("value, on", [("on", True), ("off", False), ("auto", False)])
def test_compile_choice_on_cpu(value, on):
    from accelerate import Accelerator

    from distill.train.engine import use_compile

    assert use_compile(TrainConfig(compile=value), Accelerator(cpu=True)) is on  # auto: off on CPU


def test_compile_takes_yaml_booleans_and_refuses_other_words(tmp_path):
    (tmp_path / "c.yaml").write_text("compile: off\n")  # YAML reads off as false
    assert cli.parse(TrainConfig, ["--config", str(tmp_path / "c.yaml")]).compile == "off"
    assert cli.parse(TrainConfig, ["--compile", "on"]).compile == "on"
    with pytest.raises(UserError, match="--compile must be one of auto, on, off, got 'sometimes'"):
        TrainConfig(compile="sometimes")


def test_compile_layers_compiles_in_place(tiny_llama):
    """--compile on compiles the decoder stack in place: the checkpoint's and export's keys stay the draft's own.
    (Training compiled on CPU is not run here: a 3-step tiny run took 168 s, nearly all of it compiling.)"""
    from distill.train.student import Student

    student = Student(tiny_llama())
    keys = list(student.state_dict())
    student.compile_layers()
    assert list(student.state_dict()) == keys and student.model.model._compiled_call_impl is not None
