"""Sweep draft designs: collect once, train each design, evaluate each, rank by measured speedup.

    python -m distill.sweep --config configs/sweep/depth_vocab.yaml

The YAML declares `designs` (a list of train overrides, each with a `name`) and/or a `grid` (train options
to a list of values; every combination becomes a design). Any train option is an axis, the draft's kind too
(train's `design: standalone | feature_head`). Finished designs (their eval report exists) are skipped when the
sweep is rerun, so an interrupted sweep resumes where it stopped. The ranking table (SWEEP/ranking.md,
ranking.json) names each design's kind and marks the Pareto front of draft cost c against acceptance α: designs
no other design beats on both, feature heads and standalone drafts alike. Designs that differ in `data_tokens`
(nested subsets of the collection) also get SWEEP/scaling.md and scaling.png: held-out proxy and α against tokens
(configs/sweep/data_scaling.yaml).
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from decode import cli
from decode.errors import UserError
from distill import collect, evaluate, train
from distill.collect.shards import collect_info
from distill.evaluate import scaling
from distill.evaluate.kinds import kind
from distill.pipeline import check_data, data_stages, fit_to_target, section_values, stage_config


@dataclass
class SweepConfig:
    target: str = field(default="default", metadata={"help": "target model"})
    output: str = field(default="runs/sweep", metadata={"help": "sweep folder"})
    designs: list = field(default_factory=list, metadata={"help": "list of {name, <train options>}"})
    grid: dict = field(default_factory=dict, metadata={"help": "train option -> list of values (cartesian product)"})
    collect: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides (train data)"})
    heldout: dict = field(default_factory=dict, metadata={"help": "distill.collect overrides (held-out data)"})
    train: dict = field(default_factory=dict, metadata={"help": "distill.train overrides shared by all designs"})
    evaluate: dict = field(default_factory=dict, metadata={"help": "distill.evaluate overrides"})
    phase: str = field(default="all", metadata={"help": "all | collect | design | rank (SLURM arrays run one phase)"})
    design_index: int = field(default=-1, metadata={"help": "with --phase design: which design (0-based)"})

    def __post_init__(self):
        if self.phase not in ("all", "collect", "design", "rank"):
            raise UserError(f"--phase must be all, collect, design or rank, got {self.phase!r}")
        if self.phase == "design" and self.design_index < 0:
            raise UserError("--phase design needs --design-index N (0-based; SLURM_ARRAY_TASK_ID in an array)")

    def all_designs(self) -> list[dict]:
        """`designs` then the `grid`'s combinations, each a mapping of train options with a unique `name`."""
        if not all(isinstance(d, dict) for d in self.designs):
            bad = next(d for d in self.designs if not isinstance(d, dict))
            raise UserError(f"`designs` must be a list of mappings such as {{name: small, layers: 1}}, got item {bad!r}")
        out = [dict(d) for d in self.designs]
        if self.grid:
            keys = sorted(self.grid)
            empty = [k for k in keys if self.grid[k] == [] or self.grid[k] is None]
            if empty:
                raise UserError(f"`grid` option(s) {empty} list no values, so the grid has no designs; give each "
                                "option one or more values, e.g. {layers: [1, 2]}")
            for values in itertools.product(*(self.grid[k] if isinstance(self.grid[k], list) else [self.grid[k]] for k in keys)):
                d = dict(zip(keys, values))
                d["name"] = "-".join(f"{k}{v}" for k, v in d.items()).replace(" ", "").replace("[", "").replace("]", "").replace(",", "_")
                out.append(d)
        for i, d in enumerate(out):
            d["name"] = str(d.get("name", f"design{i}"))
        names = [d["name"] for d in out]
        if len(set(names)) != len(names):
            raise UserError(f"design names must be unique: {names}")
        if not out:
            raise UserError("the sweep declares no designs: give `designs:` or `grid:`")
        return out


def pareto(rows: list[dict]) -> None:
    """Mark rows on the front of (low c, high α): no other row has c <= and α >= with one strict."""
    for r in rows:
        r["pareto"] = not any(
            o is not r and o["c"] <= r["c"] and o["alpha"] >= r["alpha"] and (o["c"] < r["c"] or o["alpha"] > r["alpha"])
            for o in rows
        )


def _data(cfg: SweepConfig, out: Path):
    return data_stages(cfg.target, out, cfg.collect, cfg.heldout)


def check_designs(cfg: SweepConfig, out: Path, designs: list[dict]) -> dict[str, str]:
    """Every setting, before the first stage runs: the shared sections fail the sweep (every design needs them),
    as does a design's unknown or mistyped option (a typo). A design this target cannot take (its own checks, the
    target's architecture) is reported now and skipped later while the others run. Returns {name: why} of those."""
    c, h = _data(cfg, out)
    train_base = section_values(train.TrainConfig, cfg.train, "sweep `train` section")
    stage_config(evaluate.EvalConfig, {"target": cfg.target, "run": "RUN"}, cfg.evaluate, "evaluate", "sweep")
    impossible = {}
    for d in designs:
        opts = section_values(train.TrainConfig, {k: v for k, v in d.items() if k != "name"},
                              f"sweep design {d['name']!r}")
        try:
            t = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                                 **train_base}, opts, f"design {d['name']}", "sweep")
            e = stage_config(evaluate.EvalConfig, {"target": cfg.target, "run": t.output}, cfg.evaluate, "evaluate",
                             "sweep")
            for note in fit_to_target(cfg.target, t, e)[2]:
                print(f"sweep: design {d['name']}: {note}", flush=True)
        except UserError as err:
            impossible[d["name"]] = str(err)
            print(f"warning: design {d['name']} will be skipped: {err}", file=sys.stderr, flush=True)
    if len(impossible) == len(designs):
        raise UserError(f"no design of the sweep can run on this target: {'; '.join(impossible.values())}")
    check_data(cfg.target, (c, h))
    return impossible


def run_design(cfg: SweepConfig, out: Path, d: dict, command: str | None = None, impossible: str | None = None) -> str | None:
    """Train and evaluate one design unless its report exists; returns an error message for an impossible one."""
    name, ddir = d["name"], out / "designs" / d["name"]
    if (ddir / "eval" / "report.json").is_file():
        print(f"== design {name}: already evaluated (resume)", flush=True)
        return None
    print(f"== design {name}: train + evaluate", flush=True)
    c, h = _data(cfg, out)
    opts = {k: v for k, v in d.items() if k != "name"}
    try:
        if impossible:
            raise UserError(impossible)
        t = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                             "output": str(ddir / "train"),
                                             **section_values(train.TrainConfig, cfg.train, "sweep `train` section")},
                             opts, f"design {name}", "sweep")
        t, _, _ = fit_to_target(cfg.target, t, evaluate.EvalConfig(target=cfg.target, run=t.output))
        train.train(t, [], command=command)
        newest = evaluate.drafts_of_run(Path(t.output))[-1][0]
        e = stage_config(evaluate.EvalConfig, {"target": cfg.target, "output": str(ddir / "eval"), "anchors": False,
                                               "drafts": [newest]}, cfg.evaluate, "evaluate", "sweep")
        evaluate.run(e, command=command)
    except UserError as err:  # an impossible design is reported; the others still run
        print(f"warning: design {name} skipped: {err}", file=sys.stderr)
        (ddir).mkdir(parents=True, exist_ok=True)
        (ddir / "error.txt").write_text(str(err) + "\n")
        return str(err)
    return None


def rank(cfg: SweepConfig, out: Path, designs: list[dict]) -> list[dict]:
    rows = []
    # the collection's tokens, read once: a design with data_tokens 0 trained on all of them
    collected = collect_info(_data(cfg, out)[0].output).get("tokens") if any("data_tokens" in d for d in designs) else None
    for d in designs:
        ddir = out / "designs" / d["name"]
        if (ddir / "error.txt").is_file() and not (ddir / "eval" / "report.json").is_file():
            rows.append({"name": d["name"], "error": (ddir / "error.txt").read_text().strip()})
            continue
        if not (ddir / "eval" / "report.json").is_file():
            rows.append({"name": d["name"], "error": "not run yet"})
            continue
        report = json.loads((ddir / "eval" / "report.json").read_text())
        for e in report["entries"]:
            rows.append({"name": d["name"], "kind": kind(e), "gamma": e["gamma"], "speedup": e["speedup"],
                         "tokens": design_tokens(d, collected), "proxy": scaling.final_proxy(ddir / "train"),
                         "alpha": e["speculative"]["acceptance_rate"],
                         "tau": e["speculative"]["tau"], "c": e["cost_model"]["c"], "predicted": e["cost_model"]["predicted_speedup"],
                         "params": (e.get("design") or {}).get("params"), "lossless": e["lossless"], "draft": e["draft"]})
    ok = [r for r in rows if "error" not in r]
    pareto(ok)
    ok.sort(key=lambda r: -r["speedup"])
    ranking = ok + [r for r in rows if "error" in r]
    (out / "ranking.json").write_text(json.dumps(ranking, indent=2) + "\n")
    lines = ["| rank | design | kind | γ | speedup | predicted | α | τ | c | params | Pareto |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(ok, 1):
        lines.append(f"| {i} | {r['name']} | {r['kind'].replace('_', ' ')} | {r['gamma']} | **{r['speedup']}×** | "
                     f"{r['predicted']}× | {r['alpha']} | {r['tau']} | {r['c']} | {r['params']} | {'★' if r['pareto'] else ''} |")
    lines += [f"| – | {r['name']} | | | failed: {r['error']} | | | | | | |" for r in rows if "error" in r]
    (out / "ranking.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if scaling.write(out, ranking):
        print(f"data scaling: {out / 'scaling.md'}, {out / 'scaling.png'}")
    return ranking


def design_tokens(d: dict, collected: int | None) -> int | None:
    """The collected tokens a design trained on when the sweep varies them: its data_tokens, or 0 = all of the
    sweep's collection (`collected` tokens); None for a design that does not say."""
    return None if "data_tokens" not in d else d["data_tokens"] or collected


def _command(argv: list[str] | None) -> str | None:
    """The sweep's command line, recorded by the stages it runs (None when called as a library)."""
    return "python -m distill.sweep " + " ".join(argv) if argv is not None else None


def run(cfg: SweepConfig, argv: list[str] | None = None) -> list[dict]:
    out = Path(cfg.output)
    designs = cfg.all_designs()
    impossible = check_designs(cfg, out, designs) if cfg.phase != "rank" else {}
    if cfg.phase == "design" and cfg.design_index >= len(designs):
        raise UserError(f"--design-index {cfg.design_index}: the sweep has {len(designs)} designs (0..{len(designs) - 1})")
    out.mkdir(parents=True, exist_ok=True)
    cli.save(cfg, out / f"sweep.{cfg.phase}.config.json")
    if cfg.phase in ("all", "collect"):
        print(f"== collect once for {len(designs)} designs", flush=True)
        c, h = _data(cfg, out)
        collect.run(c, command=_command(argv))
        collect.run(h, command=_command(argv))
    todo = designs if cfg.phase == "all" else [designs[cfg.design_index]] if cfg.phase == "design" else []
    for d in todo:
        run_design(cfg, out, d, _command(argv), impossible.get(d["name"]))
    if cfg.phase in ("all", "rank"):
        return rank(cfg, out, designs)
    return []


def main(argv: list[str] | None = None) -> None:
    cli.run_job(SweepConfig, run, argv, __doc__)


if __name__ == "__main__":
    main()
