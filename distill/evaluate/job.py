"""Evaluate drafts inside the bundled decoder: α, τ, tokens/s and speedup over the target alone, the cost
model's prediction next to the measurement, per prompt category, plus the anchors users compare against.

    python -m distill.evaluate --run runs/train-default            # every checkpoint of a training run
    python -m distill.evaluate --run runs/pipeline-default --limit 8   # a pipeline folder: its train/ run
    python -m distill.evaluate --drafts D1 D2 --gamma "[2, 4, 6]"   # any drafts, several γ
    python -m distill.evaluate --drafts D1 --anchors vllm           # also vLLM's own numbers (vllm_anchors.py)
    python -m distill.evaluate --drafts D1 --drafts-extra default     # off-the-shelf drafts beside (offshelf.py)

Writes EVAL_DIR/report.json (one entry per draft × γ, the result schema of docs/architecture.md), report.md and PNG plots.
A draft that does not load is skipped and listed ("skipped DRAFT: reason"); with none left the job fails. Timings
that cannot be right (timing.py) are named at the top of report.md and in the headline.
Anchors, under the same settings: the target alone (in every entry; transformers' own generate too), transformers'
assisted generation with the same draft (judged against transformers' generate), transformers' prompt-lookup
decoding, and an untrained draft cut from the same target layers;
with --anchors vllm also vLLM's target alone, vLLM with each draft (draft_model; eagle3 for a feature head) and
vLLM's n-gram lookup.

Feature heads (EAGLE-3 style folders, decode.models.feature_head) are drafts like any other: same prompts, baseline, α,
τ, c, v(γ) and cost model, each entry marked with its design's kind (specdistill.json `design.kind`: feature_head;
standalone drafts have none). What does not apply to a head is left out and said so: transformers' assisted
generation (it takes standalone models only), --draft-weights (a head runs its own weights), and the untrained
layer cut (a standalone anchor). Token trees (--tree-nodes, decode.drafting.tree) run for both kinds.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from decode import cli
from decode.bench import encode_all, measure_many
from decode.errors import UserError
from decode.models.draft_folder import read_meta
from decode.models.targets import eos_ids, load_target
from distill.collect import vllm_engine
from distill.evaluate import long_check, timing, vllm_anchors
from distill.evaluate.config import EvalConfig
from distill.evaluate.kinds import design_kind
from distill.evaluate.offshelf import is_off_the_shelf
from distill.evaluate.plan import (
    draft_names,
    drafts_of_run,
    drafts_to_evaluate,
    grid,
    head_folder,
    label,
    plan_runs,
    vllm_drafts,
)
from distill.prompts import load_prompts
from distill.train import checkpoints


def prompt_lookup(entry: dict) -> dict | None:
    """transformers' prompt-lookup decoding against its plain generate (the anchor), from the screen's loop
    (decode.bench.measure_many's hf_lookup: both per prompt, beside every draft); None where it did not run."""
    pld, base = entry.get("hf_prompt_lookup"), entry.get("hf_generate")
    if not pld or not base or not pld["seconds"] or not base["tokens_per_s"]:
        return None
    return {"method": "transformers prompt_lookup_num_tokens", "gamma": pld["gamma"],
            "hf_target_alone_tokens_per_s": base["tokens_per_s"], "tokens_per_s": pld["tokens_per_s"],
            "speedup_vs_hf_target_alone": round(pld["tokens_per_s"] / base["tokens_per_s"], 4),
            "outputs_matching_target": pld["outputs_matching_hf_generate"], "prompts": entry["prompts"]}


def run(cfg: EvalConfig, argv: list[str] | None = None, command: str | None = None) -> dict:
    if cfg.anchors == "vllm":  # before anything is measured, not after
        vllm_engine.require("--anchors vllm", cfg.vllm_python)
    run_dir = training_run(cfg.run, bool(cfg.drafts)) if cfg.run else None
    out = Path(cfg.output or (run_dir / "eval" if run_dir else "runs/eval"))
    out.mkdir(parents=True, exist_ok=True)
    rows = load_prompts(cfg.prompts, categories=cfg.categories or None, limit=cfg.limit, spread=True)
    errors: list[dict] = []
    todo, anchor = drafts_to_evaluate(cfg, run_dir, errors)
    # said before the target loads: with defaults this is 126 prompts and many minutes
    n_runs = sum(len(grid(cfg, spec, step, todo, head_folder(spec))) for spec, step in todo)
    limit = (f" (--limit {cfg.limit}: taken in turn from each category)" if cfg.limit else
             "; --limit N takes N prompts, in turn from each category, for a shorter run")
    screen = len(rows) if not 0 < cfg.screen_limit < len(rows) else cfg.screen_limit
    on = f"the first {screen} of {len(rows)} prompts, the fastest then on all," if screen < len(rows) else f"{len(rows)} prompts"
    print(f"evaluating up to {n_runs} draft x γ runs on {on} x up to {cfg.max_new_tokens} new tokens "
          f"(one shared target-alone baseline){limit}", file=sys.stderr, flush=True)
    target, tok = load_target(cfg.target, cfg.dtype, cfg.device, load_format=cfg.load_format)
    encoded = encode_all(rows, tok, cfg.max_new_tokens, target.config.max_position_embeddings)

    # --- every draft x γ against one shared target-alone baseline (decode.bench.measure_many); a screen times the
    # plausible settings on the first screen_limit prompts, then the fastest again on all of them (confirm)
    runs, labels, notes = plan_runs(cfg, todo, target, tok, errors, rows, screen < len(rows))
    if not any(spec != anchor for spec, *_ in labels):  # the untrained anchor alone evaluates nothing asked for
        raise UserError("nothing evaluated, no draft could be loaded: " + "; ".join(
            f"{x['draft']}: {x['error']}" for x in errors))
    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    names = draft_names(todo)
    pld = max(cfg.gammas()) if cfg.hf_anchors() else 0  # transformers' prompt lookup, in the same loop
    entries = [_entry(e, labels[i], names, cfg) for i, e in enumerate(
        measure_many(target, tok, runs, rows[:screen], encoded[:screen], log=progress, hf_lookup=pld))]
    screened = screen < len(rows)
    tops = contenders(entries, cfg.confirm if screened else 1)
    confirmed = confirm(target, tok, [runs[i] for i in tops], [entries[i] for i in tops], rows, encoded,
                        progress) if screened else []
    picks = []  # (run index, entry): the confirmed rows, or the winner itself without a screen
    for i, e in zip(tops, confirmed):  # rows of their own beside the screen's: the ones report.best() takes from
        entries.append(_entry(e, labels[i], names, cfg))
        entries[-1].update(label=f"{entries[-1]['label']} (all {len(rows)} prompts)", confirmed=True)
        picks.append((i, entries[-1]))
    top, shipped = max(picks or [(tops[0], entries[tops[0]])], key=lambda p: p[1]["speedup"])
    long = long_check.measure(cfg, target, tok, [runs[top]], [shipped], notes)
    del runs  # the long check: the draft that ships, alone

    anchors = {}
    if pld and (pl := prompt_lookup(entries[0])):  # on the prompts every setting ran on
        anchors["prompt_lookup"] = pl
    if cfg.anchors == "vllm":
        anchors["vllm"] = vllm_anchors.anchor(cfg.target, vllm_drafts(cfg, todo, errors), entries, encoded,
                                              gamma=max(cfg.gammas()), max_new_tokens=cfg.max_new_tokens,
                                              eos=eos_ids(target, tok), dtype=cfg.dtype, seed=cfg.seed,
                                              python=cfg.vllm_python or sys.executable)
    result = {"target": cfg.target, "prompts": len(rows), "prompt_set": cfg.prompts, "config": asdict(cfg),
              "command": command or "python -m distill.evaluate " + " ".join(argv or []),
              "run": str(run_dir) if run_dir else None, "entries": entries, "anchors": anchors, "errors": errors,
              "notes": notes, "screen": shipped.get("screen"),
              "long_check": long,
              "training_proxy": training_proxy(run_dir) if run_dir else [],
              "timing_check": timing.check({"entries": entries})}
    # imported on use, not at the top: `python -m distill.evaluate.report` then runs that module once, as __main__
    from distill.evaluate import report

    result["best"] = report.best(entries)
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    pngs = report.write(result, out)
    if cfg.report_to == "wandb":
        report.log_wandb(result, pngs, cfg.wandb_project, out)
    result["output"] = str(out)
    return result


def _entry(e: dict, label_of: tuple, names: dict, cfg: EvalConfig) -> dict:
    """A measured result as report.json holds it: its label, step, design and kind, trained or off the shelf."""
    spec, step, n, k = label_of
    meta = read_meta(spec)
    shelf = is_off_the_shelf(spec, e.get("draft_kind"), cfg.drafts_extra)  # beside, never shipped (offshelf.py)
    e.update(label=label(spec, step, names, n, k), step=step if step is not None else meta.get("step"),
             design=meta.get("design"), kind=design_kind(meta.get("design"), e.get("draft_kind")),
             trained=not spec.startswith("layers:") and not shelf, off_the_shelf=shelf)
    return e


def contenders(entries: list[dict], n: int) -> list[int]:
    """Indices of the n trained entries with the highest measured speedup, fastest first (of any entries when none
    is trained)."""
    pool = [i for i, e in enumerate(entries) if e["trained"]] or range(len(entries))
    return sorted(pool, key=lambda i: -entries[i]["speedup"])[:n]


def confirm(target, tok, runs: list[tuple], screened: list[dict], rows: list[dict], encoded: list, log) -> list[dict]:
    """The screen's fastest settings again on every prompt, against one target-alone baseline of their own (no
    anchors: they ran in the screen); each result with `screen`: what the screen measured of it."""
    said = ", ".join(f"{s['label']} (γ={c.gamma}, {s['speedup']}x)" for (_, c, _), s in zip(runs, screened))
    print(f"confirming {said} of the screen's {screened[0]['prompts']} prompts on all {len(rows)} prompts",
          file=sys.stderr, flush=True)
    out = measure_many(target, tok, [(d, c, False) for d, c, _ in runs], rows, encoded, log=log, warm_up=False)
    for e, s in zip(out, screened):  # warmed up: the screen ran the same drafts in this process
        e["screen"] = {"prompts": s["prompts"], "winner": s["label"], "speedup": s["speedup"],
                       "acceptance_rate": s["speculative"]["acceptance_rate"], "tau": s["speculative"]["tau"]}
    return out


def training_run(spec: str, other_drafts: bool) -> Path:
    """The training run --run names: the folder itself, or a pipeline folder's train/ (said in one line). A path
    that is missing, a file, or holds no complete checkpoint stops here, before any model loads; with --drafts
    beside it a run without checkpoints is only skipped (drafts_to_evaluate records it)."""
    run_dir = Path(spec)
    if not run_dir.exists():
        raise UserError(f"--run {spec}: no such folder; pass a training run (it holds checkpoint-N folders) "
                        "or a pipeline output folder")
    if not run_dir.is_dir():
        raise UserError(f"--run {spec} is a file; pass the training run folder that holds checkpoint-N folders")
    is_pipeline = any((run_dir / f).is_file() for f in ("pipeline.json", "pipeline.config.json"))
    if is_pipeline and (run_dir / "train").is_dir() and not checkpoints.complete(run_dir):
        print(f"--run {spec} is a pipeline folder: evaluating its training run {run_dir / 'train'} (the "
              f"pipeline's own report in {run_dir / 'eval'} is left as it is)", file=sys.stderr, flush=True)
        run_dir = run_dir / "train"
    if not drafts_of_run(run_dir) and not other_drafts:
        # the folder the user likely meant: one inside (a pipeline's train/) or beside it (eval/ next to train/)
        parent = run_dir.parent if run_dir.name else run_dir.resolve().parent
        near = [*sorted(run_dir.iterdir()), *sorted(parent.iterdir())]
        inner = [p for p in near if p.is_dir() and drafts_of_run(p)]
        hint = f"--run {inner[0]}" if inner else "a training run folder (checkpoint-N/hf inside)"
        raise UserError(f"no complete checkpoints in {run_dir}, nothing to evaluate; pass {hint}")
    return run_dir


def training_proxy(run_dir: Path) -> list[list]:
    """[step, eval/acceptance_proxy] of the run's metrics.jsonl (distill.train.proxy), for the by-step plot."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a run killed mid-write leaves a partial last line; the curve is still good
            continue
        if isinstance(row, dict) and "eval/acceptance_proxy" in row and "step" in row:
            out.append([row["step"], row["eval/acceptance_proxy"]])
    return out


def old_flags(argv: list[str]) -> list[str]:
    """--anchors takes a value now (hf | vllm | none); the on/off flag's negative form keeps working."""
    return [a for x in argv for a in (("--anchors", "none") if x in ("--no-anchors", "--no_anchors") else (x,))]


def main(argv: list[str] | None = None) -> None:
    argv = old_flags(sys.argv[1:] if argv is None else list(argv))
    _, result = cli.run_job(EvalConfig, run, argv, __doc__)
    from distill.evaluate import report

    for x in result["errors"]:  # again at the end: the first time scrolled away under the progress lines
        print(f"skipped {x['draft']}: {x['error']}")
    print(report.headline(result))
    print(json.dumps({k: result[k] for k in ("output", "best", "errors")}))
