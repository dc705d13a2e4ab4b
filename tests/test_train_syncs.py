"""The training loop reads nothing back from the device between logging steps (issue 38): the loss, its parts and
the non-finite flag stay on the device until a logging (or eval, or save) step, and the stop signal is checked
every --signal-every steps."""

import sys
from collections import Counter

import pytest
import torch

from decode import cli
from distill.train import TrainConfig, loop, train

pytestmark = pytest.mark.usefixtures("torch_single_thread")

READS = ("item", "tolist", "__float__", "__int__", "__bool__")


def test_no_host_read_between_logging_steps(tiny_collected, tmp_path, monkeypatch):
    argv = ["--target", tiny_collected.target, "--data", tiny_collected.data, "--eval-data", tiny_collected.heldout,
            "--output", str(tmp_path / "run"), "--max-steps", "20", "--batch-size", "2", "--log-every", "25",
            "--eval-every", "25", "--save-every", "25", "--signal-every", "25", "--eval-rows", "2",
            "--warmup-steps", "2", "--report-to", "none", "--vocab", "512"]
    now = {"step": None}  # the optimizer step whose train_step (and the loop's work after it) is running
    reads: Counter = Counter()
    real_step = loop.train_step

    def counted_step(run, feed, step):
        now["step"] = step
        return real_step(run, feed, step)

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
    assert any(s == 19 for s, *_ in reads), "the last step (20: logs, evaluates, saves) reads: the counter saw nothing"
    # steps 1-19 (0-based 0-18) are no logging step: the loop reads nothing. Two reads inside the model and the loss
    # remain, outside the loop (issue 38 leaves them): transformers' SDPA mask builder asks whether the padding mask
    # is all ones (masking_utils._ignore_causal_mask_sdpa), and the loss's `if low.any()` (losses.py
    # _SoftmaxGather.forward: rows whose complement mass underflows, recomputed exactly)
    known = {("losses.py", "forward"), ("masking_utils.py", "_ignore_causal_mask_sdpa")}
    between = {k: c for k, c in reads.items() if k[0] < 19 and k[2:] not in known}
    assert not between, between
