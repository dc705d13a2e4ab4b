"""The cost model of a parallel draft (decode.drafting.parallel): one draft forward a round, whatever γ.

    c_block(γ)  draft forward of γ tokens after a cached context ÷ the target's one-token step (decode.bench.latency
                measures it for a parallel draft: block_costs)
    round       c_block(γ) + v(γ) target steps for a chain of γ; c_block(γ) + v(N) for a tree of N nodes γ deep
    speedup     τ / round, τ the run's own tokens per draft round: a parallel draft's acceptance falls with the
                position (mask k predicts further ahead), so the i.i.d. τ(α, γ) of a chain does not describe it; the
                per-position acceptance (costmodel.depth_acceptance of the accept histogram) is reported beside it
    lookup      rounds proposed by context lookup cost v(their length) and no draft forward, as for a chain
"""

from __future__ import annotations

from decode.bench import costmodel


def tau_of(accepted: int, rounds: int) -> float:
    """Tokens a round emits: accepted drafts + 1."""
    return (accepted + rounds) / rounds if rounds else 1.0


def round_cost(c_block: float, v: float) -> float:
    """Target steps a parallel round costs: its one draft forward and its verification."""
    return c_block + v


def speedup(tau: float, c_block: float, v: float, lookup_share: float = 0.0, lookup_tau: float = 0.0,
            v_lookup: float = 0.0) -> float:
    """Predicted speedup: tokens per round over target steps per round, with a share of rounds from context lookup
    (lookup_tau tokens for v_lookup each)."""
    tokens = lookup_share * lookup_tau + (1 - lookup_share) * tau
    time = lookup_share * v_lookup + (1 - lookup_share) * round_cost(c_block, v)
    return tokens / time


def c_block_at(c_block: dict, gamma: int) -> float:
    """c_block(γ) from the measured ones ({γ: c}, γ as int or str): measured, else a straight line through the
    neighbours, the nearest measured value outside their range."""
    c = {int(g): x for g, x in c_block.items()}
    if gamma in c:
        return c[gamma]
    gs = sorted(c)
    lo = max((g for g in gs if g < gamma), default=gs[0])
    hi = min((g for g in gs if g > gamma), default=gs[-1])
    if lo == hi:
        return c[lo]
    return c[lo] + (c[hi] - c[lo]) / (hi - lo) * (gamma - lo)


def model(spec, gamma: int, tree_nodes: int, c_block: dict, v: dict[int, float]) -> dict:
    """The parallel cost model's inputs and prediction for a run's Stats `spec` at γ (a tree: tree_nodes nodes):
    {"c_block", "draft_tau", "position_acceptance", "predicted_speedup"}."""
    d_acc, d_rounds = spec.accepted - spec.lookup_accepted, spec.rounds - spec.lookup_rounds
    share = spec.lookup_rounds / spec.rounds if spec.rounds else 0.0
    l_len = spec.lookup_proposed / spec.lookup_rounds if spec.lookup_rounds else 1.0
    cb = c_block_at(c_block, gamma)
    verify = costmodel.v_at(v, round(spec.tree_nodes / spec.tree_rounds) if tree_nodes and spec.tree_rounds else gamma)
    tau = tau_of(d_acc, d_rounds)
    pred = speedup(tau, cb, verify, share, tau_of(spec.lookup_accepted, spec.lookup_rounds),
                   costmodel.v_at(v, max(1, round(l_len))) if share else 0.0)
    return {"c_block": round(cb, 4), "draft_tau": round(tau, 4), "verify_v": round(verify, 4),
            "position_acceptance": [round(x, 4) for x in costmodel.depth_acceptance(spec.accept_histogram)],
            "predicted_speedup": round(pred, 4)}


def in_run(spec, v_run: float, c_run: float, gamma: int) -> float:
    """The same prediction with the run's own c (draft seconds a draft round ÷ the target's step) and v (its mean
    target forward ÷ the target's step), decode.bench.results._costs_in_run."""
    d_rounds = spec.rounds - spec.lookup_rounds
    share = spec.lookup_rounds / spec.rounds if spec.rounds else 0.0
    return speedup(tau_of(spec.accepted - spec.lookup_accepted, d_rounds), c_run, v_run, share,
                   tau_of(spec.lookup_accepted, spec.lookup_rounds), v_run)
