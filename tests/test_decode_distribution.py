"""Speculative *sampling* is lossless in distribution: its output is distributed as the target's own sampling.

The target and draft are small language models whose next-token distributions can be enumerated exactly over
a tiny vocabulary. A few thousand generate() samples (fixed seeds, so the test is deterministic) are compared with
a chi-square test to the exact joint distribution of the first tokens, computed from the target's logits alone.
Two deliberately broken samplers must fail the same test, so a pass means something.
"""

import pytest
import torch

import decode.drafting.speculative as spec
from decode import DecodeOptions, SamplingParams, generate
from decode.drafting.sampling import logits_to_probs, sample

pytestmark = pytest.mark.usefixtures("torch_single_thread")

VOCAB = 8
PROMPT = [1, 2]
N_TOKENS = 3  # the joint of the first 3 new tokens: 512 cells
# round 1 proposes min(γ, MAX_NEW - 2) = 2 drafts, so corrections and bonuses both occur among the first 3 tokens
MAX_NEW = 4


def exact_joint(target, sampling: SamplingParams, n_tokens: int = N_TOKENS) -> torch.Tensor:
    """P(t1..tn | prompt) under the target's own sampling, by enumeration: tensor (V,)*n."""
    joint = torch.zeros((VOCAB,) * n_tokens, dtype=torch.float64)

    def probs(prefix):
        cache = target.new_cache(16)
        return logits_to_probs(target.forward(PROMPT + list(prefix), cache, 1)[-1], sampling).double()

    level = {(): 1.0}
    for _ in range(n_tokens):
        nxt = {}
        for prefix, pr in level.items():
            p = probs(prefix)
            for t in range(VOCAB):
                if p[t] > 0:
                    nxt[prefix + (t,)] = pr * float(p[t])
        level = nxt
    for prefix, pr in level.items():
        joint[prefix] = pr
    return joint


def sample_joint(target, draft, sampling, n_samples: int, seed: int, gamma: int = 3, vocab_map=None,
                 **kw) -> torch.Tensor:
    counts = torch.zeros((VOCAB,) * N_TOKENS)
    g = torch.Generator().manual_seed(seed)
    options = DecodeOptions(gamma=gamma, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                            **{"schedule": "constant", **kw})
    for _ in range(n_samples):
        out, _ = generate(target, draft, PROMPT, MAX_NEW, options, vocab_map=vocab_map, generator=g)
        counts[tuple(out[:N_TOKENS])] += 1
    return counts


@pytest.fixture(scope="module")
def pair(table_lm):
    # scale 1.5 over 8 tokens: moderately peaked, and target and draft disagree a lot (acceptance ~ 0.5)
    return table_lm(VOCAB, seed=0), table_lm(VOCAB, seed=1)


@pytest.mark.parametrize(
    "sampling, schedule",
    [
        (SamplingParams(temperature=1.0), "constant"),
        (SamplingParams(temperature=0.8, top_k=5, top_p=0.9), "constant"),
        (SamplingParams(temperature=1.0), "dynamic"),
        (SamplingParams(temperature=1.3), "heuristic"),
        (SamplingParams(temperature=1.0), "adaptive"),
    ],
    ids=["t1", "topk-topp", "dynamic", "heuristic", "adaptive"],
)
def test_speculative_sampling_matches_target_distribution(pair, sampling, schedule, chi2_test):
    target, draft = pair
    want = exact_joint(target, sampling)
    counts = sample_joint(target, draft, sampling, 4000, seed=1, schedule=schedule)
    stat, threshold = chi2_test(counts, want)
    assert stat < threshold, (stat, threshold)
    # each marginal as well (a sharper test of a single position)
    for dim in range(N_TOKENS):
        others = tuple(d for d in range(N_TOKENS) if d != dim)
        stat, threshold = chi2_test(counts.sum(others), want.sum(others))
        assert stat < threshold, (dim, stat, threshold)


@pytest.mark.parametrize("sampling, nodes", [(SamplingParams(temperature=1.0), 4),
                                             (SamplingParams(temperature=0.8, top_k=5, top_p=0.9), 6)],
                         ids=["t1-tree4", "topk-topp-tree6"])
def test_token_tree_sampling_matches_target_distribution(pair, sampling, nodes, chi2_test):
    """Trees drawn without replacement, verified by recursive rejection sampling (decode.drafting.tree.walk_sampled)."""
    target, draft = pair
    counts = sample_joint(target, draft, sampling, 4000, seed=6, tree_nodes=nodes)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


def test_tiny_llama_tree_sampling_matches_target_distribution(tiny_llama, chi2_test):
    """The same through tiny llama models on FastLlama: tree masks and the caches' keep() included."""
    target = spec.runner_for(tiny_llama(0, vocab=VOCAB, layers=1, hidden=16, init=0.8))
    draft = spec.runner_for(tiny_llama(1, vocab=VOCAB, layers=1, hidden=16, init=0.8))
    sampling = SamplingParams(temperature=1.0)
    counts = sample_joint(target, draft, sampling, 1000, seed=7, tree_nodes=4)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


def _tree_without_residual(tree, p, generator=None):
    """Right acceptance test per child, wrong rejection: p is not replaced by norm(max(p - q, 0))."""
    u, path = -1, []
    while True:
        for c in tree.children(u):
            x = tree.tokens[c]
            if torch.rand((), generator=generator) < p[u + 1][x] / tree.q[u][x]:
                path.append(c)
                u = c
                break
        else:
            return path, sample(p[u + 1], generator)


def test_a_broken_tree_rule_fails_the_chi_square_test(pair, monkeypatch, chi2_test):
    target, draft = pair
    sampling = SamplingParams(temperature=1.0)
    monkeypatch.setattr(spec, "walk_sampled", _tree_without_residual)
    counts = sample_joint(target, draft, sampling, 3000, seed=6, tree_nodes=4)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat > 2 * threshold, (stat, threshold)


def test_target_alone_sampling_matches_exact_distribution(pair, chi2_test):
    """The reference itself: generate(draft=None) samples the enumerated distribution."""
    target, _ = pair
    sampling = SamplingParams(temperature=1.0)
    counts = sample_joint(target, None, sampling, 3000, seed=2)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


@pytest.mark.parametrize("with_draft", [True, False], ids=["draft+lookup", "lookup-only"])
def test_lookup_sampling_matches_target_distribution(pair, with_draft, chi2_test):
    """Context lookup proposals (one-hot q) under rejection sampling: still the target's distribution.
    Over 8 tokens the context [1, 2, ...] repeats a token often, so lookup rounds are frequent."""
    target, draft = pair
    sampling = SamplingParams(temperature=1.0)
    counts = sample_joint(target, draft if with_draft else None, sampling, 4000, seed=5, lookup=1, lookup_tokens=3)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


def test_reduced_vocabulary_draft_sampling_matches_target_distribution(table_lm, chi2_test):
    """A draft over 5 of the 8 tokens (vocab_map): q is zero elsewhere, the residual supplies those tokens."""
    target = table_lm(VOCAB, seed=0)
    draft = table_lm(5, seed=3)
    vocab_map = torch.tensor([0, 2, 3, 5, 6])
    sampling = SamplingParams(temperature=1.0)
    counts = sample_joint(target, draft, sampling, 4000, seed=3, vocab_map=vocab_map)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


def test_tiny_llama_sampling_matches_target_distribution(tiny_llama, chi2_test):
    """The same through real (tiny) llama models on FastLlama: KV-cache rollback included."""
    target = tiny_llama(0, vocab=VOCAB, layers=1, hidden=16, init=0.8)
    draft = tiny_llama(1, vocab=VOCAB, layers=1, hidden=16, init=0.8)
    sampling = SamplingParams(temperature=1.0)
    counts = sample_joint(spec.runner_for(target), spec.runner_for(draft), sampling, 1000, seed=4)
    want = exact_joint(spec.runner_for(target), sampling)
    stat, threshold = chi2_test(counts, want)
    assert stat < threshold, (stat, threshold)


# --- the test must catch broken samplers


def _always_accept(proposals, q, p, generator=None):
    return len(proposals), sample(p[len(proposals)], generator)


def _resample_from_p(proposals, q, p, generator=None):
    """Right acceptance rule, wrong correction: draws from p instead of norm(max(p - q, 0))."""
    for n, d in enumerate(proposals):
        if torch.rand((), generator=generator) >= p[n, d] / q[n, d]:
            return n, sample(p[n], generator)
    return len(proposals), sample(p[len(proposals)], generator)


@pytest.mark.parametrize(
    "broken", [_always_accept, _resample_from_p], ids=["always-accept", "resample-from-p"]
)
def test_broken_sampler_fails_the_chi_square_test(pair, broken, monkeypatch, chi2_test):
    target, draft = pair
    sampling = SamplingParams(temperature=1.0)
    want = exact_joint(target, sampling)
    monkeypatch.setattr(spec, "accept_sampled", broken)
    counts = sample_joint(target, draft, sampling, 3000, seed=1)
    stat, threshold = chi2_test(counts, want)
    assert stat > 2 * threshold, (stat, threshold)


def test_exact_joint_is_a_distribution(pair):
    target, _ = pair
    joint = exact_joint(target, SamplingParams(temperature=0.8, top_k=5, top_p=0.9))
    assert abs(float(joint.sum()) - 1) < 1e-6
    # top_k=5 leaves at most 5 tokens at every position
    assert int((joint.sum((1, 2)) > 0).sum()) <= 5
