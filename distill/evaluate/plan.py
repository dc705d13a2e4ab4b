"""What one evaluation runs: the drafts (a run's checkpoints, the folders asked for, the untrained anchor), their
names in the report, and each draft's (BenchConfig, transformers anchor) runs over the gamma x lookup x tree grid
(a screened evaluation: over the γ the cost model finds plausible, plausible_gammas)."""

from __future__ import annotations

import json
import sys
from itertools import product
from pathlib import Path
from types import SimpleNamespace

from decode.bench import BenchConfig, costmodel, is_head, latency
from decode.bench.config import hf_skip_reason
from decode.bench.parallel_cost import c_block_at
from decode.drafting.parallel import mask_token
from decode.errors import UserError
from decode.models.draft_folder import read_meta
from decode.models.feature_head import is_head_folder
from decode.models.targets import load_draft
from decode.models.targets import resolve as resolve_model
from decode.models.vocab_pair import check_chat_template
from decode.options import DecodeOptions
from distill.evaluate.config import EvalConfig
from distill.evaluate.kinds import design_kind
from distill.prompts import resolve
from distill.train import checkpoints


def drafts_of_run(run: Path) -> list[tuple[str, int]]:
    """(hf folder, step) of every complete checkpoint, oldest first."""
    found = [(str(c / "hf"), int(c.name.split("-")[1])) for c in reversed(checkpoints.complete(run)) if (c / "hf").is_dir()]
    return found


def draft_names(todo: list[tuple[str, int | None]]) -> dict[str, str]:
    """{draft folder asked for: the fewest trailing path parts (less a final `hf`) that tell it from the others},
    so `runs/a/draft` and `runs/b/draft` read `a/draft` and `b/draft`, not `draft` twice. A run's checkpoints
    (with a step) and untrained cuts are named otherwise (label)."""
    parts = {s: [x for x in Path(s).parts if x not in ("/", ".")] for s, step in todo
             if step is None and not s.startswith("layers:")}
    parts = {s: (p[:-1] if len(p) > 1 and p[-1] == "hf" else p) for s, p in parts.items()}
    for n in range(1, max((len(p) for p in parts.values()), default=1) + 1):
        names = {s: "/".join(p[-n:]) for s, p in parts.items()}
        if len(set(names.values())) == len(parts):
            return names
    return {s: s for s in parts}  # two spellings of one folder (absolute and relative): whole paths


def label(spec: str, step: int | None, names: dict[str, str], lookup: int = 0, tree_nodes: int = 0) -> str:
    if spec.startswith("layers:"):
        name = f"untrained {spec}"
    else:
        name = f"step {step}" if step is not None else names[spec]
    name += f" tree-{tree_nodes}" if tree_nodes else ""
    return f"{name} + lookup {lookup}" if lookup else name


def drafts_to_evaluate(cfg: EvalConfig, run_dir: Path | None,
                       errors: list[dict]) -> tuple[list[tuple[str, int | None]], str | None]:
    """(draft spec, training step or None): the run's checkpoints, the drafts asked for, and with anchors the
    untrained cut of the same target layers (the self-speculative baseline), returned apart as well. A run without
    checkpoints and a draft whose specdistill.json is unreadable are recorded in `errors` and skipped."""
    todo: list[tuple[str, int | None]] = []
    if run_dir:
        found = drafts_of_run(run_dir)
        if not found:
            skip(errors, str(run_dir), f"no complete checkpoints in {run_dir} (nothing to evaluate there)")
        todo += found[-1:] if cfg.checkpoints == "last" else found
    todo += [(d, None) for d in [*cfg.drafts, *cfg.drafts_extra]]
    metas = {}
    for spec, _ in todo:
        try:
            metas[spec] = read_meta(spec)
        except UserError as e:
            skip(errors, spec, str(e))
    todo = [(d, s) for d, s in todo if d in metas]
    anchor = None
    if cfg.hf_anchors():  # cut like the first standalone draft (a head's design has no `layers` to cut)
        layers = next((ds["layers"] for d, _ in todo if isinstance(ds := metas[d].get("design"), dict)
                       and design_kind(ds) == "standalone" and isinstance(ds.get("layers"), list)), None)
        if layers is not None:
            anchor = "layers:" + ",".join(map(str, layers))
            todo.append((anchor, None))
    return todo, anchor


def skip(errors: list[dict], spec: str, reason: str) -> None:
    """Record a draft that cannot be evaluated (report.json "errors", report.md) and say so now, on one line."""
    reason = " ".join(reason.split())
    errors.append({"draft": spec, "error": reason})
    print(f"skipped {spec}: {reason}", file=sys.stderr, flush=True)


def head_folder(spec: str) -> bool:
    """A feature head folder (the check decode.models.targets.load_draft makes), before anything loads."""
    if spec.startswith("layers:"):
        return False
    try:
        return is_head_folder(resolve_model(spec))
    except UserError:  # not a folder: load_draft says why, later
        return False


def grid(cfg: EvalConfig, spec: str, step: int | None, todo: list[tuple[str, int | None]],
          head: bool = False) -> list[tuple]:
    """(tree nodes, lookup, γ) settings a draft runs at: the whole grid for the drafts asked for and the newest
    checkpoint; the first setting only for the untrained anchor and earlier checkpoints (see plan_runs)."""
    gammas, lookups, counts = cfg.gammas(), cfg.lookups(), cfg.tree_sizes()
    gammas = cfg.parallel_gammas() if parallel_folder(spec) else gammas  # one forward a round: its own γ
    return list(product(counts, lookups, gammas)) if is_main(spec, step, todo) else [(counts[0], lookups[0], gammas[0])]


def parallel_folder(spec: str) -> bool:
    """A parallel draft's folder (its config.json names a mask token: decode.drafting.parallel), before it loads."""
    path = Path(spec) / "config.json" if not spec.startswith("layers:") else None
    try:
        return path is not None and mask_token(SimpleNamespace(**json.loads(path.read_text()))) is not None
    except (OSError, ValueError, TypeError):  # not a folder, or not a config: load_draft says why, later
        return False


def is_main(spec: str, step: int | None, todo: list[tuple[str, int | None]]) -> bool:
    """A draft asked for or the newest checkpoint (not the untrained anchor, not an earlier checkpoint)."""
    newest = max((s for _, s in todo if s is not None), default=None)
    return not spec.startswith("layers:") and (step is None or step == newest)


def plan_runs(cfg: EvalConfig, todo: list[tuple[str, int | None]], target, tok, errors: list[dict], rows=(),
              screen: bool = False):
    """Load each draft and list its (draft, BenchConfig, with transformers' assisted generation) runs and labels.

    The γ x lookup x tree grid goes to the drafts asked for and the newest checkpoint; the untrained anchor and
    the earlier checkpoints (the by-step curve) run at the first setting of each only, which keeps evaluation
    time in check (grid). A screen (`screen`) times only the γ the cost model finds plausible (plausible_gammas).
    transformers' assisted generation runs once: next to the first lookup setting, as a chain, with the first draft
    it can run (hf_once). A draft that does not load (a missing folder, weights cut short) is skipped and recorded
    in `errors`: one bad draft never stops the others. A feature head runs with its own weights (_head_notes says so).
    Returns (runs, labels, notes): notes are report.md's lines on what was left out for feature heads."""
    runs, labels, heads, wanted, known_v = [], [], [], [], {}
    for spec, step in todo:
        try:
            draft = load_draft(spec, target, tok, device=str(target.device))
            for row in rows if draft.other is not None else ():  # its own tokenizer: it must read the target's text
                check_chat_template(tok, draft.other.tokenizer, row)
        except (UserError, OSError, ValueError) as e:
            skip(errors, spec, str(e))
            continue
        main, head = is_main(spec, step, todo), is_head(draft)
        heads += [spec] if head else []
        weights = DecodeOptions.draft_weights if head else cfg.draft_weights
        settings = grid(cfg, spec, step, todo, head)
        if screen and main:
            keep = plausible_gammas(target, draft, spec, sorted({g for *_, g in settings}), weights, known_v)
            settings = [x for x in settings if x[2] in keep]
        for k, n, g in settings:
            bcfg = BenchConfig(target=cfg.target, draft=spec, prompts=resolve(cfg.prompts),
                               max_new_tokens=cfg.max_new_tokens, gamma=g, schedule=cfg.schedule, lookup=n,
                               lookup_tokens=cfg.lookup_tokens, tree_nodes=k, draft_weights=weights,
                               draft_context=cfg.draft_context,
                               temperature=cfg.temperature, seed=cfg.seed, device=str(target.device), dtype=cfg.dtype,
                               hf_static=cfg.hf_static)
            runs.append((draft, bcfg, False))
            wanted.append(cfg.hf_anchors() and main and n == cfg.lookups()[0] and not k)
            labels.append((spec, step, n, k))
    notes = _head_notes(cfg, heads)
    for line in notes:
        print(f"note: {line}", file=sys.stderr, flush=True)
    return hf_once(runs, wanted), labels, notes


def hf_once(runs: list[tuple], wanted: list[bool]) -> list[tuple]:
    """transformers' anchors once per evaluation: assisted generation with the first wanted run whose draft it can
    run (decode.bench.config.hf_skip_reason), else the first wanted one (its generate still times the target alone,
    and the reason is recorded)."""
    cands = [i for i, w in enumerate(wanted) if w]
    pick = next((i for i in cands if hf_skip_reason(runs[i][0], runs[i][1]) is None), cands[0] if cands else None)
    return [(d, c, i == pick) for i, (d, c, _) in enumerate(runs)]


PLAUSIBLE = 0.05  # a screen times each γ whose predicted speedup is within 5% of the draft's best predicted one


def plausible_gammas(target, draft, spec: str, gammas: list[int], weights: str, known_v: dict) -> list[int]:
    """The γ a screen times: all of them where the draft's training recorded no held-out proxy (its α estimate)
    or only one is asked for; else those whose predicted speedup (decode.bench.costmodel, with the draft's c or
    c_block and the target's v(γ) timed now, v once per evaluation in known_v) is within PLAUSIBLE of the best."""
    alpha = (read_meta(spec).get("metrics") or {}).get("eval/acceptance_proxy") if not spec.startswith("layers:") else None
    if len(gammas) < 2 or not isinstance(alpha, (int, float)) or draft.other is not None:
        return gammas
    lat = latency.measure(target, draft.model, gammas, draft_weights=weights, known_v=known_v)
    known_v.update({int(g): x for g, x in lat["v"].items()})
    return plausible(gammas, float(alpha), step_costs(lat, gammas), {int(g): x for g, x in lat["v"].items()})


def step_costs(cost: dict, gammas: list[int]) -> dict[int, float]:
    """{γ: draft cost per proposed token, in target steps}: c, or a parallel draft's c_block(γ) / γ (one forward of γ
    tokens a round, decode.bench.parallel_cost)."""
    if cost.get("c_block"):
        return {g: c_block_at(cost["c_block"], g) / g for g in gammas}
    return {g: cost["c"] for g in gammas}


def plausible(gammas: list[int], alpha: float, c: dict[int, float], v: dict[int, float]) -> list[int]:
    """The γ whose predicted speedup at per-token α is within PLAUSIBLE of the best (c: draft cost per token at γ)."""
    pred = {g: costmodel.speedup(alpha, g, c[g], costmodel.v_at(v, g)) for g in gammas}
    return [g for g in gammas if pred[g] >= (1 - PLAUSIBLE) * max(pred.values())]


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
    return [(spec, label(spec, step, names)) for spec, step in todo if spec not in failed and is_main(spec, step, todo)]
