"""Bad inputs to training (distill/train.py) and the copy probe: data that is missing, foreign or damaged, numbers
out of range, designs the target cannot give, run folders with a crafted or torn checkpoint, and a bad input under
`accelerate launch`."""

import json
import os
import shutil
import sys
from pathlib import Path

from badinputs import REPO, Case


def _args(env, *extra: str, data: str | None = None, run: Path | None = None) -> list[str]:
    """A tiny training's arguments on the session's data (as tests/test_train.py runs it), with `extra`."""
    return ["--target", env.base.target, "--data", data or env.base.data, "--eval-data", env.base.heldout,
            "--output", str(run or env.tmp / "run"), "--max-steps", "2", "--batch-size", "4", "--save-every", "2",
            "--eval-every", "2", "--warmup-steps", "1", "--report-to", "none", *extra]


def _data(env, edit=None) -> str:
    """A copy of the session's collected data in env.tmp; edit(path) damages it."""
    data = Path(shutil.copytree(env.base.data, env.tmp / "data"))
    if edit:
        edit(data)
    return str(data)


def _first_shard(data: Path) -> Path:
    return sorted((data / "shards").iterdir())[0]


def _truncate_arrow(data: Path) -> None:
    arrow = next(_first_shard(data).glob("*.arrow"))
    os.truncate(arrow, arrow.stat().st_size // 2)


def _edit_info(data: Path, **changes) -> None:
    info = json.loads((data / "collect.json").read_text())
    (data / "collect.json").write_text(json.dumps({**info, **changes}))


def _no_rows(data: Path) -> None:
    shutil.rmtree(data / "shards")
    _edit_info(data, rows=0)


def _run(env) -> Path:
    """A copy of a finished 2-step run (one checkpoint, checkpoint-000002), trained once per session."""
    done = env.shared / "train-run"
    if not done.is_dir():
        import torch

        from decode import cli
        from distill.train import TrainConfig, train

        building = env.shared / "train-run.tmp"
        shutil.rmtree(building, ignore_errors=True)
        argv = _args(env, run=building)
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            train(cli.parse(TrainConfig, argv), argv)
        finally:
            torch.set_num_threads(n)
        os.rename(building, done)
    return Path(shutil.copytree(done, env.tmp / "run"))


class _Marker:
    """Pickles as open(path, "w"): loading it with weights_only=False would create the file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _crafted_optimizer(env) -> list[str]:
    import torch

    run = _run(env)
    torch.save({"state": _Marker(env.tmp / "pwned")}, run / "checkpoint-000002" / "optimizer.bin")
    return _args(env, run=run)


def _torn_rng(env) -> list[str]:
    run = _run(env)
    os.truncate(run / "checkpoint-000002" / "random_states_0.pkl", 40)
    return _args(env, run=run)


def _launched(env) -> list[str]:
    """`accelerate launch -q` of the script with a negative --lr: absolute paths, as the case runs in env.tmp."""
    accelerate = Path(sys.executable).with_name("accelerate")
    return [str(accelerate if accelerate.is_file() else "accelerate"), "launch", "-q", "--config_file",
            str(REPO / "configs/accelerate/cpu.yaml"), str(REPO / "distill/train.py"), *_args(env, "--lr=-1e-3")]


CASES = [
    Case("train", "--data is a folder that does not exist",
         lambda env: _args(env, data=str(env.tmp / "missing")), "is not a collected dataset (no collect.json)"),
    Case("train", "--data is a folder that holds no collection",
         lambda env: _args(env, data=str(env.tmp)), "point --data at the output of distill.collect"),
    Case("train", "--data collected with another tokenizer",
         lambda env: _args(env, data=_data(env, lambda d: _edit_info(d, tokenizer="0123456789abcdef"))),
         "was collected with another tokenizer"),
    Case("train", "--data whose collect.json is torn",
         lambda env: _args(env, data=_data(env, lambda d: (d / "collect.json").write_text('{"rows": 2'))),
         "collect.json is not valid JSON"),
    Case("train", "--data with a deleted shard folder",
         lambda env: _args(env, data=_data(env, lambda d: shutil.rmtree(_first_shard(d)))),
         "a shard is missing: rerun `python -m distill.collect"),
    Case("train", "--data with a truncated .arrow shard",
         lambda env: _args(env, data=_data(env, _truncate_arrow)), "is unreadable (OSError"),
    Case("train", "--data with no rows",
         lambda env: _args(env, data=_data(env, _no_rows)), "holds no collected data (no shards)"),
    Case("train", "--eval-data is a folder that does not exist",
         lambda env: _args(env, "--eval-data", str(env.tmp / "missing")), "is not a collected dataset"),
    Case("train", "a negative --lr", lambda env: _args(env, "--lr=-1e-3"), "--lr must be a number > 0"),
    Case("train", "--max-steps 0", lambda env: _args(env, "--max-steps", "0"), "--max-steps must be >= 1, got 0"),
    Case("train", "a negative --keep-last", lambda env: _args(env, "--keep-last", "-1"), "--keep-last must be >= 0"),
    Case("train", "a negative --save-every", lambda env: _args(env, "--save-every", "-1"), "--save-every must be >= 0"),
    Case("train", "--compile with a value it does not take", lambda env: _args(env, "--compile", "sometimes"),
         "--compile must be one of auto, on, off"),
    Case("train", "a negative loss weight", lambda env: _args(env, "--loss", "{fkl: 1.0, ce: -1.0}"),
         "give weights >= 0"),
    Case("train", "--parallel 1 (a block of one is a chain)", lambda env: _args(env, "--parallel", "1"),
         "--parallel 1: give the block size K >= 2"),
    Case("train", "--parallel with weight decay on a frozen embedding",
         lambda env: _args(env, "--parallel", "4", "--weight-decay", "0.01"), "would still shrink the frozen rows"),
    Case("train", "an unknown --parallel-weight", lambda env: _args(env, "--parallel", "4", "--parallel-weight", "pard"),
         "--parallel-weight must be one of uniform, accepted"),
    Case("train", "an unknown --init", lambda env: _args(env, "--init", "magic"),
         "use target_layers, prune, random, pretrained:PATH or other_tokenizer:PATH"),
    Case("train", "--layers beyond the target's depth", lambda env: _args(env, "--layers", "9"),
         "the draft needs 1..4 layers"),
    Case("train", "an unknown --design", lambda env: _args(env, "--design", "medusa"),
         "--design must be standalone or feature_head"),
    Case("train", "an unknown --features source", lambda env: _args(env, "--design", "feature_head", "--features", "disk"),
         "--features must be one of stored, online"),
    Case("train", "a feature head with the copy circuit",
         lambda env: _args(env, "--design", "feature_head", "--copy-circuit", "true"),
         "--design feature_head is one decoder layer"),
    Case("train", "feature layers beyond the target's depth",
         lambda env: _args(env, "--design", "feature_head", "--feature-layers", "[1, 9]"),
         "--feature-layers [1, 9]: give target layer ids in 1..3"),
    Case("train", "--data-tokens beyond the collected tokens", lambda env: _args(env, "--data-tokens", "99999999"),
         "--data-tokens 99999999: the training rows hold"),
    Case("train", "a training step that needs more memory than the process may use",
         lambda env: _args(env, "--memory-gb", "0.03"), "GiB --memory-gb allows; give --max-seq-len"),
    Case("train", "--init pretrained: a folder that holds no model",
         lambda env: _args(env, "--init", f"pretrained:{env.tmp}"), "is not a model folder (no config.json)"),
    Case("train", "--ttt-decay 0", lambda env: _args(env, "--design", "feature_head", "--ttt-decay", "0"),
         "--ttt-decay must be in (0, 1]"),
    Case("train", "a resume whose optimizer.bin is a crafted pickle", _crafted_optimizer,
         "holds an object a checkpoint never holds"),
    Case("train", "a resume whose random_states_0.pkl is torn", _torn_rng, "random_states_0.pkl is unreadable"),
    Case("train", "a bad input under accelerate launch -q", _launched, "--lr must be a number > 0", process=True,
         environ={"OMP_NUM_THREADS": "1"}),
    Case("copy probe", "--draft is a folder that does not exist",
         lambda env: ["--draft", str(env.tmp / "missing"), "--data", env.base.heldout, "--target", env.base.target],
         "missing"),
    Case("copy probe", "no --data", lambda env: ["--draft", str(env.tmp)], "give --draft DRAFT_DIR and --data"),
    Case("copy probe", "--data is a folder that does not exist",
         lambda env: ["--draft", "layers:0,1", "--data", str(env.tmp / "missing"), "--target", env.base.target],
         "missing"),
]
