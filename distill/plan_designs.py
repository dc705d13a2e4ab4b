"""Which kinds of draft the pipeline trains: each design's untrained draft timed on this machine before any training
step, and the cost model's verdict on whether it can win at any α the data can buy (RUN/plan.json).

    c        a draft step ÷ the target's one-token step (a parallel draft: its one forward of γ tokens, c_block(γ),
             taken as γ steps of c_block(γ)/γ), timed as evaluate times it (decode.bench.latency.measure: the draft
             built as training builds it, in evaluate's --draft-weights; a feature head in its own float32)
    v(γ)     the target's forward of γ+1 tokens ÷ its one-token step
    S(α)     the cost model's speedup at the γ evaluate gives the design (decode.bench.costmodel): the best over them
    bar      what a design must beat: the target alone (1) and every other design at ALPHA_FLOOR
    needs    the least α with S(α) >= bar; the design is skipped when it needs more than ALPHA_CEILING[design], the
             most α its training on this data can buy (or no α gets there)

The band is the measured evidence (docs/results.md, "The data engine", "Feature heads", "Parallel drafts"): a design
is skipped only when its best case loses to another design's worst case. Context lookup and token trees are left out
(they lift every design's τ; evaluate measures them). The timings are stored in RUN/plan.json and a resumed run
decides from them, so it keeps the designs it started training. `--designs all` (or a list) trains without a plan.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from types import SimpleNamespace

from transformers import AutoConfig

from decode.bench import costmodel, latency
from decode.errors import UserError
from decode.models.targets import load_target, resolve
from decode.options import DecodeOptions
from distill.evaluate.plan import step_costs
from distill.evaluate.timing import V_FLOOR

# The cost model's per-token α (τ = 1 + α + α² at γ 2, chains without lookup) that this project's data bought each
# design, the best measured: standalone τ 1.52 (--preset best: 231k tokens, 1,150 steps, 48 held-out prompts),
# feature head τ 1.46 (the same run, 600 steps), parallel τ 1.38 (the default's 57k tokens, 300 steps, 24 prompts;
# not measured on more data). α moves ±0.02 between evaluations (±0.03 per token), so the ceiling is 0.05 above.
BEST_ALPHA = {"standalone": 0.378, "feature_head": 0.343, "parallel": 0.294}
MARGIN = 0.05
ALPHA_CEILING = {d: round(a + MARGIN, 3) for d, a in BEST_ALPHA.items()}
# the least any trained design reached: the feature head on the 28k-token point of the data-scaling curve (τ 1.34).
# Rivals are taken there, so a design is skipped only when its best case loses to another design's worst.
ALPHA_FLOOR = 0.266

PLAN_FILE = "plan.json"


# --- the decision: pure functions of the timings ------------------------------------------------------------------


def speedup_at(alpha: float, cost: dict, v: dict[int, float], gammas: list[int]) -> tuple[float, int]:
    """(the cost model's best speedup over `gammas` at per-token α, its γ)."""
    c = step_costs(cost, gammas)
    return max((costmodel.speedup(alpha, g, c[g], costmodel.v_at(v, g)), g) for g in gammas)


def alpha_needed(bar: float, cost: dict, v: dict[int, float], gammas: list[int]) -> float | None:
    """The least α whose predicted speedup reaches `bar` at one of `gammas` (None: not even α = 1)."""
    c = step_costs(cost, gammas)
    found = [a for g in gammas if (a := costmodel.alpha_for_speedup(bar, g, c[g], costmodel.v_at(v, g))) is not None]
    return min(found, default=None)


def decide(costs: dict[str, dict], v: dict[int, float], gammas: dict[str, list[int]]) -> dict:
    """{design: its numbers and `train`}, in `costs` order: a design trains when the α it needs to beat the target
    alone and every other design (at ALPHA_FLOOR) is within its ALPHA_CEILING. costs: {design: {"c": ..} or
    {"c_block": {γ: ..}}}; v: the target's v(γ); gammas: the γ evaluate gives each design."""
    floor = {d: speedup_at(ALPHA_FLOOR, costs[d], v, gammas[d])[0] for d in costs}
    out = {}
    for d, cost in costs.items():
        bar = max([1.0] + [s for r, s in floor.items() if r != d])
        needs = alpha_needed(bar, cost, v, gammas[d])
        best, g = speedup_at(ALPHA_CEILING[d], cost, v, gammas[d])
        out[d] = {"cost": round(max(step_costs(cost, gammas[d]).values()), 4), "gamma": g,
                  "at_ceiling": round(best, 4), "ceiling": ALPHA_CEILING[d], "bar": round(bar, 4),
                  "needs": None if needs is None else round(needs, 3),
                  "train": needs is not None and needs <= ALPHA_CEILING[d]}
    return out


def keep_chain(decision: dict, needs_chain: bool) -> None:
    """A parallel draft that continues the chain (init chain) needs the standalone draft trained, won or not."""
    if needs_chain and decision.get("parallel", {}).get("train") and "standalone" in decision:
        s = decision["standalone"]
        s["chain_for_parallel"] = not s["train"]
        s["train"] = True


def line(plan: dict) -> str:
    """The one printed line: the target's costs, then each design's c, what it needs and what the data buys it."""
    v = plan["v"]
    parts = []
    for d, x in plan["decision"].items():
        verdict = ("train (the parallel draft continues it)" if x.get("chain_for_parallel") else
                   "train" if x["train"] else "skip")
        needs = f"needs α {x['needs']}" if x["needs"] is not None else "cannot reach it at any α"
        parts.append(f"{d} c {x['cost']}: to beat {x['bar']}x {needs}, the data buys ≤ {x['ceiling']} "
                     f"({x['at_ceiling']}x at γ {x['gamma']}): {verdict}")
    return (f"plan: target step {plan['target_step_ms']} ms, v {', '.join(f'({g}) {x}' for g, x in v.items())}; "
            + "; ".join(parts) + " (distill/plan_designs.py; --designs all trains every design)")


# --- timing each design's untrained draft --------------------------------------------------------------------------


def name_of(t) -> str:
    """The design a pipeline training stage trains: standalone, feature_head or parallel."""
    return "parallel" if t.parallel else t.design


def measure(trains: list, e, needed: list[str], known: dict | None = None) -> dict:
    """c (or c_block) of each `needed` design's untrained draft and the target's v(γ), on evaluate's device and dtype:
    {"target_step_ms", "v", "costs": {design: ...}, "device", "seconds"}; `known` (a stored plan) is kept as it is."""
    from distill.train.build import build_model  # the trainer's imports, only when a plan is made
    from distill.train.data import load_data
    from distill.train.parallel import FROM_CHAIN

    t0 = time.perf_counter()
    plan = copy.deepcopy(known) if known else {"costs": {}}
    target, tok = load_target(e.target, e.dtype, e.device, load_format=e.load_format)
    stand_in = SimpleNamespace(device=target.device, state=SimpleNamespace(deepspeed_plugin=None))  # no accelerate
    by_name = {name_of(t): t for t in trains}
    gammas = sorted({*e.gammas(), *e.parallel_gammas()})
    data = load_data(trains[0], tok)  # every stage trains on the same collection: its token counts and rows
    built = {}  # every draft before any is timed: a timed model holds its runner, which a copy would carry along
    for d in sorted(needed, key=lambda d: d == "parallel"):
        t = by_name[d]
        if d == "parallel" and t.init == FROM_CHAIN:  # the chain draft with its mask token (build_model's way)
            chain = built.get("standalone") or build_model(by_name["standalone"], tok, data, stand_in)
            built[d] = SimpleNamespace(model=_with_mask(chain, t, tok, data))
        else:
            built[d] = build_model(t, tok, data, stand_in)
    for d in needed:
        model = built[d].model
        weights = DecodeOptions.draft_weights if d == "feature_head" else e.draft_weights
        lat = latency.measure(target, model.to(target.dtype).eval(), gammas, draft_weights=weights,  # load_draft's dtype
                              known_v={int(g): x for g, x in plan.get("v", {}).items()})
        plan["costs"][d] = {"c": lat["c"], "draft_step_ms": lat["draft_step_ms"],
                            **({"c_block": lat["c_block"]} if lat.get("c_block") else {})}
        plan.setdefault("target_step_ms", lat["target_step_ms"])
        plan["v"] = {**plan.get("v", {}), **lat["v"]}
    plan.update(device=str(target.device), seconds=round(plan.get("seconds", 0) + time.perf_counter() - t0, 1))
    return plan


def _with_mask(chain, t, tok, data):
    """A copy of the chain draft with its mask token, as training adds it (distill/train/build.py)."""
    from distill.train import batches, parallel

    vocab = AutoConfig.from_pretrained(resolve(t.target)).vocab_size
    model = copy.deepcopy(chain.model)
    parallel.add_mask_token(model, chain.vocab_map, batches.TokenRows(data.train).counts(vocab), tok, vocab)
    return model


# --- the pipeline's stage ------------------------------------------------------------------------------------------


def implausible(plan: dict) -> list[str]:
    """Timings a quiet machine cannot give: v(γ) below V_FLOOR or above γ + 1 (γ + 1 tokens in one forward never cost
    more than γ + 1 forwards of one), a draft step of no time. A busy machine gives them (v(2) = 21.7 was timed here
    with another job on the cores)."""
    out = [f"v({g}) = {x}" for g, x in plan["v"].items() if not V_FLOOR <= x <= int(g) + 1]
    return out + [f"{d}: c = {x.get('c')}" for d, x in plan["costs"].items() if not (x.get("c") or 0) > 0]


TRIES = 3  # timings taken again while implausible; then every design trains, and the line says why


def choose(trains: list, e, out: Path) -> tuple[list, dict]:
    """The training stages the plan keeps, and the plan (timings from RUN/plan.json where they are, so a resumed
    run decides as the first did; the decision written beside them). Prints the plan's line; no design that can
    win is a UserError that says why."""
    from distill.train.parallel import FROM_CHAIN

    path = out / PLAN_FILE
    stored = json.loads(path.read_text()) if path.is_file() else None
    names = [name_of(t) for t in trains]
    missing = [d for d in names if d not in (stored or {}).get("costs", {})]
    plan = stored
    for _ in range(TRIES if missing else 0):
        plan = measure(trains, e, missing, stored)
        if not (problems := implausible(plan)):
            break
        print(f"plan: timings implausible ({', '.join(problems)}): the machine is busy", flush=True)
        stored, missing = None, names  # every design again, against a target step timed again
    plan["unreliable"] = plan.get("unreliable") or implausible(plan)
    if plan["unreliable"]:
        plan["decision"] = {d: {"train": True} for d in names}
        plan["line"] = (f"plan: timings unreliable ({', '.join(plan['unreliable'])}; the machine was busy): every "
                        "design is trained (RUN/plan.json)")
    else:
        gammas = {d: e.parallel_gammas() if d == "parallel" else e.gammas() for d in names}
        plan["decision"] = decide({d: plan["costs"][d] for d in names}, {int(g): x for g, x in plan["v"].items()},
                                  gammas)
        keep_chain(plan["decision"], any(t.parallel and t.init == FROM_CHAIN for t in trains))
        plan["line"] = line(plan)
    path.write_text(json.dumps(plan, indent=2) + "\n")
    print(plan["line"], flush=True)
    kept = [t for t, d in zip(trains, names) if plan["decision"][d]["train"]]
    if not kept:
        raise UserError(f"no design to train: none beats the target alone here even at the most α this data buys it "
                        f"({plan['line']}); decode with the target alone, or give --designs all to train them anyway")
    return kept, plan
