"""Training at long contexts (issue 53): an example of ~8,190 tokens (a ~8,180-token prompt + 8 response tokens) of
a tiny random llama trains for both designs, and a step that would not fit the memory available is refused before
any model is built, with the --max-seq-len that fits (distill/train/memory_fit.py)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from decode import cli
from decode.errors import UserError
from distill.train import TrainConfig, job, memory_fit, train
from tests.conftest import save_tiny_default_target

pytestmark = pytest.mark.usefixtures("torch_single_thread")

LONG, N_NEW = 8192, 8  # positions of the target; response tokens collected


@pytest.fixture(scope="module")
def long_collected(tmp_path_factory):
    """A saved random llama (4 layers x 64, the default tokenizer, 8,192 positions) and data collected from it: one
    prompt of ~8,180 tokens and one short, each answered with 8 tokens (top-8), and a short held-out prompt."""
    from decode.models.targets import load_tokenizer
    from distill.collect import CollectConfig, run

    root = tmp_path_factory.mktemp("long_collected")
    tok = load_tokenizer("default")
    save_tiny_default_target(root / "target", tok, LONG)
    ids = tok(" ".join(f"w{i % 500}" for i in range(2300))).input_ids[: LONG - N_NEW - 4]
    long_prompt = tok.decode(ids)
    rows = {"data": [{"id": "long", "category": "chat", "prompt": long_prompt},
                     {"id": "short", "category": "chat", "prompt": "hello there"}],
            "heldout": [{"id": "h0", "category": "qa", "prompt": "what is two and two?"}]}
    out = {}
    for name, prompts in rows.items():
        path = root / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in prompts))
        out[name] = str(root / name)
        run(CollectConfig(target=str(root / "target"), prompts=str(path), output=out[name], max_new_tokens=N_NEW,
                          topk=8, batch_size=2))
    return SimpleNamespace(target=str(root / "target"), data=out["data"], heldout=out["heldout"])


def _argv(lc, out, *extra: str) -> list[str]:
    return ["--target", lc.target, "--data", lc.data, "--eval-data", lc.heldout, "--output", str(out),
            "--max-seq-len", str(LONG), "--max-steps", "2", "--batch-size", "2", "--eval-every", "2",
            "--save-every", "2", "--log-every", "1", "--warmup-steps", "1", "--report-to", "none", *extra]


def _longest(lc) -> int:
    from distill.collect.shards import load_collected

    return max(len(r["prompt_ids"]) + len(r["response_ids"]) for r in load_collected(lc.data))


@pytest.mark.parametrize("design", ["standalone", "feature_head"])
def test_an_8k_token_example_trains_for_both_designs(long_collected, tmp_path, design):
    assert 8000 <= _longest(long_collected) <= LONG
    extra = ("--design", design) + (("--vocab", "512", "--ttt-steps", "2") if design == "feature_head" else ())
    argv = _argv(long_collected, tmp_path / "run", *extra)
    run = train(cli.parse(TrainConfig, argv), argv)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    loss = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(loss) == 2 and all(math.isfinite(x) for x in loss), loss


def test_the_draft_attends_with_sdpa(long_collected):
    """The standalone draft's attention is SDPA (fused, no (T, T) matrix per head); the feature head calls SDPA."""
    from decode.models.layer_cut import draft_from_files

    assert draft_from_files(long_collected.target, [0, 1], torch.float32).config._attn_implementation == "sdpa"


class _Accelerator:
    mixed_precision, num_processes, device = "no", 1, torch.device("cpu")
    state = SimpleNamespace(deepspeed_plugin=None)


def _examples(cfg):
    from decode.models.targets import load_tokenizer
    from distill.train.data import load_data, make_examples

    return make_examples(cfg, load_data(cfg, load_tokenizer(cfg.target)))[0]


def test_a_normal_tiny_run_passes_the_check(tiny_collected, long_collected, tmp_path):
    for lc in (tiny_collected, long_collected):
        cfg = cli.parse(TrainConfig, _argv(lc, tmp_path / "run"))
        memory_fit.check(cfg, _examples(cfg), _Accelerator())  # this host's memory: no error


def test_the_memory_check_sizes_a_parallel_draft_that_keeps_every_anchor(tiny_collected, tmp_path):
    """--parallel-keep 1 (every mask level keeps all anchors) is allowed; its estimate is the finite sum of the
    levels, not keep / (1 - keep) (a division by zero)."""
    cfg = cli.parse(TrainConfig, _argv(tiny_collected, tmp_path / "run", "--parallel", "4", "--parallel-keep", "1"))
    memory_fit.check(cfg, _examples(cfg), _Accelerator())


@pytest.mark.parametrize("design", ["standalone", "feature_head"])
def test_a_step_that_cannot_fit_is_refused_before_the_draft_is_built(long_collected, tmp_path, monkeypatch, design):
    monkeypatch.setattr(memory_fit, "available", lambda device, processes=1: 96 * 2**20)

    def built(*a, **k):
        raise AssertionError("the draft was built before the memory check")

    monkeypatch.setattr(job, "build_model", built)
    argv = _argv(long_collected, tmp_path / "run", "--design", design)
    with pytest.raises(UserError, match="--max-seq-len") as e:
        train(cli.parse(TrainConfig, argv), argv)
    line = str(e.value)
    assert "\n" not in line and f"{_longest(long_collected) - 1:,} tokens" in line and "0.09 GiB" in line, line
    # the length it names fits the same memory
    fit = int(line.split("--max-seq-len ")[1].split()[0])
    cfg = cli.parse(TrainConfig, _argv(long_collected, tmp_path / "run", "--design", design, "--max-seq-len", str(fit)))
    memory_fit.check(cfg, _examples(cfg), _Accelerator())

