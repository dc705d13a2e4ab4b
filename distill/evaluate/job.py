"""Evaluate drafts inside the bundled decoder: α, τ, tokens/s and speedup over the target alone, the cost
model's prediction next to the measurement, per prompt category, plus the anchors users compare against.

    python -m distill.evaluate --run runs/train-default            # every checkpoint of a training run
    python -m distill.evaluate --run runs/pipeline-default --limit 8   # a pipeline folder: its train/ run
    python -m distill.evaluate --drafts D1 D2 --gamma "[2, 4, 6]"   # any drafts, several γ
    python -m distill.evaluate --drafts D1 --anchors vllm           # also vLLM's own numbers (vllm_anchors.py)

Writes EVAL_DIR/report.json (one entry per draft × γ, the result schema of docs/architecture.md), report.md and PNG plots.
A draft that does not load is skipped and listed ("skipped DRAFT: reason"); with none left the job fails. Timings
that cannot be right (timing.py) are named at the top of report.md and in the headline.
Anchors, under the same settings: the target alone (in every entry; transformers' own generate too), transformers'
assisted generation with the same draft (judged against transformers' generate), transformers' prompt-lookup
decoding, and an untrained draft cut from the same target layers;
with --anchors vllm also vLLM's target alone, vLLM with each draft (draft_model; eagle3 for a feature head) and
vLLM's n-gram lookup.

Feature heads (EAGLE-3 style folders, decode.feature_head) are drafts like any other: same prompts, baseline, α,
τ, c, v(γ) and cost model, each entry marked with its design's kind (specdistill.json `design.kind`: feature_head;
standalone drafts have none). What does not apply to a head is left out and said so: transformers' assisted
generation (it takes standalone models only), --draft-weights (a head runs its own weights), and the untrained
layer cut (a standalone anchor). Token trees (--tree-nodes, decode.tree) run for both kinds.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path

import torch

from decode import cli
from decode.bench import BenchConfig, encode_all, is_head, measure_many
from decode.draft_folder import read_meta
from decode.errors import UserError
from decode.feature_head import is_head_folder
from decode.options import DecodeOptions
from decode.targets import check_load_format, eos_ids, load_draft, load_format_field, load_target
from decode.targets import resolve as resolve_model
from distill.collect import vllm_engine
from distill.evaluate import timing, vllm_anchors
from distill.evaluate.kinds import design_kind
from distill.prompts import load_prompts, resolve
from distill.train import checkpoints


@dataclass
class EvalConfig:
    target: str = field(default="default", metadata={"help": "target model"})
    run: str | None = field(default=None, metadata={"help": "training run dir: evaluate every checkpoint"})
    drafts: list = field(default_factory=list, metadata={"help": "draft folders (or layers:0,29) to evaluate"})
    prompts: str = field(default="heldout", metadata={"help": "prompts (default: the bundled held-out set)"})
    categories: list = field(default_factory=list, metadata={"help": "only these prompt categories"})
    limit: int = field(default=0, metadata={"help": "N prompts in all, taken in turn from each category (0 = all)"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens per prompt"})
    temperature: float = field(default=DecodeOptions.temperature, metadata={"help": "0 = greedy (lossless is checked)"})
    gamma: int | list = field(default=DecodeOptions.gamma, metadata={"help": "γ, or a list of γ to sweep"})
    lookup: int | list = field(default=DecodeOptions.lookup, metadata={"help": "decoder's context lookup: n-gram length (0 = off), or a list "
                                                           "to compare, e.g. [0, 2] (decode.lookup)"})
    lookup_tokens: int = field(default=DecodeOptions.lookup_tokens, metadata={"help": "tokens per lookup proposal (0 = γ)"})
    tree_nodes: int | list = field(default=DecodeOptions.tree_nodes, metadata={"help": "token tree of up to N nodes, γ levels (0 = a "
                                                                  "chain), or a list to compare, e.g. [0, 6]"})
    draft_weights: str = field(default=DecodeOptions.draft_weights, metadata={"help": "float32 | float16 | int8: drafts run with weights "
                                                                "stored so on CPU (decode.smallgemm: a cheaper draft step)"})
    checkpoints: str = field(default="all", metadata={"help": "all (earlier checkpoints at the first γ only) | last"})
    schedule: str = field(default=DecodeOptions.schedule, metadata={"help": "constant | heuristic | dynamic"})
    output: str | None = field(default=None, metadata={"help": "EVAL_DIR (default: RUN/eval or runs/eval)"})
    hf_static: bool = field(default=BenchConfig.hf_static, metadata={"help": "with the hf anchors on a GPU, also "
                            "transformers' generate with a static cache, compiled (its warm-up compiles: minutes)"})
    anchors: str = field(default="hf", metadata={"help": "hf: also HF assisted, prompt lookup, untrained layer cut | "
                                                      "vllm: those and vLLM's own numbers (target alone, each "
                                                      "draft, n-gram) | none (--no-anchors)"})
    report_to: str = field(default="none", metadata={"help": "wandb | none"})
    wandb_project: str = field(default="specdistill", metadata={"help": "W&B project"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    device: str = field(default="auto", metadata={"help": "auto (CUDA when present: a target too large for one GPU "
                                                          "is spread over all; else CPU) | cpu | cuda[:N]"})
    dtype: str = field(default="auto", metadata={"help": "auto | float32 | bfloat16"})
    load_format: str = load_format_field()

    def __post_init__(self):
        # booleans from YAML or callers (anchors: false) mean what they did when this was an on/off flag
        self.anchors = {True: "hf", False: "none"}.get(self.anchors, self.anchors)
        if self.anchors not in ("hf", "vllm", "none"):
            raise UserError(f"--anchors must be hf, vllm or none, got {self.anchors!r}")
        if not self.gammas():
            raise UserError(f"--gamma must be >= 1 (draft tokens per round), got {self.gamma}")
        for g, n, k in product(self.gammas(), self.lookups(), self.tree_sizes()):
            DecodeOptions(gamma=g, schedule=self.schedule, lookup=n, lookup_tokens=self.lookup_tokens, tree_nodes=k,
                          draft_weights=self.draft_weights, temperature=self.temperature)  # the checks live there
        check_load_format(self.load_format)
        if self.anchors == "vllm" and self.load_format == "dummy":  # vLLM reads the target folder's weights itself
            raise UserError("--load-format dummy builds the target in transformers; vLLM's anchors would serve other "
                            "weights: use --anchors hf (or none)")
        if self.checkpoints not in ("all", "last"):
            raise UserError(f"--checkpoints must be 'all' or 'last', got {self.checkpoints!r}")
        if not self.run and not self.drafts:
            raise UserError("give --run RUN_DIR (every checkpoint) or --drafts D1 D2 ...")

    def hf_anchors(self) -> bool:
        return self.anchors in ("hf", "vllm")

    def gammas(self) -> list[int]:
        return [int(g) for g in (self.gamma if isinstance(self.gamma, list) else [self.gamma])]

    def lookups(self) -> list[int]:
        return [int(n) for n in (self.lookup if isinstance(self.lookup, list) else [self.lookup])] or [0]

    def tree_sizes(self) -> list[int]:
        return [int(k) for k in (self.tree_nodes if isinstance(self.tree_nodes, list) else [self.tree_nodes])] or [0]


def drafts_of_run(run: Path) -> list[tuple[str, int]]:
    """(hf folder, step) of every complete checkpoint, oldest first."""
    found = [(str(c / "hf"), int(c.name.split("-")[1])) for c in reversed(checkpoints.complete(run)) if (c / "hf").is_dir()]
    return found


def draft_names(todo: list[tuple[str, int | None]]) -> dict[str, str]:
    """{draft folder asked for: the fewest trailing path parts (less a final `hf`) that tell it from the others},
    so `runs/a/draft` and `runs/b/draft` read `a/draft` and `b/draft`, not `draft` twice. A run's checkpoints
    (with a step) and untrained cuts are named otherwise (_label)."""
    parts = {s: [x for x in Path(s).parts if x not in ("/", ".")] for s, step in todo
             if step is None and not s.startswith("layers:")}
    parts = {s: (p[:-1] if len(p) > 1 and p[-1] == "hf" else p) for s, p in parts.items()}
    for n in range(1, max((len(p) for p in parts.values()), default=1) + 1):
        names = {s: "/".join(p[-n:]) for s, p in parts.items()}
        if len(set(names.values())) == len(parts):
            return names
    return {s: s for s in parts}  # two spellings of one folder (absolute and relative): whole paths


def _label(spec: str, step: int | None, names: dict[str, str], lookup: int = 0, tree_nodes: int = 0) -> str:
    if spec.startswith("layers:"):
        name = f"untrained {spec}"
    else:
        name = f"step {step}" if step is not None else names[spec]
    name += f" tree-{tree_nodes}" if tree_nodes else ""
    return f"{name} + lookup {lookup}" if lookup else name


def prompt_lookup(target, tok, rows, encoded, cfg: EvalConfig, gamma: int) -> dict:
    """transformers' prompt-lookup decoding against the target alone (both HF generate), interleaved."""
    eos = eos_ids(target, tok)
    base = pld = 0.0
    tokens_b = tokens_p = same = 0

    def hf(ids, **kw):
        x = torch.tensor([ids], device=target.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            y = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=cfg.max_new_tokens, do_sample=False,
                                eos_token_id=list(eos), **kw)
        return y[0, len(ids):].tolist(), time.perf_counter() - t0

    hf(encoded[0])
    hf(encoded[0], prompt_lookup_num_tokens=gamma)
    for ids in encoded:
        a, ta = hf(ids)
        b, tb = hf(ids, prompt_lookup_num_tokens=gamma)
        base, pld, tokens_b, tokens_p, same = base + ta, pld + tb, tokens_b + len(a), tokens_p + len(b), same + (a == b)
    return {"method": "transformers prompt_lookup_num_tokens", "gamma": gamma,
            "hf_target_alone_tokens_per_s": round(tokens_b / base, 3), "tokens_per_s": round(tokens_p / pld, 3),
            "speedup_vs_hf_target_alone": round((tokens_p / pld) / (tokens_b / base), 4),
            "outputs_matching_target": same, "prompts": len(encoded)}


def run(cfg: EvalConfig, argv: list[str] | None = None, command: str | None = None) -> dict:
    if cfg.anchors == "vllm":  # before anything is measured, not after
        vllm_engine.require("--anchors vllm")
    run_dir = training_run(cfg.run, bool(cfg.drafts)) if cfg.run else None
    out = Path(cfg.output or (run_dir / "eval" if run_dir else "runs/eval"))
    out.mkdir(parents=True, exist_ok=True)
    rows = load_prompts(cfg.prompts, categories=cfg.categories or None, limit=cfg.limit, spread=True)
    errors: list[dict] = []
    todo, anchor = drafts_to_evaluate(cfg, run_dir, errors)
    # said before the target loads: with defaults this is 126 prompts and many minutes
    n_runs = sum(len(_grid(cfg, spec, step, todo, _head_folder(spec))) for spec, step in todo)
    limit = (f" (--limit {cfg.limit}: taken in turn from each category)" if cfg.limit else
             "; --limit N takes N prompts, in turn from each category, for a shorter run")
    print(f"evaluating {n_runs} draft x γ runs on {len(rows)} prompts x up to {cfg.max_new_tokens} new tokens "
          f"(one shared target-alone baseline){limit}", file=sys.stderr, flush=True)
    target, tok = load_target(cfg.target, cfg.dtype, cfg.device, load_format=cfg.load_format)
    encoded = encode_all(rows, tok, cfg.max_new_tokens, target.config.max_position_embeddings)

    # --- every draft x γ against one shared target-alone baseline (decode.bench.measure_many)
    runs, labels, notes = plan_runs(cfg, todo, target, tok, errors)
    if not any(spec != anchor for spec, *_ in labels):  # the untrained anchor alone evaluates nothing asked for
        raise UserError("nothing evaluated, no draft could be loaded: " + "; ".join(
            f"{x['draft']}: {x['error']}" for x in errors))
    entries = []
    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    names = draft_names(todo)
    for e, (spec, step, n, k) in zip(measure_many(target, tok, runs, rows, encoded, log=progress), labels):
        meta = read_meta(spec)
        e.update(label=_label(spec, step, names, n, k), step=step if step is not None else meta.get("step"),
                 design=meta.get("design"), kind=design_kind(meta.get("design"), e.get("draft_kind")),
                 trained=not spec.startswith("layers:"))
        entries.append(e)
    del runs

    anchors = {}
    if cfg.hf_anchors():
        anchors["prompt_lookup"] = prompt_lookup(target, tok, rows, encoded, cfg, max(cfg.gammas()))
    if cfg.anchors == "vllm":
        anchors["vllm"] = vllm_anchors.anchor(cfg.target, vllm_drafts(cfg, todo, errors), entries, encoded,
                                              gamma=max(cfg.gammas()), max_new_tokens=cfg.max_new_tokens,
                                              eos=eos_ids(target, tok), dtype=cfg.dtype, seed=cfg.seed)
    result = {"target": cfg.target, "prompts": len(rows), "prompt_set": cfg.prompts, "config": asdict(cfg),
              "command": command or "python -m distill.evaluate " + " ".join(argv or []),
              "run": str(run_dir) if run_dir else None, "entries": entries, "anchors": anchors, "errors": errors,
              "notes": notes,
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


def drafts_to_evaluate(cfg: EvalConfig, run_dir: Path | None,
                       errors: list[dict]) -> tuple[list[tuple[str, int | None]], str | None]:
    """(draft spec, training step or None): the run's checkpoints, the drafts asked for, and with anchors the
    untrained cut of the same target layers (the self-speculative baseline), returned apart as well. A run without
    checkpoints and a draft whose specdistill.json is unreadable are recorded in `errors` and skipped."""
    todo: list[tuple[str, int | None]] = []
    if run_dir:
        found = drafts_of_run(run_dir)
        if not found:
            _skip(errors, str(run_dir), f"no complete checkpoints in {run_dir} (nothing to evaluate there)")
        todo += found[-1:] if cfg.checkpoints == "last" else found
    todo += [(d, None) for d in cfg.drafts]
    metas = {}
    for spec, _ in todo:
        try:
            metas[spec] = read_meta(spec)
        except UserError as e:
            _skip(errors, spec, str(e))
    todo = [(d, s) for d, s in todo if d in metas]
    anchor = None
    if cfg.hf_anchors():  # cut like the first standalone draft (a head's design has no `layers` to cut)
        layers = next((ds["layers"] for d, _ in todo if isinstance(ds := metas[d].get("design"), dict)
                       and design_kind(ds) == "standalone" and isinstance(ds.get("layers"), list)), None)
        if layers is not None:
            anchor = "layers:" + ",".join(map(str, layers))
            todo.append((anchor, None))
    return todo, anchor


def _skip(errors: list[dict], spec: str, reason: str) -> None:
    """Record a draft that cannot be evaluated (report.json "errors", report.md) and say so now, on one line."""
    reason = " ".join(reason.split())
    errors.append({"draft": spec, "error": reason})
    print(f"skipped {spec}: {reason}", file=sys.stderr, flush=True)


def _head_folder(spec: str) -> bool:
    """A feature head folder (the check decode.targets.load_draft makes), before anything loads."""
    if spec.startswith("layers:"):
        return False
    try:
        return is_head_folder(resolve_model(spec))
    except UserError:  # not a folder: load_draft says why, later
        return False


def _grid(cfg: EvalConfig, spec: str, step: int | None, todo: list[tuple[str, int | None]],
          head: bool = False) -> list[tuple]:
    """(tree nodes, lookup, γ) settings a draft runs at: the whole grid for the drafts asked for and the newest
    checkpoint; the first setting only for the untrained anchor and earlier checkpoints (see plan_runs)."""
    gammas, lookups, counts = cfg.gammas(), cfg.lookups(), cfg.tree_sizes()
    return list(product(counts, lookups, gammas)) if _main(spec, step, todo) else [(counts[0], lookups[0], gammas[0])]


def _main(spec: str, step: int | None, todo: list[tuple[str, int | None]]) -> bool:
    """A draft asked for or the newest checkpoint (not the untrained anchor, not an earlier checkpoint)."""
    newest = max((s for _, s in todo if s is not None), default=None)
    return not spec.startswith("layers:") and (step is None or step == newest)


def plan_runs(cfg: EvalConfig, todo: list[tuple[str, int | None]], target, tok, errors: list[dict]):
    """Load each draft and list its (draft, BenchConfig, with transformers' assisted generation) runs and labels.

    The γ x lookup x tree grid goes to the drafts asked for and the newest checkpoint; the untrained anchor and
    the earlier checkpoints (the by-step curve) run at the first setting of each only, which keeps evaluation
    time in check (_grid). transformers' assisted generation has no lookup and verifies chains only, so it
    runs next to the first lookup setting and chains only. A draft that does not load (a
    missing folder, weights cut short) is skipped and recorded in `errors`: one bad draft never stops the others.
    A feature head runs with its own weights (_head_notes says so); transformers' assisted generation
    is asked for it as for any draft, and decode.bench records why it cannot run (`hf_assisted_skipped`).
    Returns (runs, labels, notes): notes are report.md's lines on what was left out for feature heads."""
    runs, labels, heads = [], [], []
    for spec, step in todo:
        try:
            draft = load_draft(spec, target, tok, device=str(target.device))
        except (UserError, OSError, ValueError) as e:
            _skip(errors, spec, str(e))
            continue
        main, head = _main(spec, step, todo), is_head(draft)
        heads += [spec] if head else []
        for k, n, g in _grid(cfg, spec, step, todo, head):
            bcfg = BenchConfig(target=cfg.target, draft=spec, prompts=resolve(cfg.prompts),
                               max_new_tokens=cfg.max_new_tokens, gamma=g, schedule=cfg.schedule, lookup=n,
                               lookup_tokens=cfg.lookup_tokens, tree_nodes=k,
                               draft_weights=DecodeOptions.draft_weights if head else cfg.draft_weights,
                               temperature=cfg.temperature, seed=cfg.seed, device=str(target.device), dtype=cfg.dtype,
                               hf_static=cfg.hf_static)
            runs.append((draft, bcfg, cfg.hf_anchors() and main and n == cfg.lookups()[0] and not k))
            labels.append((spec, step, n, k))
    notes = _head_notes(cfg, heads)
    for line in notes:
        print(f"note: {line}", file=sys.stderr, flush=True)
    return runs, labels, notes


def _head_notes(cfg: EvalConfig, heads: list[str]) -> list[str]:
    """What the settings ask that feature heads do not take, one line each ([] without heads)."""
    if not heads:
        return []
    names = ", ".join(f"`{h}`" for h in heads)
    notes = []
    if cfg.draft_weights != DecodeOptions.draft_weights:
        notes.append(f"feature heads ({names}) ran with their own {DecodeOptions.draft_weights} weights: "
                     f"--draft-weights {cfg.draft_weights} is for standalone drafts")
    if cfg.hf_anchors():
        notes.append(f"feature heads ({names}) have no transformers assisted generation anchor (it takes standalone "
                     "models only) and no untrained layer cut (a standalone anchor)")
    return notes


def vllm_drafts(cfg: EvalConfig, todo: list[tuple[str, int | None]], errors: list[dict]) -> list[tuple[str, str]]:
    """(draft, label) for vLLM's anchor: the drafts asked for and the newest checkpoint, as in our main grid (each
    costs vLLM an engine start), less those that did not load."""
    failed = {e["draft"] for e in errors}
    names = draft_names(todo)
    return [(spec, _label(spec, step, names)) for spec, step in todo if spec not in failed and _main(spec, step, todo)]


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
