"""How often training saves (issue 38): --save-every N saves every N steps; the default (0, auto) saves at multiples
of 100 steps only once the time since the last save is 19x what it took, so slow saves (an 8B-shaped draft's ~8 GB)
take ~5% of the run. The GPU preset (configs/train/gpu-8b.yaml) parses and sets what it promises."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from decode import cli
from decode.errors import UserError
from distill.train import TrainConfig, loop
from distill.train.config import peak_lr

REPO = Path(__file__).resolve().parents[1]


class OneProcess:
    """accelerator.reduce and .device of a single process."""
    device = torch.device("cpu")

    def reduce(self, t, op):
        return t


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _saves(cadence: loop.SaveCadence, clock: Clock, steps: int, step_s: float, save_s: float) -> list[int]:
    """The steps that save over a run of `steps` steps of step_s seconds, each save taking save_s seconds."""
    saved = []
    for step in range(1, steps + 1):
        clock.now += step_s
        if cadence.due(step, OneProcess()):
            with cadence.timing():
                clock.now += save_s
            saved.append(step)
    return saved


def test_save_every_n_saves_every_n_steps_however_slow_the_save():
    clock = Clock()
    assert _saves(loop.SaveCadence(3, clock), clock, 10, step_s=0.1, save_s=100.0) == [3, 6, 9]


def test_auto_saves_every_100_steps_when_saves_are_cheap():
    clock = Clock()  # 0.5 s a step, 1 s a save: 19 s of training covers it
    assert _saves(loop.SaveCadence(0, clock), clock, 500, step_s=0.5, save_s=1.0) == [100, 200, 300, 400, 500]


def test_auto_spaces_slow_saves_to_about_5_percent_of_the_run():
    clock = Clock()  # an 8B-shaped draft on a GPU: ~0.12 s a step, ~8 s a save
    saved = _saves(loop.SaveCadence(0, clock), clock, 5000, step_s=0.12, save_s=8.0)
    assert saved == [100, 1400, 2700, 4000]  # 19 x 8 s = 152 s = 1,267 steps after each save, at the next 100
    assert 8.0 / (1300 * 0.12 + 8.0) < 0.05  # between two saves, saving is under 5% of the time


def test_save_every_bounds():
    assert TrainConfig().save_every == 0
    with pytest.raises(UserError, match="--save-every must be >= 0, got -1"):
        TrainConfig(save_every=-1)


def test_the_gpu_preset_parses_and_scales_lr_to_its_width():
    cfg = cli.parse(TrainConfig, ["--config", str(REPO / "configs/train/gpu-8b.yaml")])
    assert cfg.batch_tokens >= 8192 and cfg.save_every == 0 and cfg.precision == "bf16" and cfg.compile == "auto"
    assert peak_lr(cfg, 4096) == pytest.approx(3e-3 * 576 / 4096, rel=1e-2)  # DESIGN.md: lr set per width
    assert peak_lr(cfg, 8192) == pytest.approx(peak_lr(cfg, 4096) / 2)  # a wider target scales on
