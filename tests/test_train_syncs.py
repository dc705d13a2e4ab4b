"""The training loop reads nothing back from the device between logging steps (issues 38, 49): the loss, its parts
and the non-finite flag stay on the device until a logging (or eval, or save) step, the stop signal is checked
every --signal-every steps, and nothing inside the model or the loss reads the device either (no padding mask,
no data-dependent shapes, no branch on a tensor): for both draft designs."""

import json
import sys
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from decode import cli
from distill.train import TrainConfig, loop, train

pytestmark = pytest.mark.usefixtures("torch_single_thread")

READS = ("item", "tolist", "__float__", "__int__", "__bool__")
# ops whose output shape or value the host must wait for: a boolean-mask index (x[mask], x[mask] = y) runs nonzero
# inside the kernel, out of sight of the Python methods above
SYNC_OPS = ("aten.nonzero", "aten.masked_select", "aten._local_scalar_dense", "aten.unique", "aten._unique",
            "aten.repeat_interleave.Tensor", "aten.masked_scatter")


class SyncOps(TorchDispatchMode):
    """Counts the ops of SYNC_OPS, and indexing with a boolean tensor, by name."""

    def __init__(self, seen: Counter):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket) if not str(func).startswith("aten.repeat_interleave") else str(func)
        if name.startswith(SYNC_OPS) or (func.overloadpacket in (torch.ops.aten.index, torch.ops.aten.index_put,
                                                                  torch.ops.aten.index_put_)
                                         and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                                 for i in (args[1] or []))):
            self.seen[str(func)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("design, steps", [("standalone", 20), ("feature_head", 6)])
def test_no_host_read_between_logging_steps(tiny_collected, tmp_path, monkeypatch, design, steps):
    argv = ["--target", tiny_collected.target, "--data", tiny_collected.data, "--eval-data", tiny_collected.heldout,
            "--output", str(tmp_path / "run"), "--max-steps", str(steps), "--batch-size", "2", "--log-every", "25",
            "--eval-every", "25", "--save-every", "25", "--signal-every", "25", "--eval-rows", "2",
            "--warmup-steps", "2", "--report-to", "none", "--vocab", "512", "--design", design]
    now = {"step": None}  # the optimizer step whose train_step (and the loop's work after it) is running
    reads: Counter = Counter()
    real_step = loop.train_step

    def counted_step(run, feed, step):
        now["step"] = step
        seen: Counter = Counter()
        with SyncOps(seen):
            out = real_step(run, feed, step)
        for op, c in seen.items():
            reads[(step, op, "train_step", "")] += c
        return out

    def counting(name):
        real = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            if now["step"] is not None:
                caller = sys._getframe(1)
                reads[(now["step"], name, caller.f_code.co_filename.rsplit("/", 1)[-1], caller.f_code.co_name)] += 1
            return real(self, *args, **kwargs)
        return read

    monkeypatch.setattr(loop, "train_step", counted_step)
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    n = torch.get_num_threads()
    try:
        train(cli.parse(TrainConfig, argv), argv)
    finally:
        torch.set_num_threads(n)
        monkeypatch.undo()
    last = steps - 1  # 0-based: the last step logs, evaluates and saves
    assert any(s == last for s, *_ in reads), "the last step reads: the counter saw nothing"
    # every other step is no logging step: neither the loop nor the model and the loss read the device
    between = {k: c for k, c in reads.items() if k[0] < last}
    assert not between, between
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "train/loss" in r]
    assert len(train_rows) == 1 and train_rows[0]["train/input_tokens_per_s"] > train_rows[0]["train/tokens_per_s"] > 0
    assert "train/mfu" not in train_rows[0]  # no device peak on a CPU


def test_mfu_from_the_peak_table_and_the_drafts_flops_after_the_warm_up(monkeypatch):
    from distill.train import flops

    assert loop.peak_flops("NVIDIA H100 80GB HBM3") == loop.peak_flops("NVIDIA H200") == 989e12
    assert loop.peak_flops("NVIDIA H100 PCIe") == 756e12 and loop.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert loop.peak_flops("Quadro P1000") is None
    shape = flops.DraftShape(layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, vocab=32)
    clock = iter([100.0, 101.0, 103.0, 103.0])  # start; the warm-up ends at 101; a 2 s window (then the next starts)
    monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
    synced = []
    speed = loop.Throughput(world=2, shape=shape, peak=1e9, warmup=1, sync=lambda: synced.append(1))
    step = flops.StepTokens(inputs=50, sequences=5, squares=500, trained=30)
    speed.add(flops.StepTokens(inputs=999, sequences=9, squares=9999, trained=999))  # the warm-up: not counted
    assert synced == [1] and speed.read() == (None, {})  # nothing in the window yet
    speed.add(step)
    trained_per_s, more = speed.read()
    assert trained_per_s == 30 and more["train/input_tokens_per_s"] == 50  # this rank's 2 s x 2 ranks
    assert more["train/mfu"] == round(flops.train_flops(shape, step)["total"] / 2 / 1e9, 5)
    assert "train/tokens_per_s" not in loop.train_metrics([{"loss": 1.0, "skipped": 0}], 1e-3, None)


def test_a_non_finite_step_under_deepspeed_stops_the_run_at_the_next_read(tmp_path):
    """DeepSpeed steps inside backward, so a flagged step cannot be skipped: the read of its row (a logging,
    evaluation or saving step, before any save) stops the run, naming the last good checkpoint."""
    from types import SimpleNamespace

    from decode.errors import UserError

    (tmp_path / "checkpoint-000010").mkdir()
    (tmp_path / "checkpoint-000010" / "trainer_state.json").write_text("{}")
    state = SimpleNamespace(deepspeed_plugin=object())
    run = SimpleNamespace(accelerator=SimpleNamespace(state=state), run_dir=tmp_path, skipped=0, skipped_in_row=0,
                          cfg=SimpleNamespace(max_nonfinite_steps=20))
    loop.check_finite(run, {"loss": 1.0, "skipped": 0.0}, 11, print)
    with pytest.raises(UserError, match=r"loss is nan at step 12 \(under DeepSpeed .*stopped without saving. The last good "
                                        r"checkpoint is .*checkpoint-000010"):
        loop.check_finite(run, {"loss": float("nan"), "skipped": 1.0}, 12, print)
