"""accept_greedy / accept_sampled on hand-built distributions, Stats arithmetic, the schedules, logits_to_probs."""

import pytest
import torch

from decode import SamplingParams, Stats, accept, accept_greedy, accept_sampled
from decode.drafting.sampling import logits_to_probs
from decode.drafting.speculative import Schedule
from decode.errors import UserError

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# --- greedy: exact match with the target's argmax


def _onehot_logits(rows: list[int], vocab: int = 6) -> torch.Tensor:
    logits = torch.zeros(len(rows), vocab)
    logits[torch.arange(len(rows)), torch.tensor(rows)] = 5.0
    return logits


@pytest.mark.parametrize(
    "proposals, argmax, want",
    [
        ([], [4], (0, 4)),  # no proposals: the target's own next token
        ([1, 2, 3], [1, 2, 3, 5], (3, 5)),  # all accepted + bonus from the last row
        ([1, 2, 3], [1, 0, 3, 5], (1, 0)),  # first mismatch at 1: correction = the target's argmax there
        ([1, 2, 3], [0, 2, 3, 5], (0, 0)),  # rejected at once
        ([1, 2, 3], [1, 2, 4, 5], (2, 4)),  # a later match after a mismatch does not count
    ],
)
def test_accept_greedy(proposals, argmax, want):
    assert accept_greedy(proposals, _onehot_logits(argmax)) == want
    assert accept(proposals, _onehot_logits(argmax), SamplingParams()) == want


def test_accept_greedy_later_match_after_mismatch_is_not_accepted():
    assert accept_greedy([1, 0, 3], _onehot_logits([1, 2, 3, 5])) == (1, 2)


# --- sampled: min(1, p/q), residual norm(max(p - q, 0)), bonus from p_g


def _dist(*xs) -> torch.Tensor:
    t = torch.tensor(xs, dtype=torch.float32)
    return t / t.sum()


def test_q_equal_p_always_accepts_and_bonus_is_drawn_from_last_row():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 6, generator=g), -1)
    q = p[:3].clone()
    bonus = torch.zeros(6)
    for _ in range(4000):
        proposals = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(3)]
        n, nxt = accept_sampled(proposals, q, p, g)
        assert n == 3
        bonus[nxt] += 1
    assert torch.allclose(bonus / bonus.sum(), p[3], atol=0.03)


def test_zero_target_mass_on_draft_token_always_rejects_and_never_resamples_it():
    g = torch.Generator().manual_seed(1)
    p = torch.stack([_dist(0.5, 0.3, 0.2, 0.0), _dist(1, 1, 1, 1)])
    q = _dist(0.1, 0.1, 0.1, 0.7)[None]
    seen = set()
    for _ in range(3000):
        n, nxt = accept_sampled([3], q, p, g)
        assert n == 0 and nxt != 3
        seen.add(nxt)
    assert seen == {0, 1, 2}


def test_correction_is_drawn_from_the_normalised_residual():
    """p/q = 0.5 at the draft token: rejected half the time, then drawn from norm(max(p - q, 0)) = (0.8, 0, 0.2, 0)."""
    g = torch.Generator().manual_seed(2)
    p = torch.stack([_dist(0.5, 0.3, 0.2, 0.0), _dist(1, 1, 1, 1)])
    q = _dist(0.1, 0.6, 0.1, 0.2)[None]
    n_draws, rejected, correction = 10000, 0, torch.zeros(4)
    for _ in range(n_draws):
        n, nxt = accept_sampled([1], q, p, g)
        if n == 0:
            rejected += 1
            correction[nxt] += 1
    assert abs(rejected / n_draws - 0.5) < 0.02
    assert correction[1] == 0 and correction[3] == 0
    assert abs(correction[0] / rejected - 0.8) < 0.02


def test_draft_then_accept_reproduces_the_target_distribution():
    """The theorem itself: d ~ q, then accept/correct, gives exactly p (checked per token with 16k draws)."""
    g = torch.Generator().manual_seed(3)
    p = torch.stack([_dist(0.05, 0.4, 0.3, 0.05, 0.2), _dist(1, 1, 1, 1, 1)])
    q = _dist(0.4, 0.1, 0.3, 0.15, 0.05)[None]
    counts = torch.zeros(5)
    n_draws = 16000
    d = torch.multinomial(q[0], n_draws, replacement=True, generator=g).tolist()
    for di in d:
        n, nxt = accept_sampled([di], q, p, g)
        counts[di if n == 1 else nxt] += 1
    assert torch.allclose(counts / n_draws, p[0], atol=0.015), (counts / n_draws, p[0])


def test_draft_probability_above_target_accepts_with_ratio():
    """Acceptance probability at a token is min(1, p/q): p/q = 2 -> always; p/q = 0.25 -> a quarter of the time."""
    g = torch.Generator().manual_seed(4)
    p = torch.stack([_dist(0.4, 0.6), _dist(0.1, 0.9), _dist(1, 1)])
    q = torch.stack([_dist(0.2, 0.8), _dist(0.4, 0.6)])
    hist = [0, 0, 0]
    for _ in range(8000):
        n, _ = accept_sampled([0, 0], q, p, g)
        hist[n] += 1
    assert hist[0] == 0  # p/q = 2 at row 0
    assert abs(hist[2] / 8000 - 0.25) < 0.02  # p/q = 0.25 at row 1


def test_accept_applies_sampling_params_to_target_logits():
    """accept() turns target logits into p with the same temperature/top-k as the draft's q."""
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    q = torch.tensor([[0.0, 0.0, 1.0, 0.0]])  # the draft is certain of token 2, which top_k=2 removes from p
    g = torch.Generator().manual_seed(5)
    for _ in range(200):
        n, nxt = accept([2], logits, SamplingParams(temperature=1.0, top_k=2), q, g)
        assert n == 0 and nxt in (0, 1)


# --- sampling transforms


def test_logits_to_probs_top_k_top_p_temperature():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.allclose(logits_to_probs(logits, SamplingParams(1.0)), torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.allclose(
        logits_to_probs(logits, SamplingParams(1.0, top_k=2)), torch.tensor([2 / 3, 1 / 3, 0, 0])
    )
    # top_p keeps the smallest prefix whose mass reaches p: 0.5 + 0.25 >= 0.7
    assert torch.allclose(
        logits_to_probs(logits, SamplingParams(1.0, top_p=0.7)), torch.tensor([2 / 3, 1 / 3, 0, 0])
    )
    assert torch.allclose(
        logits_to_probs(logits, SamplingParams(1.0, top_p=0.1)), torch.tensor([1.0, 0, 0, 0])
    )
    cold = logits_to_probs(logits, SamplingParams(0.5))
    assert torch.allclose(cold, torch.softmax(logits * 2, -1))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(temperature=-0.1), "temperature must be >= 0"),
        (dict(top_k=-1), "top_k must be >= 0"),
        (dict(top_p=0.0), "top_p must be in (0, 1]"),
        (dict(top_p=1.5), "top_p must be in (0, 1]"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, words):
    with pytest.raises(UserError) as e:
        SamplingParams(**kwargs)
    assert words in str(e.value)


# --- Stats and schedules


def test_stats_metrics_and_merge():
    a = Stats(
        new_tokens=9, rounds=3, proposed=9, accepted=6, target_forwards=4, accept_histogram=[0, 1, 1, 1]
    )
    assert a.acceptance_rate == 6 / 9
    assert a.tau == (6 + 3) / 3
    b = Stats(new_tokens=2, rounds=2, proposed=4, accepted=0, target_forwards=3, accept_histogram=[2])
    a += b
    assert (a.new_tokens, a.rounds, a.proposed, a.accepted, a.target_forwards) == (11, 5, 13, 6, 7)
    assert a.accept_histogram == [2, 1, 1, 1]
    c = Stats(accept_histogram=[1])
    c += a
    assert c.accept_histogram == [3, 1, 1, 1]
    d = a.as_dict()
    assert d["acceptance_rate"] == round(6 / 13, 4) and d["tau"] == round(11 / 5, 4)
    assert Stats().tau == 0.0 and Stats().acceptance_rate == 0.0


def test_heuristic_schedule_grows_on_full_accept_and_shrinks_otherwise():
    s = Schedule("heuristic", 2)
    s.update(2, 2)
    assert s.gamma == 4
    s.update(4, 4)
    s.update(6, 6)
    s.update(8, 8)
    assert s.gamma == 8 == s.max_gamma  # capped at 4γ
    s.update(8, 3)
    assert s.gamma == 7
    for _ in range(10):
        s.update(s.gamma, 0)
    assert s.gamma == 1
    c = Schedule("constant", 3)
    c.update(3, 3)
    c.update(3, 0)
    assert c.gamma == 3 and c.confidence == 0.0
    assert Schedule("dynamic", 3).confidence > 0


def test_unknown_schedule_is_a_user_error():
    with pytest.raises(UserError, match="unknown schedule 'fast'.*constant, heuristic, dynamic"):
        Schedule("fast", 3)
