"""The cost model (docs/architecture.md, "Metrics"): τ, speedup, best γ, the iso-speedup inverse, and τ against simulation."""

import math
import random

import pytest
import torch

from decode.bench import costmodel


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_tau_limits(gamma):
    assert costmodel.tau(1.0, gamma) == gamma + 1
    assert costmodel.tau(0.0, gamma) == 1.0
    # continuous at α -> 1
    assert math.isclose(costmodel.tau(1 - 1e-9, gamma), gamma + 1, rel_tol=1e-6)


def test_tau_hand_values():
    assert math.isclose(costmodel.tau(0.5, 1), 1.5)
    assert math.isclose(costmodel.tau(0.5, 3), 1 + 0.5 + 0.25 + 0.125)
    assert math.isclose(costmodel.tau(0.8, 4), sum(0.8**k for k in range(5)))


@pytest.mark.parametrize("alpha", [-0.1, 1.1])
def test_tau_rejects_alpha_outside_unit_interval(alpha):
    with pytest.raises(ValueError, match="alpha must be in"):
        costmodel.tau(alpha, 3)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.9, 1.0])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_tau_matches_monte_carlo_of_iid_acceptance(alpha, gamma):
    """Simulate rounds: each of γ proposals passes with prob α until the first failure; emitted = accepted + 1."""
    g = torch.Generator().manual_seed(int(alpha * 100) + gamma)
    rounds = 200_000
    passes = torch.rand(rounds, gamma, generator=g) < alpha
    accepted = passes.int().cumprod(dim=1).sum(dim=1)  # length of the all-pass prefix
    measured = float((accepted + 1).double().mean())
    assert abs(measured - costmodel.tau(alpha, gamma)) < 0.01 * (gamma + 1)


def test_speedup_formula():
    assert math.isclose(costmodel.speedup(1.0, 4, c=0.1, v=1.2), 5 / (0.4 + 1.2))
    assert math.isclose(costmodel.speedup(0.0, 4, c=0.1, v=1.2), 1 / 1.6)
    # a free draft and free verification: speedup == τ
    assert math.isclose(costmodel.speedup(0.7, 3, c=0.0, v=1.0), costmodel.tau(0.7, 3))


def test_best_gamma_is_the_brute_force_argmax():
    v = {1: 1.05, 2: 1.1, 3: 1.2, 4: 1.3, 6: 1.6, 8: 2.0}
    for alpha in (0.2, 0.5, 0.8, 0.95):
        for c in (0.02, 0.1, 0.3):
            g, s = costmodel.best_gamma(alpha, c, v)
            brute = max(v, key=lambda k: costmodel.speedup(alpha, k, c, v[k]))
            assert g == brute and math.isclose(s, costmodel.speedup(alpha, g, c, v[g]))
    # a high acceptance rate with a cheap draft wants a long proposal, a low one a short proposal
    assert costmodel.best_gamma(0.95, 0.02, v)[0] > costmodel.best_gamma(0.2, 0.3, v)[0]


def test_best_gamma_ignores_gamma_zero():
    assert costmodel.best_gamma(0.0, 0.5, {0: 1.0, 1: 1.0})[0] == 1


@pytest.mark.parametrize("target_speedup", [0.8, 1.0, 1.5, 2.0])
@pytest.mark.parametrize("gamma", [2, 4, 8])
def test_alpha_for_speedup_inverts_speedup(target_speedup, gamma):
    c, v = 0.1, 1.0 + 0.05 * gamma
    alpha = costmodel.alpha_for_speedup(target_speedup, gamma, c, v)
    if costmodel.speedup(1.0, gamma, c, v) < target_speedup:
        assert alpha is None
        return
    assert alpha is not None and 0 <= alpha <= 1
    assert costmodel.speedup(alpha, gamma, c, v) >= target_speedup - 1e-6
    if alpha > 1e-3:  # the smallest such α: a little less falls short
        assert costmodel.speedup(alpha - 1e-3, gamma, c, v) < target_speedup


def test_alpha_for_speedup_unreachable_is_none():
    assert costmodel.alpha_for_speedup(10.0, 2, c=0.2, v=1.1) is None  # at most 3 / 1.5 = 2


@pytest.mark.parametrize("alpha, gamma", [(0.3, 1), (0.3, 3), (0.7, 4), (0.9, 6)])
def test_alpha_iid_recovers_the_per_token_rate_where_accepted_over_proposed_does_not(alpha, gamma):
    rng = random.Random(1)
    accepted = rounds = full = 0
    for _ in range(20000):
        k = 0
        while k < gamma and rng.random() < alpha:
            k += 1
        accepted, rounds, full = accepted + k, rounds + 1, full + (k == gamma)
    assert costmodel.alpha_iid(accepted, rounds, full) == pytest.approx(alpha, abs=0.01)
    if gamma == 1:
        assert costmodel.alpha_iid(accepted, rounds, full) == pytest.approx(accepted / (gamma * rounds))
    else:  # accepted / proposed counts never-tested drafts as rejected
        assert accepted / (gamma * rounds) < alpha - 0.02


def test_draft_rounds_that_verify_more_tokens_cost_their_own_v():
    """speedup_with_lookup(v_draft=...): a draft round verifying another number of tokens than γ + 1 costs v at
    that size; with no lookup rounds it is the plain model at that v."""
    v = {1: 1.1, 2: 1.15, 3: 1.2, 4: 1.3}
    plain = costmodel.speedup_with_lookup(0.4, 1, 0.08, v, 0.0, 0.9, 4)
    assert plain == pytest.approx(costmodel.speedup(0.4, 1, 0.08, v[1]))
    top3 = costmodel.speedup_with_lookup(0.4, 1, 0.08, v, 0.0, 0.9, 4, v_draft=v[3])
    assert top3 == pytest.approx(costmodel.speedup(0.4, 1, 0.08, v[3])) and top3 < plain
    mixed = costmodel.speedup_with_lookup(0.4, 1, 0.08, v, 0.5, 0.9, 4, v_draft=v[3])
    tokens = 0.5 * costmodel.tau(0.9, 4) + 0.5 * costmodel.tau(0.4, 1)
    assert mixed == pytest.approx(tokens / (0.5 * v[4] + 0.5 * (0.08 + v[3])))


def test_tree_cost_model_and_depth_acceptance():
    """tree_speedup: τ over levels x c + v(N), lookup rounds at their own v; depth_acceptance from the histogram
    of accepted lengths (rounds that accepted exactly k)."""
    assert costmodel.tree_speedup(2.0, 3, 0.1, 1.2) == pytest.approx(2.0 / 1.5)
    assert costmodel.tree_speedup(2.0, 3, 0.1, 1.2, 0.5, 1.1) == pytest.approx(2.0 / (0.55 + 0.75))
    assert costmodel.depth_acceptance([5, 3, 2]) == pytest.approx([0.5, 0.4])
    assert costmodel.depth_acceptance([4]) == []


def test_v_at_interpolates_between_measured_gammas_and_extends_the_last_slope():
    """decode.bench measures v at γ = 1..6 and 8: the speedup-by-γ plot needs γ = 7 too (distill.evaluate.plots)."""
    v = {1: 1.1, 2: 1.16, 6: 1.6, 8: 1.76}
    assert costmodel.v_at(v, 2) == 1.16
    assert costmodel.v_at(v, 7) == pytest.approx(1.68)
    assert costmodel.v_at(v, 4) == pytest.approx(1.16 + 2 * (1.6 - 1.16) / 4)
    assert costmodel.v_at(v, 10) == pytest.approx(1.92)
    assert costmodel.v_at({2: 1.05, 3: 1.3}, 1) == 1.0  # extended below the range, never under one target step
    with pytest.raises(ValueError):
        costmodel.v_at({}, 2)


def test_the_cost_model_at_a_context_bucket_splits_off_the_prompt_forwards():
    """decode.bench.context_cost: t1 from the target alone's decoding steps (prompt forwards left out), d and v a
    round, and the prompt forwards in target steps; the predictions follow from them."""
    from decode.bench.context_cost import bucket_model
    from decode.drafting.stats import Stats

    # the target alone: 2 calls of 21 tokens, each a 1.0 s prompt forward then 20 steps of 0.1 s
    base = Stats(new_tokens=42, generations=2, target_forwards=42, target_seconds=6.0, target_prompt_seconds=2.0)
    # speculative: the same prompts, 10 rounds of 0.12 s verifications and 0.05 s drafting, plus 0.2 s draft prompt
    spec = Stats(new_tokens=42, generations=2, rounds=10, accepted=30, target_forwards=12,
                 target_seconds=2.0 + 1.2, target_prompt_seconds=2.0, draft_seconds=0.4 + 0.5,
                 draft_prompt_seconds=0.4)
    m = bucket_model(spec, base)
    assert (m["target_step_ms"], m["v"], m["draft_per_round"]) == (100.0, 1.2, 0.5)
    assert (m["target_prompt_steps"], m["draft_prompt_steps"]) == (10.0, 2.0)
    assert m["predicted_decode_speedup"] == round(4.0 / 1.7, 4)  # τ = 40 / 10 a round of 1.7 steps
    assert m["predicted_speedup"] == round(30 / (10 + 2 + 20 * 1.7 / 4), 4)
    assert bucket_model(spec, Stats(generations=2, target_forwards=2)) is None  # no decoding step to time
