"""The main job: collect -> train -> evaluate -> report, on one target, with one command.

    python -m distill.pipeline --config configs/pipeline/default.yaml
    python -m distill.pipeline --config configs/pipeline/default.yaml --preset quick     # a first look in minutes

Each stage writes under --output and resumes: rerunning the same command skips finished collection,
continues training from its last checkpoint, and re-evaluates. Stage settings are the stages' own configs
(`collect`, `heldout`, `train`, `evaluate` mappings in the YAML override distill.collect / distill.train /
distill.evaluate defaults); the pipeline only wires their inputs and outputs together.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from transformers import AutoConfig

from decode import cli
from decode.errors import UserError
from decode.runners import FAST_MODEL_TYPES, FastLlama
from decode.targets import resolve
from distill import collect, evaluate, train
from distill.evaluate.report import headline

TRAIN_SCRIPT = Path(__file__).parent / "train.py"  # what `accelerate launch` runs


@dataclass
class PipelineConfig:
    target: str = field(default="default", metadata={"help": "target model (every stage)"})
    output: str = field(default="runs/pipeline", metadata={"help": "root folder of all stage outputs"})
    collect: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides for the training data"})
    heldout: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides for held-out data (proxy)"})
    train: dict = field(default_factory=dict, metadata={"help": "distill.train overrides"})
    evaluate: dict = field(default_factory=dict, metadata={"help": "distill.evaluate overrides"})
    accelerate_config: str | None = field(default=None, metadata={"help": "train under `accelerate launch` with this config"})
    preset: str | None = field(default=None, metadata={"help": "quick = a small first look"})

    SECTIONS = ("collect", "heldout", "train", "evaluate")  # merged key by key: YAML < preset < flag (decode.cli)
    PRESETS = {
        "quick": {
            "collect": {"limit": 96, "max_new_tokens": 48},
            "heldout": {"limit": 24, "max_new_tokens": 48},
            "train": {"max_steps": 40, "eval_every": 20, "save_every": 20},
            "evaluate": {"limit": 8, "max_new_tokens": 32},
        }
    }


def stage_config(cls, base: dict, overrides: dict, name: str):
    valid = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UserError(f"pipeline `{name}` section: unknown option(s) {unknown}; valid: {sorted(valid)}")
    return cls(**{**base, **overrides})


def data_stages(target: str, out: Path, collect_over: dict, heldout_over: dict):
    """The two collections every draft needs: train prompts, and held-out prompts for the acceptance proxy
    (same generation settings, so the proxy compares like with like)."""
    c = stage_config(collect.CollectConfig, {"target": target, "prompts": "train", "output": str(out / "collect")}, collect_over, "collect")
    h = stage_config(collect.CollectConfig, {"target": target, "prompts": "heldout", "output": str(out / "heldout"), "limit": 64,
                                       "max_new_tokens": c.max_new_tokens, "topk": c.topk}, heldout_over, "heldout")
    return c, h


def check_target(target: str, t, e) -> None:
    """Refuse, from the target's config alone, a draft design or decoder setting its architecture cannot take."""
    tc = AutoConfig.from_pretrained(resolve(target))
    t.design().check(tc)  # widths, layers, vocabulary, and the copy circuit's Llama-only build
    if max(e.candidate_counts()) > 1 and not FastLlama.supports_config(tc):
        raise UserError(f"evaluate: candidates {e.candidates} (the draft's top-K verified at the first position) needs "
                        f"the FastLlama runner ({', '.join(FAST_MODEL_TYPES)} models without a sliding window); this "
                        f"target is {tc.model_type!r}: set evaluate: {{candidates: 1}}")


def run(cfg: PipelineConfig, argv: list[str]) -> dict:
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    cli.save(cfg, out / "pipeline.config.json")
    s = {k: getattr(cfg, k) for k in cfg.SECTIONS}  # YAML < preset < flags, merged by cli.parse
    command = "python -m distill.pipeline " + " ".join(argv)  # recorded by every stage it runs
    timings = {}

    # --- every stage's settings, and what the target's config alone can refuse, before the first stage runs:
    # collection takes minutes here and hours on a large target
    c, h = data_stages(cfg.target, out, s["collect"], s["heldout"])
    t = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                         "output": str(out / "train")}, s["train"], "train")
    e = stage_config(evaluate.EvalConfig, {"target": cfg.target, "run": t.output, "output": str(out / "eval")},
                     s["evaluate"], "evaluate")
    check_target(cfg.target, t, e)

    t0 = time.perf_counter()
    print(f"== collect: target outputs on the train prompts -> {c.output}", flush=True)
    collect.run(c, command=command)
    print(f"== collect: held-out outputs for the acceptance proxy -> {h.output}", flush=True)
    collect.run(h, command=command)
    timings["collect_s"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    print(f"== train -> {out / 'train'}", flush=True)
    if cfg.accelerate_config:
        yaml_path = out / "train.yaml"
        import yaml

        yaml_path.write_text(yaml.safe_dump(cli.to_dict(t)))
        cmd = ["accelerate", "launch", "--config_file", cfg.accelerate_config, str(TRAIN_SCRIPT), "--config", str(yaml_path)]
        print("   " + " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=os.environ.copy()).returncode != 0:
            raise UserError("training failed (see its output above); rerun the same command to resume it")
    else:
        train.train(t, [], command=command)
    timings["train_s"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    print(f"== evaluate -> {out / 'eval'}", flush=True)
    result = evaluate.run(e, command=command)
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    summary = {"output": str(out), "report": str(out / "eval" / "report.md"), "best": result.get("best"), "timings": timings}
    (out / "pipeline.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(headline(result))
    return summary


def main(argv: list[str] | None = None) -> None:
    _, summary = cli.run_job(PipelineConfig, run, argv, __doc__)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
