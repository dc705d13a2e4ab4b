"""Sweep draft designs: collect once, train each design, evaluate each, rank by measured speedup.

    python -m distill.sweep --config configs/sweep/depth_vocab.yaml

The YAML declares `designs` (a list of train overrides, each with a `name`) and/or a `grid` (train options
to a list of values; every combination becomes a design). Finished designs (their eval report exists) are
skipped when the sweep is rerun, so an interrupted sweep resumes where it stopped. The ranking table
(SWEEP/ranking.md, ranking.json) marks the Pareto front of draft cost c against acceptance α: designs no
other design beats on both.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from decode import cli
from decode.errors import UserError
from distill import collect, evaluate, train
from distill.pipeline import data_stages, stage_config


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
        out = [dict(d) for d in self.designs]
        if self.grid:
            keys = sorted(self.grid)
            for values in itertools.product(*(self.grid[k] if isinstance(self.grid[k], list) else [self.grid[k]] for k in keys)):
                d = dict(zip(keys, values))
                d["name"] = "-".join(f"{k}{v}" for k, v in d.items()).replace(" ", "").replace("[", "").replace("]", "").replace(",", "_")
                out.append(d)
        for i, d in enumerate(out):
            d.setdefault("name", f"design{i}")
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


def run_design(cfg: SweepConfig, out: Path, d: dict, command: str | None = None) -> str | None:
    """Train and evaluate one design unless its report exists; returns an error message for an impossible one."""
    name, ddir = d["name"], out / "designs" / d["name"]
    if (ddir / "eval" / "report.json").is_file():
        print(f"== design {name}: already evaluated (resume)", flush=True)
        return None
    print(f"== design {name}: train + evaluate", flush=True)
    c, h = _data(cfg, out)
    opts = {k: v for k, v in d.items() if k != "name"}
    unknown = sorted(set(opts) - {f.name for f in fields(train.TrainConfig)})
    try:
        if unknown:
            raise UserError(f"unknown train option(s) {unknown}")
        t = stage_config(train.TrainConfig, {"target": cfg.target, "data": c.output, "eval_data": h.output,
                                       "output": str(ddir / "train"), **cfg.train}, opts, f"design {name}")
        train.train(t, [], command=command)
        newest = evaluate.drafts_of_run(Path(t.output))[-1][0]
        e = stage_config(evaluate.EvalConfig, {"target": cfg.target, "output": str(ddir / "eval"), "anchors": False,
                                         "drafts": [newest]}, cfg.evaluate, "evaluate")
        evaluate.run(e, command=command)
    except UserError as err:  # an impossible design is reported; the others still run
        print(f"warning: design {name} skipped: {err}", file=sys.stderr)
        (ddir).mkdir(parents=True, exist_ok=True)
        (ddir / "error.txt").write_text(str(err) + "\n")
        return str(err)
    return None


def rank(cfg: SweepConfig, out: Path, designs: list[dict]) -> list[dict]:
    rows = []
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
            rows.append({"name": d["name"], "gamma": e["gamma"], "speedup": e["speedup"], "alpha": e["speculative"]["acceptance_rate"],
                         "tau": e["speculative"]["tau"], "c": e["cost_model"]["c"], "predicted": e["cost_model"]["predicted_speedup"],
                         "params": (e.get("design") or {}).get("params"), "lossless": e["lossless"], "draft": e["draft"]})
    ok = [r for r in rows if "error" not in r]
    pareto(ok)
    ok.sort(key=lambda r: -r["speedup"])
    ranking = ok + [r for r in rows if "error" in r]
    (out / "ranking.json").write_text(json.dumps(ranking, indent=2) + "\n")
    lines = ["| rank | design | γ | speedup | predicted | α | τ | c | params | Pareto |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(ok, 1):
        lines.append(f"| {i} | {r['name']} | {r['gamma']} | **{r['speedup']}×** | {r['predicted']}× | {r['alpha']} | {r['tau']} | "
                     f"{r['c']} | {r['params']} | {'★' if r['pareto'] else ''} |")
    lines += [f"| – | {r['name']} | | failed: {r['error']} | | | | | | |" for r in rows if "error" in r]
    (out / "ranking.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return ranking


def _command(argv: list[str] | None) -> str | None:
    """The sweep's command line, recorded by the stages it runs (None when called as a library)."""
    return "python -m distill.sweep " + " ".join(argv) if argv is not None else None


def run(cfg: SweepConfig, argv: list[str] | None = None) -> list[dict]:
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    cli.save(cfg, out / f"sweep.{cfg.phase}.config.json")
    designs = cfg.all_designs()
    if cfg.phase in ("all", "collect"):
        print(f"== collect once for {len(designs)} designs", flush=True)
        c, h = _data(cfg, out)
        collect.run(c, command=_command(argv))
        collect.run(h, command=_command(argv))
    if cfg.phase == "design":
        if cfg.design_index >= len(designs):
            raise UserError(f"--design-index {cfg.design_index}: the sweep has {len(designs)} designs (0..{len(designs) - 1})")
        run_design(cfg, out, designs[cfg.design_index], _command(argv))
    if cfg.phase == "all":
        for d in designs:
            run_design(cfg, out, d, _command(argv))
    if cfg.phase in ("all", "rank"):
        return rank(cfg, out, designs)
    return []


def main(argv: list[str] | None = None) -> None:
    cli.run_job(SweepConfig, run, argv, __doc__)


if __name__ == "__main__":
    main()
