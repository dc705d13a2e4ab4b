"""Device `auto`: every job that runs a model takes the GPU when CUDA is there (several, spread by a device map,\nwhen there are several and no launcher), the CPU otherwise."""

from __future__ import annotations

import pytest
import torch

from decode import bench, generate
from decode.errors import UserError
from decode.models import targets
from decode.models.targets import resolve_device
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
def test_bench_and_evaluate_hand_the_device_value_to_load_target(job, monkeypatch, tmp_path):
    """The jobs pass --device as given: load_target places the model (one GPU, or several: placement)."""
    seen = []

    def load_target(spec, dtype, device, **_):
        seen.append(device)
        raise _Loaded

    if job == "bench":
        monkeypatch.setattr(bench.job, "load_target", load_target)
        run = lambda: bench.run(bench.BenchConfig(limit=1))  # noqa: E731
    else:
        monkeypatch.setattr(evaluate.job, "load_target", load_target)
        run = lambda: evaluate.run(evaluate.EvalConfig(drafts=["d"], limit=1, output=str(tmp_path)))  # noqa: E731
    with pytest.raises(_Loaded):
        run()
    assert seen == ["auto"]


@pytest.fixture
def gpus(monkeypatch):
    """gpus(n): pretend n CUDA devices are visible (0: none), outside any launcher."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)

    def set_count(n: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return set_count


def test_auto_spreads_over_several_gpus_and_stays_on_one_otherwise(gpus, monkeypatch):
    """Before, every job loaded the whole target onto one GPU: a 70B target on 2-8 H100s could not load."""
    gpus(4)
    assert targets.placement("auto") == ("cuda:0", "sequential")  # GPU 0 first: a model that fits stays whole
    assert targets.placement("cuda:2") == ("cuda:2", None)  # a named device is that device
    assert targets.placement("cpu") == ("cpu", None)
    monkeypatch.setenv("WORLD_SIZE", "4")  # a launcher: one process per GPU, each its own copy
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert targets.placement("auto") == ("cuda:2", None)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("LOCAL_RANK")
    gpus(1)
    assert targets.placement("auto") == ("cuda:0", None)
    gpus(0)
    assert targets.placement("auto") == ("cpu", None)


@pytest.fixture
def target_folder(tmp_path, tiny_llama, tiny_tokenizer):
    model, tok = tiny_llama(0, init=0.1), tiny_tokenizer()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_spread_load_passes_the_device_map_and_gpu_only_memory(gpus, monkeypatch, target_folder, tiny_llama):
    """device auto on several GPUs reaches from_pretrained as device_map="sequential" with a GPU-only max_memory,
    in bf16, and the model is not moved afterwards (accelerate placed it); CPU offload is refused."""
    gpus(2)
    monkeypatch.setattr(targets, "_gpu_memory", lambda: {0: 10, 1: 10})
    calls = []

    def from_pretrained(path, **kw):
        calls.append(kw)
        model = tiny_llama(0)
        model.hf_device_map = hf_map
        model.to = lambda *a, **k: pytest.fail("a device-mapped model must not be moved")
        return model

    monkeypatch.setattr(targets.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    hf_map = {"model.embed_tokens": 0, "model.layers": 1, "lm_head": 1}
    targets.load_target(target_folder, "auto", "auto")
    assert calls == [{"dtype": torch.bfloat16, "device_map": "sequential", "max_memory": {0: 10, 1: 10}}]
    hf_map = {"model.embed_tokens": 0, "model.layers": 1, "lm_head": "cpu"}
    with pytest.raises(UserError, match="does not fit in 90% of the free memory of the 2 visible GPU"):
        targets.load_target(target_folder, "auto", "auto")


def test_a_device_mapped_target_loads_and_decodes(target_folder, monkeypatch):
    """A real device map (on the CPU here: every module named to it) reaches transformers/accelerate, loads, and
    decodes the same tokens as a plain load."""
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    real, maps = targets.AutoModelForCausalLM.from_pretrained, []

    def spy(path, **kw):
        maps.append(kw.get("device_map"))
        return real(path, **kw)

    monkeypatch.setattr(targets.AutoModelForCausalLM, "from_pretrained", spy)
    mapped, tok = targets.load_target(target_folder, "float32", "cpu", device_map=device_map)
    plain, _ = targets.load_target(target_folder, "float32", "cpu")
    assert maps == [device_map, None]
    assert generate(mapped, None, [1, 2, 3], 8)[0] == generate(plain, None, [1, 2, 3], 8)[0]
