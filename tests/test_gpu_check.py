"""The GPU check judges what it measures (distill/gpu_check.py, issue 62): each row carries its target, the measured
value and whether it was met; a row below its target (or a collection that fell back to eager steps) fails the
command; the 8b budgets leave 15% of the 8 minutes; a timed-out step's whole process group is killed.

The end-to-end test stands cheap commands in for the steps (the real ones take minutes on a CPU:
`python -m distill.gpu_check --shape tiny`, docs/results.md), so the parent's own path runs: process groups,
the readers of each step's JSON, the judging, the table and the exit status."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from decode.models.shapes import shape_config
from distill import gpu_check
from distill.gpu_check import TARGETS, Target, judge


def test_judge_meets_a_target_only_at_or_above_it_and_never_with_a_fault():
    t = Target("tokens_per_s", 5000, "tok/s")
    assert judge(t, {"tokens_per_s": 5000.0}, None) == (5000.0, True, "ok")
    measured, met, status = judge(t, {"tokens_per_s": 4999.0}, None)
    assert (measured, met) == (4999.0, False) and status.startswith("below target (4999 < 5000 tok/s")
    assert judge(t, {"tokens_per_s": 9000.0}, "1 graph capture(s) fell back to eager steps")[1:] == (
        False, "1 graph capture(s) fell back to eager steps")
    assert judge(Target("mfu_pct", 35, "% MFU"), {"mfu_pct": None}, None) == (None, False, "not measured (mfu_pct)")
    assert judge(Target("lossless", 1, ""), {"lossless": True}, None)[1] and not judge(Target("lossless", 1, ""),
                                                                                        {"lossless": False}, None)[1]


def test_the_8b_budgets_leave_15_percent_of_the_8_minutes():
    used = sum(gpu_check.BUDGETS["8b"].values()) + gpu_check.START_S
    assert used <= (1 - gpu_check.SLACK) * gpu_check.TOTAL_S["8b"] == 408
    assert set(TARGETS["8b"]) == set(TARGETS["tiny"]) == {"decoder", "cut", "standalone", "head", "zero2", "collect",
                                                          "pipeline"}


def writes(path, record: dict) -> list[str]:
    return [sys.executable, "-c", f"import json, pathlib; pathlib.Path({str(path)!r}).write_text({json.dumps(record)!r})"]


SPEED = {"tokens_per_s": 0.0, "mfu": None, "trainable_params": 1e6, "precision": "no"}


@pytest.mark.parametrize("rate, code", [(40.0, None), (20.0, 1)])
def test_a_row_below_its_target_fails_the_command(tmp_path, monkeypatch, capsys, rate, code):
    """tiny's standalone target is 30 trained tok/s: 40 passes, 20 fails the command."""
    monkeypatch.setattr(gpu_check, "tokenizer_dir", lambda: tmp_path)
    monkeypatch.setattr(gpu_check, "write_target", lambda folder, shape, tok: shape_config(shape))
    out = tmp_path / "check"

    def steps(o, shape):
        speed = o / "standalone.json"
        return [("standalone", writes(speed, {**SPEED, "tokens_per_s": rate}),
                 {"standalone": ("train speed", lambda: gpu_check.speed_numbers(speed))})]

    monkeypatch.setattr(gpu_check, "steps", steps)
    if code is None:
        gpu_check.main(["--out", str(out), "--shape", "tiny"])
    else:
        with pytest.raises(SystemExit) as e:
            gpu_check.main(["--out", str(out), "--shape", "tiny"])
        assert e.value.code == code and "did not meet their target: standalone" in capsys.readouterr().err
    row = json.loads((out / "gpu_check.json").read_text())[-1]
    assert (row["target"], row["unit"], row["measured"], row["met"]) == (30, "trained tok/s", rate, code is None)


def test_a_collection_that_fell_back_to_eager_steps_is_not_ok(tmp_path):
    (tmp_path / "collect").mkdir()
    (tmp_path / "collect" / "collect.json").write_text(json.dumps({"tokens_per_s": 9000.0, "tokens": 10, "rows": 1,
                                                                   "eager_fallbacks": 2}))
    text, metrics, fault = gpu_check.collect_numbers(tmp_path)
    assert judge(TARGETS["8b"]["collect"], metrics, fault)[1:] == (False, "2 graph capture(s) fell back to eager steps")


def test_a_timed_out_step_s_whole_process_group_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    # the step starts a child that would outlive it (a launcher's worker), then hangs
    code = (f"import subprocess, sys, time, pathlib; c = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(60)']); pathlib.Path({str(pid_file)!r}).write_text(str(c.pid)); time.sleep(60)")
    status, _ = gpu_check.run_step("hang", [sys.executable, "-c", code], 3, tmp_path / "logs")
    assert status == "timeout (3s)"
    child = int(pid_file.read_text())
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # gone (reaped by init once killed)
        os.kill(child, 0)
