"""The speculative-decoding cost model (docs/architecture.md, "Metrics"), pure functions of measured quantities.

    α      acceptance rate (i.i.d. per proposed token)
    γ      draft tokens per round
    c      draft step latency / target step latency (one token each, measured on the device in use)
    v(γ)   target latency for γ+1 tokens / for 1 token (verification is not free, especially on CPU)

    τ(α, γ)       = (1 - α^(γ+1)) / (1 - α)      expected tokens per round (accepted + 1)
    speedup(α, γ) ≈ τ(α, γ) / (γ·c + v(γ))       round time in units of one target step

A draft with its own tokenizer (decode.drafting.translate) proposes r target tokens a draft step (r measured: a
GPT-2 token is ~1.3 Gemma tokens): τ(α, γ·r) / (γ·c + v(γ·r)), α per target token.
"""

from __future__ import annotations


def alpha_iid(accepted: int, rounds: int, full_rounds: int) -> float:
    """The per-token acceptance probability the model assumes, estimated from a constant-γ run.

    accepted / proposed is biased low as an estimate of it for γ > 1: drafts after the first rejection in a
    round are counted as proposed but were never tested. Under i.i.d. acceptance each round is a run of
    successes ended by one failure (or by reaching γ), so the maximum-likelihood estimate is
    accepted / (accepted + rounds that ended in a rejection); full_rounds = rounds that accepted all γ drafts.
    Equal to accepted / proposed at γ = 1.
    """
    rejected = rounds - full_rounds
    return accepted / (accepted + rejected) if accepted + rejected else 0.0


def tau(alpha: float, gamma: int) -> float:
    """Expected tokens emitted per target forward under i.i.d. acceptance."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def speedup(alpha: float, gamma: int, c: float, v: float, ratio: float = 1.0) -> float:
    """Predicted speculative tokens/s ÷ target-alone tokens/s; ratio: target tokens a draft step proposes (v is then
    v(γ·ratio))."""
    return tau(alpha, gamma * ratio) / (gamma * c + v)


def speedup_with_lookup(alpha: float, gamma: int, c: float, v: dict[int, float], lookup_share: float,
                        lookup_alpha: float, lookup_len: float, v_draft: float | None = None) -> float:
    """Predicted speedup when a share of rounds proposes from context lookup (decode.drafting.lookup) instead of the draft.

    A lookup round proposes lookup_len tokens (the mean; v at the nearest measured γ) with no draft forward, accepted
    i.i.d. with lookup_alpha; a draft round is the plain model. Per round on average:
        tokens = f·τ(α_l, g_l) + (1 − f)·τ(α, γ),   time = f·v(g_l) + (1 − f)·(γ·c + v(γ))   (f = lookup_share)
    v_draft replaces v(γ) for a draft round that verifies another number of tokens than γ + 1.
    """
    g_l = min(v, key=lambda g: abs(g - lookup_len))
    tokens = lookup_share * tau(lookup_alpha, g_l) + (1 - lookup_share) * tau(alpha, gamma)
    time = lookup_share * v[g_l] + (1 - lookup_share) * (gamma * c + (v[gamma] if v_draft is None else v_draft))
    return tokens / time


def tree_speedup(tau_: float, levels: float, c: float, v_nodes: float, lookup_share: float = 0.0,
                 v_lookup: float = 0.0) -> float:
    """Predicted speedup of token trees (decode.drafting.tree): tau_ tokens per round (measured: a tree's acceptance is not
    i.i.d. per token, so τ comes from the run's per-depth acceptance), for `levels` draft forwards (c each) and one
    verification of the tree's N nodes + 1 (v_nodes = v(N)) per draft round; a share of rounds proposed by context
    lookup costs v_lookup each instead."""
    return tau_ / (lookup_share * v_lookup + (1 - lookup_share) * (levels * c + v_nodes))


def depth_acceptance(histogram: list[int]) -> list[float]:
    """Per depth d = 1, 2, ...: the share of rounds that accepted a d-th token among those that accepted d - 1
    (accept_histogram[k]: rounds that accepted exactly k)."""
    out, reached = [], sum(histogram)
    for d in range(1, len(histogram)):
        further = sum(histogram[d:])
        out.append(further / reached if reached else 0.0)
        reached = further
    return out


def best_gamma(alpha: float, c: float, v: dict[int, float], ratio: float = 1.0) -> tuple[int, float]:
    """The γ among those with a measured v(γ) that maximises predicted speedup: (γ, speedup); ratio as in speedup."""
    scores = {g: speedup(alpha, g, c, v_at(v, g * ratio), ratio) for g in v if g >= 1}
    g = max(scores, key=scores.get)
    return g, scores[g]


def alpha_for_speedup(target_speedup: float, gamma: int, c: float, v: float, tol: float = 1e-6) -> float | None:
    """Smallest α whose predicted speedup reaches target_speedup (None if even α = 1 does not): iso-speedup curves."""
    if speedup(1.0, gamma, c, v) < target_speedup:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(mid, gamma, c, v) < target_speedup else (lo, mid)
    return hi


def v_at(v: dict[int, float], gamma: int) -> float:
    """v(γ) for any γ ≥ 1 from the measured ones (decode.bench.latency.measure: γ = 1..6 and 8, plus those run):
    measured values as they are, straight lines between neighbours, and beyond the measured range the slope of
    the last (or first) two points. v grows close to linearly in γ+1 once a forward is compute bound, and a
    line through neighbours keeps each kernel's steps (decode.runners.smallgemm) where they were measured. Never below 1:
    verifying γ+1 tokens costs at least one target step."""
    if not v:
        raise ValueError("v_at: no measured v(γ)")
    if gamma in v:
        return v[gamma]
    gs = sorted(v)
    if len(gs) == 1:
        return v[gs[0]]
    lo = max((g for g in gs if g < gamma), default=None)
    hi = min((g for g in gs if g > gamma), default=None)
    if lo is None:  # below the measured range
        lo, hi = gs[0], gs[1]
    elif hi is None:  # above it
        lo, hi = gs[-2], gs[-1]
    slope = (v[hi] - v[lo]) / (hi - lo)
    return max(1.0, v[lo] + slope * (gamma - lo))
