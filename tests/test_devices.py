"""Device `auto`: every job that runs a model takes the GPU when CUDA is there, the CPU otherwise."""

from __future__ import annotations

import pytest
import torch

from decode import bench
from decode.targets import resolve_device
from distill import evaluate
from distill.collect import CollectConfig
from distill.publish.job import PublishConfig


def test_auto_is_the_default_of_every_job_that_loads_a_model():
    assert bench.BenchConfig().device == "auto"
    assert evaluate.EvalConfig(drafts=["d"]).device == "auto"
    assert CollectConfig().device == "auto"
    assert PublishConfig(draft_dir="d", repo_id="o/n").device == "auto"


def test_auto_resolves_to_this_process_gpu_when_cuda_is_there(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda:0"
    monkeypatch.setenv("LOCAL_RANK", "3")  # one process per GPU under a launcher
    assert resolve_device("auto") == "cuda:3"
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"  # given devices stay
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"


class _Loaded(Exception):
    pass


@pytest.mark.parametrize("job", ["bench", "evaluate"])
def test_bench_and_evaluate_load_the_target_on_the_resolved_device(job, monkeypatch, tmp_path):
    seen = []

    def load_target(spec, dtype, device):
        seen.append(device)
        raise _Loaded

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    if job == "bench":
        monkeypatch.setattr(bench, "load_target", load_target)
        run = lambda: bench.run(bench.BenchConfig(limit=1))  # noqa: E731
    else:
        monkeypatch.setattr(evaluate.job, "load_target", load_target)
        run = lambda: evaluate.run(evaluate.EvalConfig(drafts=["d"], limit=1, output=str(tmp_path)))  # noqa: E731
    with pytest.raises(_Loaded):
        run()
    assert seen == ["cuda:0"]
