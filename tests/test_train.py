"""Training (distill/train.py) on the session's tiny target: metrics, checkpoints with HF exports, exact resume
(after an exception, a SIGKILL, a corrupt checkpoint and a torn save), NaN losses, foreign data, the export as a
transformers assistant_model, the offline W&B run, and real 2-process DeepSpeed ZeRO-2/ZeRO-3 launches (slow).

Run A (module fixture) is the uninterrupted reference: 6 steps, a checkpoint every 2, train/loss every step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from decode import cli
from decode.errors import UserError
from distill.train import TrainConfig, checkpoints, losses, lr_at, main, train

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("torch_single_thread")  # tiny models: one thread is faster on a busy box


def _argv(setup, out: Path, *extra: str) -> list[str]:
    return [
        "--target",
        setup.target,
        "--data",
        setup.data,
        "--eval-data",
        setup.heldout,
        "--output",
        str(out),
        "--max-steps",
        "6",
        "--batch-size",
        "4",
        "--save-every",
        "2",
        "--log-every",
        "1",
        "--eval-every",
        "3",
        "--warmup-steps",
        "2",
        "--keep-last",
        "2",
        "--report-to",
        "none",
        *extra,
    ]


def _train(argv: list[str]) -> Path:
    """In-process, one intra-op thread (as the subprocesses below run: OMP_NUM_THREADS=1)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(cli.parse(TrainConfig, argv), argv)
    finally:
        torch.set_num_threads(n)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _losses(run: Path) -> list[tuple[int, float]]:
    """Every logged (step, train/loss), in order: a resumed run logs the steps after its checkpoint again."""
    return [(m["step"], m["train/loss"]) for m in _metrics(run) if "train/loss" in m]


def _assert_same_curve(run: Path, reference: Path, steps: list[int]) -> None:
    want = dict(_losses(reference))
    got = _losses(run)
    assert sorted({s for s, _ in got}) == steps
    for step, loss in got:
        assert loss == pytest.approx(want[step], abs=1e-6), step


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(a), load_file(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)


@pytest.fixture(scope="module")
def run_a(tiny_collected, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run_a") / "run"
    return _train(_argv(tiny_collected, out))


def _train_until(argv: list[str], stop: int) -> None:
    """Run argv in-process and stop it with an exception right after checkpoint `stop` was written."""
    save = checkpoints.save

    def save_then_die(accelerator, wrapper, run_dir, step, *args):
        path = save(accelerator, wrapper, run_dir, step, *args)
        if step == stop:
            raise KeyboardInterrupt(f"killed after checkpoint {step}")
        return path

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoints, "save", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            _train(argv)


def _train_dying_in_step(argv: list[str], step: int) -> None:
    """Run argv in-process and stop it with an exception at the start of step `step` (1-based): the steps before
    it are logged, the ones since the last checkpoint will be logged again by the resumed run."""
    from distill.train import loop

    real = loop.train_step

    def die_at(run, feed, s):
        if s + 1 == step:
            raise KeyboardInterrupt(f"killed in step {step}")
        return real(run, feed, s)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "train_step", die_at)
        with pytest.raises(KeyboardInterrupt):
            _train(argv)


@pytest.fixture(scope="module")
def interrupted(tiny_collected, tmp_path_factory) -> Path:
    """The run of run_a's command, killed in step 6: checkpoint-000004 is the newest, step 5 already logged."""
    out = tmp_path_factory.mktemp("interrupted") / "run"
    _train_dying_in_step(_argv(tiny_collected, out), 6)
    assert [p.name for p in checkpoints.complete(out)] == ["checkpoint-000004", "checkpoint-000002"]
    assert [s for s, _ in _losses(out)] == [1, 2, 3, 4, 5]
    return out


def _assert_each_step_once(run: Path) -> None:
    """metrics.jsonl holds each step's train row once (a resume drops the rows past its checkpoint first)."""
    assert [s for s, _ in _losses(run)] == [1, 2, 3, 4, 5, 6]
    evals = [m["step"] for m in _metrics(run) if "eval/acceptance_proxy" in m]
    assert evals == sorted(set(evals)), evals


# --- a run: metrics, checkpoints, exports -----------------------------------------------------------------------


@pytest.mark.parametrize("floor", [0.1, 0.0])
def test_lr_schedule(floor):
    cfg = TrainConfig(lr=1e-2, warmup_steps=4, max_steps=104, min_lr_ratio=floor)
    assert [lr_at(cfg, s) for s in range(4)] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2])  # linear warm-up
    assert lr_at(cfg, 4) == pytest.approx(1e-2)  # the cosine starts at the peak
    assert lr_at(cfg, 54) == pytest.approx(1e-2 * (1 + floor) / 2)  # halfway
    assert lr_at(cfg, 104) == pytest.approx(1e-2 * floor)  # and ends at the floor
    lrs = [lr_at(cfg, s) for s in range(4, 105)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    with pytest.raises(UserError, match="min-lr-ratio"):
        TrainConfig(min_lr_ratio=1.5)


def test_run_logs_metrics_and_writes_checkpoints(run_a, tiny_collected):
    metrics = _metrics(run_a)
    assert [s for s, _ in _losses(run_a)] == [1, 2, 3, 4, 5, 6]
    assert all(
        m["train/loss"] > 0 and "train/lr" in m and "train/loss_fkl" in m
        for m in metrics
        if "train/loss" in m
    )
    proxy = {m["step"]: m["eval/acceptance_proxy"] for m in metrics if "eval/acceptance_proxy" in m}
    assert sorted(proxy) == [0, 3, 6] and all(0 <= v <= 1 for v in proxy.values())
    assert json.loads((run_a / "train.config.json").read_text())["max_steps"] == 6

    # keep_last=2: the two newest complete checkpoints, no temp folders
    assert sorted(p.name for p in run_a.iterdir() if "checkpoint" in p.name) == [
        "checkpoint-000004",
        "checkpoint-000006",
    ]
    ckpt = run_a / "checkpoint-000006"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 6 and state["metrics"]["eval/acceptance_proxy"] == proxy[6]

    hf = ckpt / "hf"
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "specdistill.json",
    ):
        assert (hf / name).is_file(), name
    assert not (hf / "draft_vocab.json").exists()  # full vocabulary: no id map
    meta = json.loads((hf / "specdistill.json").read_text())
    assert meta["target"] == tiny_collected.target and meta["step"] == 6 and meta["init"] == "target_layers"
    assert meta["design"]["layers"] == [0, 1] and meta["design"]["params"] > 0  # a count keeps the first N layers
    assert (
        meta["loss"] == {"fkl": 1.0}
        and meta["data"]["path"] == tiny_collected.data
        and meta["data"]["rows"] == 24
    )
    assert (
        meta["commands"][0].startswith("python -m distill.collect")
        and meta["commands"][-1].startswith("python distill/train.py --target")  # in-process: one plain process
    )
    assert meta["metrics"] == state["metrics"]
    # the export holds the trained weights (the accelerate state's copy, without the wrapper's prefix)
    exported, trained = load_file(hf / "model.safetensors"), load_file(ckpt / "model.safetensors")
    for k, v in exported.items():
        assert torch.equal(v, trained["model." + k]), k


def test_export_works_as_transformers_assistant_model(run_a, tiny_collected):
    from transformers import AutoModelForCausalLM

    from distill.collect.shards import load_collected

    target = AutoModelForCausalLM.from_pretrained(tiny_collected.target, dtype=torch.float32).eval()
    draft, info = AutoModelForCausalLM.from_pretrained(
        run_a / "checkpoint-000006" / "hf", dtype=torch.float32, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    draft.eval()
    draft.generation_config.num_assistant_tokens = 4
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0
    eos = tiny_collected.tokenizer.eos_token_id
    for prompt in load_collected(tiny_collected.heldout)["prompt_ids"][:3]:
        ids = torch.tensor([prompt])
        kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16, pad_token_id=eos)
        with torch.inference_mode():
            alone = target.generate(ids, **kw)
            assisted = target.generate(ids, assistant_model=draft, **kw)
        assert assisted.tolist() == alone.tolist()


# --- resume -----------------------------------------------------------------------------------------------------


def test_resume_continues_exactly(run_a, interrupted, tiny_collected, tmp_path, capsys):
    run = shutil.copytree(interrupted, tmp_path / "run")
    _train(_argv(tiny_collected, run))
    assert f"resumed from {run / 'checkpoint-000004'} at step 4" in capsys.readouterr().out
    _assert_same_curve(run, run_a, [1, 2, 3, 4, 5, 6])
    _assert_each_step_once(run)
    _assert_same_weights(
        run / "checkpoint-000006" / "model.safetensors", run_a / "checkpoint-000006" / "model.safetensors"
    )


def test_resume_skips_a_corrupt_checkpoint_and_a_torn_save(
    run_a, interrupted, tiny_collected, tmp_path, capsys
):
    run = shutil.copytree(interrupted, tmp_path / "run")
    bad = run / "checkpoint-000004" / "model.safetensors"
    os.truncate(bad, bad.stat().st_size // 2)
    # a crash while saving step 6: a temp folder with a state file and a torn model file; and one left by an
    # earlier command with another --save-every
    for torn in (run / ".tmp-checkpoint-000006", run / ".tmp-checkpoint-000005"):
        shutil.copytree(run / "checkpoint-000002", torn)
        os.truncate(torn / "model.safetensors", 100)
    assert checkpoints.complete(run)[0].name == "checkpoint-000004"  # the temp folder never counts

    _train(_argv(tiny_collected, run))
    captured = capsys.readouterr()
    assert f"checkpoint {run / 'checkpoint-000004'} skipped: {bad} is unreadable" in captured.err
    assert f"resumed from {run / 'checkpoint-000002'} at step 2" in captured.out
    _assert_same_curve(run, run_a, [1, 2, 3, 4, 5, 6])
    _assert_each_step_once(run)
    _assert_same_weights(
        run / "checkpoint-000006" / "model.safetensors", run_a / "checkpoint-000006" / "model.safetensors"
    )
    assert not list(run.glob(".tmp-*"))


def test_resume_keeps_the_logging_window(run_a, tiny_collected, tmp_path):
    """--log-every 4 with a checkpoint at step 2: the step-4 loss still averages steps 1-4 after a resume."""
    run = tmp_path / "run"
    argv = _argv(tiny_collected, run, "--log-every", "4", "--eval-every", "6")
    _train_until(argv, 2)
    assert _losses(run) == []
    _train(argv)
    want = dict(_losses(run_a))
    got = dict(_losses(run))
    assert sorted(got) == [4, 6]
    assert got[4] == pytest.approx(sum(want[s] for s in (1, 2, 3, 4)) / 4, abs=2e-5)
    assert got[6] == pytest.approx((want[5] + want[6]) / 2, abs=2e-5)


def test_resume_with_no_loadable_checkpoint_is_an_error(interrupted, tiny_collected, tmp_path):
    run = shutil.copytree(interrupted, tmp_path / "run")
    for ckpt in checkpoints.complete(run):
        (ckpt / "optimizer.bin").unlink()
    with pytest.raises(UserError, match="no checkpoint in .* loads"):
        _train(_argv(tiny_collected, run))


class _Marker:
    """Pickles as a call to open(path, "w"): unpickling it with weights_only=False creates the file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_checkpoint_file_is_refused_without_running_it(interrupted, tiny_collected, tmp_path):
    run = shutil.copytree(interrupted, tmp_path / "run")
    marker, bad = tmp_path / "pwned", run / "checkpoint-000004" / "optimizer.bin"
    torch.save({"state": _Marker(marker)}, bad)
    with pytest.raises(SystemExit, match=f"{bad} holds an object a checkpoint never holds .*GLOBAL.*"
                                         f"Delete {run / 'checkpoint-000004'} "):
        main(_argv(tiny_collected, run))
    assert not marker.exists()


def test_a_corrupt_rng_file_is_named_not_swallowed(run_a, interrupted, tiny_collected, tmp_path, capsys):
    """accelerate's load_state logs "Could not load random states" at info level and resumes without them."""
    run = shutil.copytree(interrupted, tmp_path / "run")
    rng = run / "checkpoint-000004" / "random_states_0.pkl"
    torch.save({"step": 4}, rng)  # loads, but holds no RNG state
    _train(_argv(tiny_collected, run))
    err = capsys.readouterr().err
    assert f"checkpoint {run / 'checkpoint-000004'} skipped: {rng} is unreadable (not the RNG states" in err
    _assert_same_curve(run, run_a, [1, 2, 3, 4, 5, 6])
    _assert_each_step_once(run)
    for ckpt in checkpoints.complete(run):  # none loads: the error names the newest one's file
        os.truncate(ckpt / "random_states_0.pkl", 10)
    with pytest.raises(UserError, match=f"no checkpoint in {run} loads \\({run / 'checkpoint-000006'}/random_states"):
        _train(_argv(tiny_collected, run))


def test_a_missing_rng_file_of_any_rank_is_named(interrupted, tmp_path):
    """Every rank checks every rank's file, so all of them skip the same checkpoint."""
    ckpt = shutil.copytree(interrupted / "checkpoint-000004", tmp_path / "checkpoint-000004")
    assert checkpoints.unreadable(ckpt) is None
    assert checkpoints.unreadable(ckpt, world=2) == (
        ckpt / "random_states_1.pkl", "missing; resume with the processes it was saved by, not 2")
    (ckpt / "random_states_0.pkl").unlink()
    assert checkpoints.unreadable(ckpt) == (ckpt / "random_states_0.pkl", "missing")


def test_metrics_rows_past_the_checkpoint_are_dropped_atomically(tmp_path):
    from distill.tracking import Tracker

    t = Tracker(tmp_path, {}, "none")
    for step in (0, 1, 2, 3):
        t.log({"train/loss": step}, step=step)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "train/lo')  # a kill mid-write
    t.truncate(2)
    assert [m["step"] for m in _metrics(tmp_path)] == [0, 1, 2]
    t.truncate(-1)  # a fresh start: the run logs from step 0 again
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value, message", [
    ("lr", -1e-3, "--lr must be a number > 0, got -0.001"),
    ("lr", float("nan"), "--lr must be a number > 0"),
    ("grad_clip", 0.0, "--grad-clip must be a number > 0"),
    ("max_steps", 0, "--max-steps must be >= 1, got 0"),
    ("batch_size", -4, "--batch-size must be >= 1"),
    ("grad_accum", 0, "--grad-accum must be >= 1"),
    ("save_every", -1, "--save-every must be >= 0"),  # 0 = auto (loop.SaveCadence)
    ("eval_every", -1, "--eval-every must be >= 1"),
    ("warmup_steps", -1, "--warmup-steps must be >= 0"),
    ("keep_last", -2, "--keep-last must be >= 0"),
    ("weight_decay", -0.1, "--weight-decay must be >= 0"),
    ("hidden_size", 0, "--hidden-size must be >= 1"),
    ("max_seq_len", 1, "--max-seq-len must be >= 2"),
    ("jsd_beta", 1.0, "--jsd-beta must be between 0 and 1"),
    ("loss", {"fkl": 1.0, "ce": -0.5}, "give weights >= 0"),
])
def test_numbers_out_of_range_name_their_flag(flag, value, message):
    with pytest.raises(UserError, match=re.escape(message)):
        TrainConfig(**{flag: value})


def test_the_recorded_command_is_the_launcher_that_ran(monkeypatch):
    from distill.train.setup import launch_command

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert launch_command(["--loss", "{ce: 1.0}"]) == "python distill/train.py --loss '{ce: 1.0}'"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")  # what `accelerate launch` sets in its processes
    assert launch_command(["--max-steps", "5"]) == "accelerate launch distill/train.py --max-steps 5"


def _damaged(tiny_collected, tmp_path, how: str) -> Path:
    data = shutil.copytree(tiny_collected.data, tmp_path / "data")
    shard = sorted((data / "shards").iterdir())[0]
    if how == "deleted":
        shutil.rmtree(shard)
    else:
        arrow = next(shard.glob("*.arrow"))
        os.truncate(arrow, arrow.stat().st_size // 2)
    return data


@pytest.mark.parametrize("how, message", [
    ("deleted", "holds 16 rows but its collect.json counts 24; a shard is missing: rerun `python -m distill.collect "),
    ("truncated", "is unreadable ("),
])
def test_a_damaged_collection_is_refused_before_training(tiny_collected, tmp_path, how, message, monkeypatch):
    from distill.train import job

    data = _damaged(tiny_collected, tmp_path, how)
    monkeypatch.setattr(job, "build_model", lambda *a: pytest.fail("the draft was built from damaged data"))
    argv = _argv(tiny_collected, tmp_path / "run")
    argv[argv.index("--data") + 1] = str(data)
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(argv)




def test_nan_loss_stops_naming_the_step_and_the_last_good_checkpoint(tiny_collected, tmp_path, monkeypatch):
    real, calls = losses.combined_loss, []

    def nan_at_step_3(*args, **kwargs):
        loss, parts = real(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan"), parts) if len(calls) == 3 else (loss, parts)

    monkeypatch.setattr(losses, "combined_loss", nan_at_step_3)
    run = tmp_path / "run"
    with pytest.raises(
        UserError, match=f"nan at step 3.*last good checkpoint is {run / 'checkpoint-000002'}"
    ):
        _train(_argv(tiny_collected, run, "--vocab", "512", "--max-nonfinite-steps", "1"))  # stop at the first
    assert [p.name for p in checkpoints.complete(run)] == ["checkpoint-000002"]
    assert not list(run.glob(".tmp-*"))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "checkpoint-000002" / "hf")
    assert model.config.vocab_size == 512
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize(
    "edit, extra, message",
    [
        ({"tokenizer": "0123456789abcdef"}, [], "collected with another tokenizer"),
        ({"k": 0}, [], "no top-k logprobs"),
        ({"k": 0}, ["--loss", "{top1: 1.0}"], "no top-k logprobs"),  # top1 reads the teacher's top-k ids
    ],
)
def test_foreign_or_unusable_data_is_refused(tiny_collected, tmp_path, edit, extra, message):
    data = shutil.copytree(tiny_collected.data, tmp_path / "data")
    info = json.loads((data / "collect.json").read_text())
    (data / "collect.json").write_text(json.dumps({**info, **edit}))
    argv = _argv(tiny_collected, tmp_path / "run") + extra
    argv[argv.index("--data") + 1] = str(data)
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_data_from_a_different_tokenizer_is_refused(tiny_collected, tiny_tokenizer, tiny_llama, tmp_path):
    """Really collected by another target (97-token tokenizer), not just an edited fingerprint."""
    from distill.collect import CollectConfig, run

    other = tmp_path / "other"
    model = tiny_llama(seed=0, layers=1, eos_token_id=1)
    model.save_pretrained(other)
    tiny_tokenizer().save_pretrained(other)
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "a", "category": "x", "prompt": "t5 t6 t7"}) + "\n")
    run(
        CollectConfig(
            target=str(other),
            prompts=str(tmp_path / "p.jsonl"),
            output=str(tmp_path / "data"),
            chat_template=False,
            max_new_tokens=4,
            topk=4,
        )
    )
    argv = _argv(tiny_collected, tmp_path / "run")
    argv[argv.index("--data") + 1] = str(tmp_path / "data")
    with pytest.raises(SystemExit, match="collected with another tokenizer"):
        main(argv)


# --- W&B offline --------------------------------------------------------------------------------------------------


def _wandb_records(path: Path):
    """Records of a .wandb file: leveldb-log framing (32 KiB blocks, 7-byte chunk headers) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer too small for a header: zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:  # full
            yield _record(pb, chunk)
        elif kind == 2:  # first
            buf = chunk
        elif kind == 3:  # middle
            buf += chunk
        else:  # last
            yield _record(pb, buf + chunk)


def _record(pb, raw: bytes):
    record = pb.Record()
    record.ParseFromString(raw)
    return record


def test_wandb_offline_run_holds_the_metrics(tiny_collected, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "unset")  # restored after the test, as the tracker sets it
    monkeypatch.delenv("WANDB_SILENT")  # the tracker makes W&B silent by default
    run = tmp_path / "run"
    _train(
        _argv(
            tiny_collected,
            run,
            "--max-steps",
            "2",
            "--eval-every",
            "2",
            "--report-to",
            "wandb",
            "--vocab",
            "512",
            "--spec-eval-prompts",
            "1",
        )
    )
    printed = capfd.readouterr()
    assert "wandb:" not in printed.out + printed.err, printed.err[-2000:]
    files = list(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history: dict[int, dict] = {}
    config = {}
    for r in _wandb_records(files[0]):
        kind = r.WhichOneof("record_type")
        if kind == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history.setdefault(row["_step"], {}).update(row)
        elif kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in r.run.config.update})
            run_id = r.run.run_id
    assert config["max_steps"] == 2 and config["vocab"] == 512
    # what W&B holds is what metrics.jsonl holds, step for step
    for m in _metrics(run):
        for k, v in m.items():
            if k not in ("step", "time"):
                assert history[m["step"]][k] == pytest.approx(v), (m["step"], k)
    assert {"train/loss", "train/lr"} <= set(history[1]) and "eval/acceptance_proxy" in history[0]
    assert {"eval/acceptance_proxy", "eval/acceptance_rate", "eval/tau"} <= set(history[2])
    meta = json.loads((run / "checkpoint-000002" / "hf" / "specdistill.json").read_text())
    assert meta["wandb"]["run_id"] == run_id
    assert (
        json.loads((run / "checkpoint-000002" / "trainer_state.json").read_text())["wandb_run_id"] == run_id
    )


# --- slow: a real SIGKILL, and real multi-process DeepSpeed launches --------------------------------------------


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow
def test_sigkilled_run_resumes_exactly(run_a, tiny_collected, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "distill/train.py", *_argv(tiny_collected, run)]
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not (run / "checkpoint-000002").is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, (tmp_path / "first.log").read_text()[-3000:]
    assert not (run / "checkpoint-000006").exists()

    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from" in done.stdout
    _assert_same_curve(run, run_a, [1, 2, 3, 4, 5, 6])
    _assert_each_step_once(run)
    _assert_same_weights(
        run / "checkpoint-000006" / "model.safetensors", run_a / "checkpoint-000006" / "model.safetensors"
    )
    _assert_same_weights(
        run / "checkpoint-000006" / "hf" / "model.safetensors",
        run_a / "checkpoint-000006" / "hf" / "model.safetensors",
    )


@pytest.mark.slow
@pytest.mark.parametrize("zero", ["zero2", "zero3"])
def test_accelerate_deepspeed_two_processes(tiny_collected, tmp_path, zero):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    cmd = [
        "accelerate",
        "launch",
        "--config_file",
        f"configs/accelerate/{zero}.yaml",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "distill/train.py",
        *_argv(tiny_collected, run, "--precision", "fp32"),
        "--max-steps",
        "3",
        "--batch-size",
        "2",
        "--save-every",
        "2",
    ]
    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert done.stdout.count("draft: 2 layers") == 1  # the main process alone reports

    # metrics once per step (main process only), and the loss is the mean over both ranks
    metrics = _metrics(run)
    assert [s for s, _ in _losses(run)] == [1, 2, 3]
    assert [m["step"] for m in metrics if "eval/acceptance_proxy" in m] == [0, 3]
    assert all(
        m["train/loss"] == pytest.approx(m["train/loss_fkl"], abs=2e-5) for m in metrics if "train/loss" in m
    )

    assert [p.name for p in checkpoints.complete(run)] == ["checkpoint-000003", "checkpoint-000002"]
    hf = run / "checkpoint-000003" / "hf"
    draft, info = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    target = AutoModelForCausalLM.from_pretrained(tiny_collected.target, dtype=torch.float32)
    # gathered, real weights: the frozen embeddings are the target's, the trained second layer (the target's
    # layer 1: a count keeps the first N layers) moved away from it
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
    t_up, d_up = target.model.layers[1].mlp.up_proj.weight, draft.model.layers[1].mlp.up_proj.weight
    assert d_up.shape == t_up.shape and not torch.equal(d_up, t_up) and torch.allclose(d_up, t_up, atol=0.1)
    if zero == "zero2":  # resumes exactly (ZeRO's partitioned fused-AdamW state included): step 3 redone from step 2
        first = dict(_losses(run))[3]
        kept = tmp_path / "checkpoint-000003"
        shutil.move(run / "checkpoint-000003", kept)
        again = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=500)
        assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-4000:])
        assert f"resumed from {run / 'checkpoint-000002'} at step 2" in again.stdout
        assert dict(_losses(run))[3] == first
        _assert_same_weights(run / "checkpoint-000003" / "hf" / "model.safetensors", kept / "hf" / "model.safetensors")


def test_several_collected_datasets_concatenate_on_their_common_columns():
    """--data [A, B]: e.g. target outputs plus on-policy rows, which carry extra columns."""
    import datasets

    from distill.train import concatenate

    a = datasets.Dataset.from_dict({"id": ["a"], "prompt_ids": [[1]], "response_ids": [[2, 3]]})
    b = datasets.Dataset.from_dict({"id": ["b"], "prompt_ids": [[4]], "response_ids": [[5]], "generator": ["d"]})
    both = concatenate([a, b])
    assert both["id"] == ["a", "b"] and sorted(both.column_names) == ["id", "prompt_ids", "response_ids"]
    assert concatenate([a]) is a


# --- examples: the default --max-seq-len, data left on disk ---------------------------------------------------


def _long_data(tmp_path, response_len: int):
    """A Data of 3 rows with responses of response_len tokens, collected (its collect.json says) with
    max_new_tokens = response_len; teacher row t starts with response token t."""
    import datasets

    from distill.collect.shards import FEATURES
    from distill.train.data import Data

    rows = [{"id": f"r{i}", "category": "c", "source": "target", "prompt_ids": [5, 6, 7],
             "response_ids": list(range(100 + i, 100 + i + response_len)),
             "topk_ids": [[t, 1] for t in range(100 + i, 100 + i + response_len)],
             "topk_logprobs": [[-0.5, -2.0]] * response_len} for i in range(3)]
    datasets.Dataset.from_list(rows, features=FEATURES).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    return Data(ds, ds, [{"k": 2, "settings": {"mode": "generate", "max_new_tokens": response_len}}])


def test_the_default_max_seq_len_fits_the_longest_response_the_collection_holds(tmp_path):
    import warnings

    from distill.train import batches
    from distill.train.data import PROMPT_TOKENS, make_examples

    data = _long_data(tmp_path, 700)  # longer than the old fixed default of 512
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is cut, so nothing is warned
        train_ex, eval_ex = make_examples(TrainConfig(), data)
    assert train_ex.n.tolist() == [700] * 3 and train_ex.p.tolist() == [3] * 3
    b = batches.collate(train_ex.take([0, 1, 2]), None)
    assert b["labels"].tolist() == [t for i in range(3) for t in range(100 + i, 800 + i)]
    assert torch.equal(b["topk_ids"][:, 0], b["labels"])  # label t against teacher row t, position by position
    assert TrainConfig().max_seq_len is None and PROMPT_TOKENS == 512

    with pytest.warns(UserWarning, match=r"3 of 3 responses .* first 99 tokens"):  # an explicit value still wins
        train_ex, _ = make_examples(TrainConfig(max_seq_len=100), data)
    b = batches.collate(train_ex.take([2]), None)
    assert b["labels"].tolist() == list(range(102, 201)) and torch.equal(b["topk_ids"][:, 0], b["labels"])


def test_scored_collections_default_to_their_longest_stored_response(tmp_path):
    from distill.train.data import default_max_seq_len

    data = _long_data(tmp_path, 40)
    data.infos[0]["settings"] = {"mode": "score", "max_new_tokens": 8}  # scored rows are not bounded by it
    assert default_max_seq_len(TrainConfig(), data) == 40 + 512
