"""The main job: collect -> train -> evaluate -> report -> ship, on one target, with one command.

    python -m distill.pipeline --config configs/pipeline/default.yaml
    python -m distill.pipeline --config configs/pipeline/default.yaml --preset quick     # a first look in minutes
    python -m distill.pipeline --config configs/pipeline/default.yaml --preset best      # more data, longer training
    python -m distill.pipeline --config configs/pipeline/default.yaml --preset long      # drafts for 1K-8K prompts

A preset's run writes to its own folder, the output + `-PRESET` (runs/pipeline-default-quick here), unless --output
is given on the command line, so the full run after a quick look starts its own collection. Every stage section
is checked (options, types, each config's checks, the prompt sets, the target's architecture) before the first
collection starts.

Three kinds of draft can be trained on the same collected data (`designs`): a standalone draft (`train` section,
RUN/train), a feature head (`head` section, RUN/train-head, distill/train/head.py) and a parallel draft (`parallel`
section, RUN/train-parallel, distill/train/parallel.py: by default the standalone draft continued with mask tokens,
the same size, for a block of the largest γ evaluate gives it). By default (`designs: auto`) the plan times each
design's untrained draft on this machine after collection and trains only those the cost model lets win at the α
the data can buy (distill/plan_designs.py, RUN/plan.json, one printed line); `--designs all` trains all three, a
list trains those. Evaluation measures them side by side in the decoder, and the one with the highest measured
speedup is copied to RUN/draft, the folder to publish (pipeline.json says which and why). Stage times are printed
at the end, written to RUN/timings.json and added to the report.
`--drafts-extra D...` measures off-the-shelf drafts beside them (any causal LM, `default`, one with another
tokenizer), never shipped: pipeline.json's `off_the_shelf` and the report say whether training was worth it.

Each stage writes under --output and resumes: rerunning the same command skips finished collection,
continues training from its last checkpoint, and re-evaluates. Stage settings are the stages' own configs
(`collect`, `heldout`, `train`, `evaluate` mappings in the YAML override distill.collect / distill.train /
distill.evaluate defaults); the pipeline only wires their inputs and outputs together.

`--load-format dummy` (a --target folder with only config.json and tokenizer files will do) times a real shape
with random weights: the random target is written once to RUN/target (decode.models.targets.save_dummy, the collect
stage's dtype and device) and every stage loads that folder, so collection, training (which reads the tensors
its draft keeps from the target's files) and evaluation all see the same weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml
from transformers import AutoConfig

from decode import cli
from decode.errors import UserError
from decode.models import targets
from decode.models.targets import check_load_format, load_format_field, load_tokenizer, resolve
from decode.runners.hf import sliding_window
from distill import collect, evaluate, onpolicy, plan_designs, train
from distill.collect import self_prompts, shards, vllm_engine
from distill.collect.job import SETTINGS_SINCE
from distill.evaluate import offshelf
from distill.evaluate.report import add_stage_times, headline, stage_lines
from distill.onpolicy import last_draft
from distill.prompts import load_prompts
from distill.ship import ship, ship_line
from distill.train import copy_circuit, parallel

TRAIN_SCRIPT = Path(__file__).parent / "train.py"  # what `accelerate launch` runs


LONG_SEQ = 8192  # the long preset's training length: the default target's positions


@dataclass
class PipelineConfig:
    target: str = field(default="default", metadata={"help": "target model (every stage)"})
    load_format: str = load_format_field()
    output: str = field(default="runs/pipeline", metadata={"help": "root folder of all stage outputs"})
    collect: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides for the training data"})
    heldout: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides for held-out data (proxy)"})
    train: dict = field(default_factory=dict, metadata={"help": "distill.train overrides (the standalone draft)"})
    head: dict = field(default_factory=dict, metadata={"help": "distill.train overrides for the feature head "
                       "(its design is feature_head)"})
    parallel: dict = field(default_factory=dict, metadata={"help": "distill.train overrides for the parallel draft "
                           "(PARD style, distill/train/parallel.py; init chain: it continues the standalone draft)"})
    designs: list | str = field(default="auto", metadata={"help": "which kinds of draft to train and compare: auto "
                                "(those the plan lets win on this machine), all, or a list of standalone, "
                                "feature_head, parallel"})
    onpolicy: dict = field(default_factory=dict, metadata={"help": "on-policy rounds after the standalone draft's "
                           "training: {rounds: N, collect: {...}, train: {...}} (distill/onpolicy.py)"})
    evaluate: dict = field(default_factory=dict, metadata={"help": "distill.evaluate overrides"})
    drafts_extra: list = field(default_factory=list, metadata={"help": "off-the-shelf drafts (any causal LM, `default`, "
                               "another tokenizer too) evaluated beside the distilled ones: is training worth it?"})
    accelerate_config: str | None = field(default=None, metadata={"help": "train under `accelerate launch` with this config"})
    preset: str | None = field(default=None, metadata={"help": "quick = a small first look; best = more data and "
                                                          "steps (80-85 min alone on 2 CPU cores); long = long "
                                                          "prompts (1K-7K tokens) in training and evaluation"})

    SECTIONS = ("collect", "heldout", "train", "head", "parallel", "onpolicy", "evaluate")  # merged key by key: YAML < preset < flag (decode.cli)
    PRESETS = {
        "quick": {
            "collect": {"limit": 96, "max_new_tokens": 48},
            "heldout": {"limit": 24, "max_new_tokens": 48},
            "train": {"max_steps": 40, "eval_every": 20, "save_every": 20},
            "head": {"max_steps": 40, "eval_every": 20, "save_every": 20},
            "parallel": {"max_steps": 20, "eval_every": 20, "save_every": 20},
            "evaluate": {"limit": 8, "max_new_tokens": 32, "long_prompts": ""},
        },
        # the best draft this 2-core box makes in under 2 hours: four answers per prompt (~230k tokens, the top of
        # configs/sweep/data_scaling.yaml's curve) and the longer schedule of configs/train/four-passes.yaml;
        # measured: α 0.266 against the default's 0.218 on the same 48 held-out prompts (docs/results.md)
        "best": {
            "collect": {"samples": 4, "sample_temperature": 0.8},
            "train": {"vocab": 12288, "loss": {"fkl": 1.0, "top1": 1.0}, "lr": 4.0e-3, "warmup_steps": 20,
                      "min_lr_ratio": 0.0, "max_steps": 1150, "eval_every": 100, "save_every": 200},
            "head": {"max_steps": 600, "eval_every": 100, "save_every": 200},
            "evaluate": {"limit": 48},
        },
        # long prompts (1K-7K tokens) join the short ones; whole prompts up to 8,192 positions in token-budget
        # batches. No feature head: its training-time-test mask grows with the square of the length.
        "long": {"designs": ["standalone", "parallel"],
                 "collect": {"prompts": "train+long", "batch_size": 8},  # 8 rows of 7K tokens: ~2.4 GB of KV cache
                 **{k: {"max_seq_len": LONG_SEQ, "batch_tokens": LONG_SEQ} for k in ("train", "parallel")},
                 "evaluate": {"prompts": "heldout+long-heldout", "limit": 26, "long_prompts": ""}},  # 2 a category
    }

    def __post_init__(self):
        check_load_format(self.load_format)
        if self.designs in DESIGNS:  # `--designs standalone`: one design, as a list of one
            self.designs = [self.designs]
        bad = ([d for d in self.designs if d not in DESIGNS] if isinstance(self.designs, list) else
               [] if self.designs in ("auto", "all") else [self.designs])
        if bad or not self.designs:
            raise UserError(f"--designs {self.designs}: give auto, all, or one or more of {list(DESIGNS)}")

    def design_list(self) -> list[str]:
        """The designs the stages are configured for (auto: every one; the plan picks among them after collection)."""
        return list(DESIGNS) if isinstance(self.designs, str) else list(self.designs)


DESIGNS = ("standalone", "feature_head", "parallel")


def section_values(cls, overrides, where: str) -> dict:
    """A stage section as `cls` takes it: a mapping of its own options, each of the field's type (ints in float
    fields made floats); anything else fails naming the section (`where`) and the option."""
    if not isinstance(overrides, dict):
        raise UserError(f"{where} must be a mapping of option: value, got {overrides!r}")
    valid = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UserError(f"{where}: unknown option(s) {unknown}; valid: {sorted(valid)}")
    return cli.check_values(cls, overrides, where)


def stage_config(cls, base: dict, overrides: dict, name: str, job: str = "pipeline"):
    """One stage's config from the job's wiring (`base`) and the user's section (`overrides`): unknown keys, wrong
    types and the config's own __post_init__ checks all fail here, naming the section."""
    where = f"{job} `{name}` section"
    values = {**base, **section_values(cls, overrides, where)}
    try:
        return cls(**values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def data_stages(target: str, out: Path, collect_over: dict, heldout_over: dict):
    """The two collections every draft needs: train prompts, and held-out prompts for the acceptance proxy
    (same generation settings, so the proxy compares like with like)."""
    c = stage_config(collect.CollectConfig, {"target": target, "prompts": "train", "output": str(out / "collect")}, collect_over, "collect")
    h = stage_config(collect.CollectConfig, {"target": target, "prompts": "heldout", "output": str(out / "heldout"), "limit": 64,
                                       "max_new_tokens": c.max_new_tokens, "topk": c.topk}, heldout_over, "heldout")
    return c, h


def fit_to_target(target: str, t, e):
    """The recipe as this target's architecture can run it: (train config, eval config, notes).

    The default recipe's Llama-only parts are left out for other architectures, each with a note that says why
    (the copy circuit's hand-built layers; token trees on a sliding-window model); everything else
    the target's config alone can refuse is refused here, before collection."""
    try:
        tc = AutoConfig.from_pretrained(resolve(target))
    except (OSError, ValueError) as err:  # a Hub id the Hub does not know (or cannot be reached), a bad config
        raise UserError(f"target {target!r}: cannot read its config ({str(err).splitlines()[0]})") from None
    notes = []
    if t.copy_circuit:
        try:
            copy_circuit.check_architecture(tc)
        except UserError as err:
            t = replace(t, copy_circuit=False)
            notes.append(f"copy circuit left out for this target: {err}")
    if max(e.tree_sizes()) > 0 and sliding_window(tc):
        notes.append(f"evaluate: tree_nodes {e.tree_nodes} left out for this {tc.model_type!r} target: its "
                     f"{sliding_window(tc)}-token sliding window is not applied under a token tree's mask; chains "
                     "are evaluated")
        e = replace(e, tree_nodes=[0])
    t.draft_design().check(tc)  # widths, layers, vocabulary, prune's architectures
    return t, e, notes


def fit_head(target: str, hd, notes: list[str]):
    """The feature head's recipe as this target can run it: --init target_layers needs llama-style layers."""
    from distill.train.head import LAYER_INIT_TYPES, feature_layers

    tc = AutoConfig.from_pretrained(resolve(target))
    feature_layers(hd, tc.num_hidden_layers)
    if hd.init == "target_layers" and tc.model_type not in LAYER_INIT_TYPES:
        notes.append(f"feature head: init random for this {tc.model_type!r} target (target_layers copies a llama-style "
                     f"layer: {', '.join(LAYER_INIT_TYPES)})")
        hd = replace(hd, init="random")
    return hd


def output_folder(cfg: PipelineConfig, argv: list[str]) -> str:
    """Where this run writes. A preset's run gets its own folder (the YAML's or default output + `-PRESET`) unless
    --output is on the command line: a quick look must not leave a collection the full run then refuses."""
    given = any(len(a.split("=")[0]) > 2 and "--output".startswith(a.split("=")[0]) for a in argv)  # argparse takes --out
    if cfg.preset and not given:
        return f"{cfg.output.rstrip('/')}-{cfg.preset}"
    return cfg.output


def check_data(target: str, stages) -> None:
    """Each collection's prompts load, and a collection already on disk was made with the same settings (else
    collect would refuse it, the held-out one only after the train collection ran)."""
    tok = load_tokenizer(target)
    for c in stages:
        if self_prompts.is_self(c.prompts):  # `self:N`: the target writes them when collection starts
            self_prompts.check(c.prompts, tok)
        else:
            load_prompts(c.prompts, c.columns, c.split, c.categories or None, c.limit)
        if c.resolved_engine() == "vllm":
            vllm_engine.require()
        if (Path(c.output) / "collect.settings.json").is_file():  # compares only; nothing is written
            settings = {**c.settings(), "tokenizer": shards.tokenizer_fingerprint(tok)}
            shards.guard_settings(Path(c.output), settings, SETTINGS_SINCE)


def check_accelerate_config(path: str) -> None:
    """The file `accelerate launch --config_file` gets is there and is a YAML mapping, and accelerate is on PATH."""
    flag = f"--accelerate-config {path}"
    if not Path(path).is_file():
        raise UserError(f"{flag}: no such file; give an accelerate config such as configs/accelerate/ddp.yaml")
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise UserError(f"{flag}: malformed YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{flag}: expected accelerate's settings as a YAML mapping, got {type(data).__name__}")
    if shutil.which("accelerate") is None:
        raise UserError(f"{flag}: the `accelerate` command is not on PATH; install accelerate or leave the flag out")


def plan(cfg: PipelineConfig, out: Path):
    """Every stage's config, checked before the first stage runs (collection takes minutes here and hours on a
    large target): each section's keys, types and checks, the recipe against the target's architecture, the
    prompt sets, the accelerate config. Returns (collect, heldout, train, evaluate configs, notes)."""
    s = {k: getattr(cfg, k) for k in cfg.SECTIONS}  # YAML < preset < flags, merged by cli.parse
    if cfg.accelerate_config:
        check_accelerate_config(cfg.accelerate_config)
    c, h = data_stages(cfg.target, out, s["collect"], s["heldout"])
    t = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                         "output": str(out / "train")}, s["train"], "train")
    hd = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                          "output": str(out / "train-head"), "design": "feature_head"}, s["head"], "head")
    if hd.design != "feature_head":
        raise UserError("pipeline `head` section: its design is feature_head (the standalone draft is the `train` section)")
    e = stage_config(evaluate.EvalConfig, {"target": cfg.target, "run": t.output, "output": str(out / "eval"),
                                            "drafts_extra": list(cfg.drafts_extra)}, s["evaluate"], "evaluate")
    pd = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                          "output": str(out / "train-parallel"), **parallel.wiring(e.parallel_gammas())},
                      s["parallel"], "parallel")
    designs = cfg.design_list()
    if "parallel" in designs:
        parallel.check_stage(pd, designs)
    t, e, notes = fit_to_target(cfg.target, t, e)
    if "feature_head" in designs:
        hd = fit_head(cfg.target, hd, notes)
    check_data(cfg.target, (c, h))
    load_prompts(e.prompts, categories=e.categories or None, limit=e.limit, spread=True)
    if e.anchors == "vllm":
        vllm_engine.require("--anchors vllm")
    trains = [x for x, d in ((t, "standalone"), (hd, "feature_head"), (pd, "parallel")) if d in designs]
    rounds = onpolicy.plan(s["onpolicy"], out, c, t, stage_config) if "standalone" in designs else []
    return c, h, trains, rounds, e, notes


def run_stages(cfg: PipelineConfig, out: Path, stages, command: str) -> tuple[dict, dict]:
    """collect (train and held-out prompts) -> train (each design; the standalone one's on-policy rounds) ->
    evaluate, each resuming; (evaluation result, timings)."""
    c, h, trains, rounds, e = stages
    timings = {}

    t0 = time.perf_counter()
    print(f"== collect: target outputs on the train prompts -> {c.output}", flush=True)
    collect.run(c, command=command)
    print(f"== collect: held-out outputs for the acceptance proxy -> {h.output}", flush=True)
    collect.run(h, command=command)
    timings["collect_s"] = round(time.perf_counter() - t0, 1)

    if cfg.designs == "auto":  # each design's untrained draft timed here; those that cannot win are not trained
        t0 = time.perf_counter()
        trains, _ = plan_designs.choose(trains, e, out)
        if rounds and plan_designs.name_of(trains[0]) != "standalone":
            print("pipeline: no on-policy rounds: they continue the standalone draft, which the plan skipped")
            rounds = []
        timings["plan_s"] = round(time.perf_counter() - t0, 1)

    for t in trains:
        t0 = time.perf_counter()
        print(f"== train: {'parallel' if t.parallel else t.design} draft -> {t.output}", flush=True)
        train_one(cfg, out, parallel.from_chain(t, Path(trains[0].output), last_draft), command)
        key = "train_parallel_s" if t.parallel else "train_s" if t.design == "standalone" else "train_head_s"
        timings[key] = round(time.perf_counter() - t0, 1)
    runs = [Path(t.output) for t in trains]
    if rounds:
        t0 = time.perf_counter()
        runs[0], timings["onpolicy"] = onpolicy.run(rounds, runs[0], lambda x: train_one(cfg, out, x, command), command)
        timings["onpolicy_s"] = round(time.perf_counter() - t0, 1)
    # the standalone run (its last round's) is evaluate's --run (every checkpoint, plots by step); the head's last
    # checkpoint joins it
    e = replace(e, run=str(runs[0]), drafts=[*e.drafts, *(str(last_draft(r)) for r in runs[1:])])

    t0 = time.perf_counter()
    print(f"== evaluate -> {out / 'eval'}", flush=True)
    result = evaluate.run(e, command=command)
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    return result, timings


def train_one(cfg: PipelineConfig, out: Path, t, command: str) -> None:
    """One training stage, in this process or under `accelerate launch` (its own YAML beside the run)."""
    if cfg.accelerate_config:
        yaml_path = out / f"{Path(t.output).name}.yaml"
        yaml_path.write_text(yaml.safe_dump(cli.to_dict(t)))
        cmd = ["accelerate", "launch", "--config_file", cfg.accelerate_config, str(TRAIN_SCRIPT), "--config", str(yaml_path)]
        print("   " + " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=os.environ.copy()).returncode != 0:
            raise UserError("training failed (see its output above); rerun the same command to resume it")
    else:
        train.train(t, [], command=command)


def has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() and targets.has_weights(str(folder))


def dummy_target(cfg: PipelineConfig, c, folder: Path) -> str:
    """--load-format dummy: the target's shape with random weights, written to `folder` (RUN/target) in the collect
    stage's dtype, built on its device."""
    print(f"pipeline: --load-format dummy: random weights of {cfg.target}'s shape -> {folder}", flush=True)
    return str(targets.save_dummy(cfg.target, folder, c.dtype, targets.resolve_device(c.device)))


def record_times(out: Path, timings: dict) -> None:
    """This run's stage times, printed and appended to RUN/timings.json (one entry a run of the command: a resumed
    run's finished stages take seconds), and added to the report (distill.evaluate.report.add_stage_times)."""
    path = out / "timings.json"
    runs = json.loads(path.read_text()).get("runs", []) if path.is_file() else []
    runs.append({"finished": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": timings})
    path.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    if (out / "eval" / "report.json").is_file():
        add_stage_times(out / "eval", timings)
    print("\n".join(["pipeline: stage times", *stage_lines(timings)]), flush=True)


def run(cfg: PipelineConfig, argv: list[str]) -> dict:
    start = time.perf_counter()
    cfg = replace(cfg, output=output_folder(cfg, argv))
    cli.check_output(cfg.output)
    out = Path(cfg.output)
    print(f"pipeline: writing to {out}" + (f" (preset {cfg.preset})" if cfg.preset else ""), flush=True)
    written = out / "target"  # --load-format dummy: every stage reads it, one set of random weights for all
    dummy = cfg.load_format == "dummy"
    c, h, trains, rounds, e, notes = plan(replace(cfg, target=str(written)) if dummy and has_weights(written) else cfg, out)
    out.mkdir(parents=True, exist_ok=True)
    cli.save(cfg, out / "pipeline.config.json")
    if dummy and not has_weights(written):  # the first run: write it, then wire every stage to it
        c, h, trains, rounds, e, notes = plan(replace(cfg, target=dummy_target(cfg, c, written)), out)
    command = "python -m distill.pipeline " + " ".join(argv)  # recorded by every stage it runs
    for note in notes:
        print(f"pipeline: {note}", flush=True)
    result, timings = run_stages(cfg, out, (c, h, trains, rounds, e), command)
    shipped = ship(out, result)
    summary = {"output": str(out), "report": str(out / "eval" / "report.md"), "best": result.get("best"),
               "shipped": shipped, "onpolicy": timings.pop("onpolicy", []), "timings": timings, "left_out": notes,
               "off_the_shelf": offshelf.verdict(result.get("entries", []))}  # best distilled vs best --drafts-extra
    (out / "pipeline.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(headline(result))
    if shipped:
        print(ship_line(shipped), flush=True)
    record_times(out, {**timings, "total_s": round(time.perf_counter() - start, 1)})
    return summary


def main(argv: list[str] | None = None) -> None:
    _, summary = cli.run_job(PipelineConfig, run, argv, __doc__)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
