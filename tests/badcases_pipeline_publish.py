"""Bad inputs of the jobs that chain stages (pipeline, sweep) and of publish: each stops in its first seconds, before
any collection, training or the minutes of publish's checks."""

import copy
import json
import sys
from pathlib import Path

import torch
from badinputs import REPO, Case
from safetensors.torch import save_file

DEFAULT_YAML = str(REPO / "configs" / "pipeline" / "default.yaml")


def _yaml(env, text: str, name: str = "bad.yaml") -> str:
    p = env.tmp / name
    p.write_text(text)
    return str(p)


def _pipeline(env, *more: str) -> list[str]:
    """The default recipe on the tiny test target, writing under the case's folder."""
    return ["--config", DEFAULT_YAML, "--target", env.base.target, "--output", str(env.tmp / "run"), *more]


def _sweep(env, text: str) -> list[str]:
    head = f"target: {env.base.target}\noutput: {env.tmp / 'sweep'}\n"
    return ["--config", _yaml(env, head + text, "sweep.yaml")]


def _draft(env, meta: dict | None = None, other_tokenizer: bool = False) -> str:
    """A folder publish takes for a draft checkpoint (config, weights, specdistill.json, the target's tokenizer);
    the weights are a stand-in, as every case here stops before they are read."""
    d = env.tmp / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text((Path(env.base.target) / "config.json").read_text())
    save_file({"w": torch.zeros(2)}, str(d / "model.safetensors"))
    (d / "specdistill.json").write_text(json.dumps({"target": env.base.target} if meta is None else meta))
    tok = env.base.tokenizer
    if other_tokenizer:
        tok = copy.deepcopy(tok)
        tok.add_tokens(["<not-the-target's>"])
    tok.save_pretrained(d)
    return str(d)


def _publish(*argv: str) -> list[str]:
    return [sys.executable, "-m", "distill.publish", *argv]


def _not_empty(env) -> str:
    (env.tmp / "out").mkdir()
    (env.tmp / "out" / "old.txt").write_text("x")
    return str(env.tmp / "out")


NO_TOKEN = {"HF_TOKEN": "", "HF_TOKEN_PATH": "/nonexistent/specdistill-no-token"}

CASES = [
    # --- pipeline: every section checked before collection
    Case("pipeline", "a typo in the train: section", lambda env: _pipeline(env, "--train", "{max_step: 10}"),
         "pipeline `train` section: unknown option(s) ['max_step']"),
    Case("pipeline", "a typo in the evaluate: section of the YAML",
         lambda env: _pipeline(env, "--config", _yaml(env, "evaluate: {gama: 3}\n")),
         "pipeline `evaluate` section: unknown option(s) ['gama']"),
    Case("pipeline", "a wrong type in the train: section", lambda env: _pipeline(env, "--train", "{lr: fast}"),
         "pipeline `train` section: lr must be a float"),
    Case("pipeline", "an unknown design in --designs", lambda env: _pipeline(env, "--designs", "[standalone, medusa]"),
         "--designs ['standalone', 'medusa']: give auto, all, or one or more of ['standalone', 'feature_head', 'parallel']"),
    Case("pipeline", "one unknown design as --designs", lambda env: _pipeline(env, "--designs", "medusa"),
         "--designs medusa: give auto, all, or one or more of ['standalone', 'feature_head', 'parallel']"),
    Case("pipeline", "a parallel: section that continues a chain --designs leaves out",
         lambda env: _pipeline(env, "--designs", "[feature_head, parallel]"),
         "pipeline `parallel` section: init chain continues the standalone draft"),
    Case("pipeline", "a parallel: section with a block of one", lambda env: _pipeline(env, "--parallel", "{parallel: 1}"),
         "pipeline `parallel` section: --parallel 1: give the block size K >= 2"),
    Case("pipeline", "a standalone design in the head: section", lambda env: _pipeline(env, "--head", "{design: standalone}"),
         "pipeline `head` section: its design is feature_head"),
    Case("pipeline", "an onpolicy: section that continues a feature head",
         lambda env: _pipeline(env, "--onpolicy", "{rounds: 1, train: {design: feature_head}}"),
         "pipeline `onpolicy train` section: --design feature_head is one decoder layer"),
    Case("pipeline", "onpolicy: rounds that are not a whole number", lambda env: _pipeline(env, "--onpolicy", "{rounds: 1.5}"),
         "rounds must be a whole number >= 0"),
    Case("pipeline", "a greedy sample in the collect: section",
         lambda env: _pipeline(env, "--collect", "{samples: 4, sample_temperature: 0}"), "give --sample-temperature > 0"),
    Case("pipeline", "head feature layers beyond the target's depth",
         lambda env: _pipeline(env, "--head", "{feature_layers: [2, 99]}"), "--feature-layers [2, 99]: give target layer ids"),
    Case("pipeline", "a wrong type in the evaluate: section", lambda env: _pipeline(env, "--evaluate", "{limit: all}"),
         "pipeline `evaluate` section: limit must be an int"),
    Case("pipeline", "a list where the train: section should be",
         lambda env: ["--config", _yaml(env, "train: [1, 2]\n"), "--target", env.base.target],
         "train must be a mapping"),
    Case("pipeline", "an evaluate: value only read at evaluation", lambda env: _pipeline(env, "--evaluate", "{checkpoints: best}"),
         "pipeline `evaluate` section: --checkpoints must be 'all' or 'last'"),
    Case("pipeline", "unknown preset", lambda env: _pipeline(env, "--preset", "huge"),
         "argument --preset: invalid choice: 'huge'"),
    Case("pipeline", "--accelerate-config that does not exist",
         lambda env: _pipeline(env, "--accelerate-config", str(env.tmp / "zero9.yaml")), "zero9.yaml: no such file"),
    Case("pipeline", "--accelerate-config that is not a mapping",
         lambda env: _pipeline(env, "--accelerate-config", _yaml(env, "- a list\n", "acc.yaml")),
         "expected accelerate's settings as a YAML mapping"),
    Case("pipeline", "a target that does not exist", lambda env: _pipeline(env, "--target", str(env.tmp / "no-model")),
         "model not found"),
    Case("pipeline", "a design the target cannot take", lambda env: _pipeline(env, "--train", "{layers: 9}"),
         "layers=9"),
    # --- sweep: checked before its first stage
    Case("sweep", "a design with an unknown option", lambda env: _sweep(env, "designs: [{name: a, layer: 1}]\n"),
         "sweep design 'a': unknown option(s) ['layer']"),
    Case("sweep", "an empty grid", lambda env: _sweep(env, "grid: {layers: []}\n"), "`grid` option(s) ['layers'] list no values"),
    Case("sweep", "no designs at all", lambda env: _sweep(env, ""), "the sweep declares no designs"),
    Case("sweep", "designs that are not mappings", lambda env: _sweep(env, "designs: [1, 2]\n"),
         "`designs` must be a list of mappings"),
    Case("sweep", "a wrong type in the shared train: section",
         lambda env: _sweep(env, "train: {max_steps: many}\ngrid: {layers: [1, 2]}\n"),
         "sweep `train` section: max_steps must be an int"),
    Case("sweep", "a typo in the evaluate: section", lambda env: _sweep(env, "evaluate: {limt: 2}\ngrid: {layers: [1]}\n"),
         "sweep `evaluate` section: unknown option(s) ['limt']"),
    Case("sweep", "no design the target can take", lambda env: _sweep(env, "grid: {layers: [7, 9]}\n"),
         "no design of the sweep can run on this target"),
    # --- publish: the command line, the Hub and the draft before the minutes of checks
    Case("publish", "a draft folder that does not exist",
         lambda env: [str(env.tmp / "nowhere"), "--repo-id", "org/x", "--dry-run", str(env.tmp / "out")], "is not a folder"),
    Case("publish", "a repo id that is not ORG/NAME",
         lambda env: [_draft(env), "--repo-id", "just-a-name", "--dry-run", str(env.tmp / "out")], "invalid --repo-id"),
    Case("publish", "no Hub token without --dry-run", lambda env: _publish(_draft(env), "--repo-id", "org/x"),
         "no Hugging Face token", process=True, environ=NO_TOKEN),
    Case("publish", "HF_HUB_OFFLINE=1 without --dry-run", lambda env: _publish(_draft(env), "--repo-id", "org/x"),
         "HF_HUB_OFFLINE is set, but uploading needs the Hub", process=True,
         environ={"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_x"}),
    Case("publish", "--eval folder without report.json",
         lambda env: [_draft(env), "--repo-id", "org/x", "--eval", str(env.tmp), "--dry-run", str(env.tmp / "out")],
         "no evaluation report"),
    Case("publish", "a draft trained with another tokenizer than the target's",
         lambda env: [_draft(env, other_tokenizer=True), "--repo-id", "org/x", "--dry-run", str(env.tmp / "out")],
         "the draft's tokenizer differs from the target's"),
    Case("publish", "--dry-run folder that is not empty",
         lambda env: [_draft(env), "--repo-id", "org/x", "--dry-run", _not_empty(env)], "exists and is not empty"),
    Case("publish", "--dry-run path that is a file",
         lambda env: [_draft(env), "--repo-id", "org/x", "--dry-run", _yaml(env, "x", "a-file")], "is a file, not a folder"),
    Case("publish", "--vllm-python that does not exist",
         lambda env: [_draft(env), "--repo-id", "org/x", "--vllm-python", str(env.tmp / "venv/bin/python"),
                      "--dry-run", str(env.tmp / "out")], "no such interpreter"),
    Case("publish", "a draft whose record names no target",
         lambda env: [_draft(env, meta={}), "--repo-id", "org/x", "--dry-run", str(env.tmp / "out")],
         "names no target; pass --target"),
    Case("publish", "--require-eval without --eval",
         lambda env: [_draft(env), "--repo-id", "org/x", "--require-eval", "--dry-run", str(env.tmp / "out")],
         "--require-eval: give --eval EVAL_DIR"),
]
