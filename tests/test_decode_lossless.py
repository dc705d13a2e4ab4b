"""Lossless greedy decoding: speculative output == target alone == transformers' generate(), token for token.

Tiny random llama pairs, many seeds, every γ and schedule, through both runners (FastLlama and HFRunner), with
drafts that never agree (an unrelated random model), agree partly (a noisy copy: rollbacks after partial
acceptance), always agree (the target itself), and with a reduced vocabulary.
"""

import pytest
import torch

from decode import DecodeOptions, generate
from decode.runners.choice import runner_for
from decode.runners.fast import FastLlama
from decode.runners.hf import HFRunner

pytestmark = pytest.mark.usefixtures("torch_single_thread")

GAMMAS = (1, 2, 3, 5, 8)
SCHEDULES = ("constant", "heuristic", "dynamic")
SEEDS = range(10)
N_NEW = 16


def _prompt(seed: int, vocab: int = 97) -> list[int]:
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, vocab, (3 + seed % 5,), generator=g).tolist()


def _wrap(model, runner: str):
    return HFRunner(model) if runner == "hf" else runner_for(model)


@pytest.fixture(scope="module")
def random_pairs(tiny_llama):
    """Per seed: target, an unrelated (deeper) random draft, a prompt, and the target-alone greedy output."""
    cases = []
    for seed in SEEDS:
        target, draft = tiny_llama(seed), tiny_llama(seed + 100, layers=3)
        prompt = _prompt(seed)
        cases.append((target, draft, prompt, generate(target, None, prompt, N_NEW)[0]))
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_target_alone_equals_hf_generate(seed, random_pairs, hf_greedy):
    target, _, prompt, want = random_pairs[seed]
    assert want == hf_greedy(target, prompt, N_NEW)
    for runner in ("fast", "hf"):
        out, stats = generate(_wrap(target, runner), None, prompt, N_NEW)
        assert out == want, runner
        assert stats.proposed == 0 and stats.rounds == N_NEW - 1 and stats.target_forwards == N_NEW


@pytest.mark.parametrize("runner", ["fast", "hf"])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_greedy_speculative_equals_target_alone_random_draft(gamma, schedule, runner, random_pairs):
    """Speculative == target alone (== HF generate, checked per seed above). HFRunner is slower: half the seeds."""
    for seed in SEEDS[:: 2 if runner == "hf" else 1]:
        target, draft, prompt, want = random_pairs[seed]
        out, stats = generate(_wrap(target, runner), _wrap(draft, runner), prompt, N_NEW, DecodeOptions(gamma=gamma, schedule=schedule))
        assert out == want, f"seed {seed}"
        assert stats.new_tokens == N_NEW and stats.target_forwards == stats.rounds + 1
        assert stats.proposed == stats.draft_forwards - 1  # + the draft's prefill
        assert sum(stats.accept_histogram) == stats.rounds


@pytest.mark.parametrize("runner", ["fast", "hf"])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_greedy_lossless_with_partial_acceptance(gamma, schedule, runner, tiny_llama, noisy_copy):
    """A noisy copy of the target agrees for a while and then not: every round rolls back a different amount."""
    partial = accepted = proposed = 0
    for seed in range(6):
        target = tiny_llama(seed)
        draft = noisy_copy(target, seed)
        prompt = _prompt(seed)
        want, _ = generate(target, None, prompt, 24)
        out, stats = generate(_wrap(target, runner), _wrap(draft, runner), prompt, 24, DecodeOptions(gamma=gamma, schedule=schedule))
        assert out == want, f"seed {seed}"
        partial += sum(stats.accept_histogram[1:gamma])  # rounds that accepted some but not all of γ
        accepted, proposed = accepted + stats.accepted, proposed + stats.proposed
    assert 0 < accepted < proposed, "the noisy draft agreed always or never; the test lost its point"
    if gamma > 1:
        assert partial > 0, "no round accepted partly; the test lost its point"


def test_mixed_runners_lossless(tiny_llama, noisy_copy):
    """Target on FastLlama with the draft on HFRunner, and the other way round."""
    target = tiny_llama(3)
    draft = noisy_copy(target, 3)
    prompt = _prompt(3)
    want, _ = generate(target, None, prompt, 20)
    assert generate(FastLlama(target), HFRunner(draft), prompt, 20, DecodeOptions(gamma=4, schedule="constant"))[0] == want
    assert generate(HFRunner(target), FastLlama(draft), prompt, 20, DecodeOptions(gamma=4, schedule="constant"))[0] == want


def test_gpt2_target_lossless_through_hf_runner(hf_greedy):
    """A non-llama model takes the generic HFRunner path (DynamicCache crop)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    def gpt2(seed):
        torch.manual_seed(seed)
        cfg = GPT2Config(
            vocab_size=97,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=128,
            initializer_range=0.5,
            bos_token_id=None,
            eos_token_id=None,
        )
        return GPT2LMHeadModel(cfg).eval()

    target, draft = gpt2(0), gpt2(1)
    prompt = [5, 6, 7]
    want = hf_greedy(target, prompt, 20)
    for gamma in (1, 3, 5):
        out, _ = generate(target, draft, prompt, 20, DecodeOptions(gamma=gamma, schedule="constant"))
        assert out == want
    out, _ = generate(target, target, prompt, 20, DecodeOptions(gamma=3, schedule="constant"))  # full acceptance: the DynamicCache is never cropped
    assert out == want


@pytest.mark.parametrize("runner", ["fast", "hf"])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_draft_equal_to_target_accepts_everything(gamma, runner, tiny_llama):
    """draft == target: α = 1 and τ = γ + 1 exactly (max_new_tokens = 1 + k(γ+1): no round is truncated)."""
    k = 4
    n_new = 1 + k * (gamma + 1)
    for seed in range(3):
        target = tiny_llama(seed)
        prompt = _prompt(seed)
        want, _ = generate(target, None, prompt, n_new)
        out, stats = generate(
            _wrap(target, runner), _wrap(target, runner), prompt, n_new, DecodeOptions(gamma=gamma, schedule="constant"), eos_token_ids=()
        )
        assert out == want
        assert stats.acceptance_rate == 1.0
        assert stats.tau == gamma + 1
        assert stats.rounds == k and stats.proposed == k * gamma == stats.accepted
        assert stats.accept_histogram == [0] * gamma + [k]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("gamma", (1, 3, 8))
def test_reduced_vocabulary_draft_is_lossless(gamma, schedule, tiny_llama, noisy_copy):
    """A draft over N < V tokens plus vocab_map (draft id -> target id): proposals are mapped, output is exact."""
    n_draft = 40
    for seed in range(4):
        target = tiny_llama(seed)
        prompt = _prompt(seed)
        want, _ = generate(target, None, prompt, N_NEW)
        g = torch.Generator().manual_seed(seed)
        # the tokens the target actually emits plus random others, so some proposals can be accepted
        ids = list(dict.fromkeys(want + torch.randperm(97, generator=g).tolist()))[:n_draft]
        vocab_map = torch.tensor(sorted(ids), dtype=torch.long)
        assert len(vocab_map) == n_draft
        # the draft: the target's own weights restricted to the kept rows of the embedding and head
        draft = tiny_llama(seed, vocab=n_draft)
        draft.load_state_dict(
            {k: (v[vocab_map] if v.shape[:1] == (97,) else v) for k, v in target.state_dict().items()}
        )
        out, stats = generate(target, draft, prompt, N_NEW, DecodeOptions(gamma=gamma, schedule=schedule), vocab_map=vocab_map)
        assert out == want, f"seed {seed}"
        assert all(0 <= t < 97 for t in out)
        # the same through an unrelated reduced-vocabulary draft
        other = tiny_llama(seed + 50, vocab=n_draft)
        out, _ = generate(target, other, prompt, N_NEW, DecodeOptions(gamma=gamma, schedule=schedule), vocab_map=vocab_map)
        assert out == want


def test_reduced_vocabulary_draft_gets_accepted(tiny_llama):
    """With the target's own weights restricted to a vocabulary containing its output, every proposal passes."""
    target = tiny_llama(7)
    prompt = _prompt(7)
    want, _ = generate(target, None, prompt, 13)
    ids = sorted(set(want) | set(prompt) | set(range(30)))
    vocab_map = torch.tensor(ids)
    draft = tiny_llama(7, vocab=len(ids))
    draft.load_state_dict(
        {k: (v[vocab_map] if v.shape[:1] == (97,) else v) for k, v in target.state_dict().items()}
    )
    # restricting the head to a subset keeps the argmax whenever the argmax is in the subset
    out, stats = generate(target, draft, prompt, 13, DecodeOptions(gamma=3, schedule="constant"), vocab_map=vocab_map)
    assert out == want
    assert stats.acceptance_rate == 1.0


@pytest.mark.parametrize("sliding_window", [64, 16], ids=["sequence-within-window", "sequence-beyond-window"])
def test_sliding_window_model_is_lossless(sliding_window, hf_greedy):
    """Mistral-type models carry `sliding_window` (Mistral-7B-v0.1: 4096). 40 tokens fit a 64-token window, yet
    FastLlama.new_cache refuses because the decoder sizes its cache with 4γ+2 spare positions; and beyond the
    window neither runner works (HF's sliding-window cache cannot be cropped)."""
    from transformers import MistralConfig, MistralForCausalLM

    def mistral(seed):
        torch.manual_seed(seed)
        cfg = MistralConfig(
            vocab_size=97,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=sliding_window,
            initializer_range=0.5,
            bos_token_id=None,
            eos_token_id=None,
        )
        return MistralForCausalLM(cfg).eval()

    target, draft = mistral(0), mistral(1)
    prompt = list(range(3, 23))
    want = hf_greedy(target, prompt, 20)
    for gamma in (4, 8):
        out, _ = generate(target, draft, prompt, 20, DecodeOptions(gamma=gamma, schedule="constant"))
        assert out == want, f"gamma {gamma}"


@pytest.mark.parametrize("weights", ["float16", "int8"])
def test_rounded_draft_weights_stay_lossless(tiny_llama, noisy_copy, weights):
    """A float16- or int8-weight draft (decode.runners.smallgemm) changes only acceptance, never the output."""
    accepted = 0
    for seed in range(4):
        target = tiny_llama(seed)
        draft = noisy_copy(target, seed)
        prompt = _prompt(seed)
        want, _ = generate(target, None, prompt, 24)
        for gamma in (1, 3):
            out, stats = generate(target, draft, prompt, 24, DecodeOptions(gamma=gamma, draft_weights=weights, schedule="constant"))
            assert out == want
            accepted += stats.accepted
    assert accepted > 0  # the rounded draft still proposes tokens the target takes


def test_unknown_draft_weights_refused(tiny_llama):
    from decode.errors import UserError

    target = tiny_llama(0)
    with pytest.raises(UserError, match="draft_weights must be one of float32, float16, int8"):
        generate(target, target, _prompt(0), 4, DecodeOptions(gamma=2, draft_weights="int4", schedule="constant"))
