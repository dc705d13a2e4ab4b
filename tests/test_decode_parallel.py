"""Parallel drafts (decode.drafting.parallel): one draft forward a round proposes the whole chain (or tree) from mask
tokens; greedy output is the target's own on every runner, sampling is distributed as the target's own (chi-square),
the draft's cache never keeps a mask, and a wrong q fails the same test."""

from types import SimpleNamespace

import pytest
import torch

import decode.drafting.speculative as spec
from decode import DecodeOptions, generate
from decode.drafting import parallel
from decode.drafting.parallel import ParallelDraft, mask_token
from decode.drafting.sampling import SamplingParams, logits_to_probs
from decode.runners.fast import FastLlama
from decode.runners.graphs import GraphLlama
from decode.runners.hf import HFRunner
from tests.conftest import ListCache, TableLM
from tests.test_decode_distribution import PROMPT, VOCAB, exact_joint, sample_joint

pytestmark = pytest.mark.usefixtures("torch_single_thread")


class ParallelTable(TableLM):
    """A TableLM over VOCAB + 1 ids whose last id is its mask token: logits at a mask read the mask as context, so
    q_k depends on the context and the masks before it, as a trained parallel draft's does."""

    def __init__(self, seed: int, scale: float = 1.5):
        super().__init__(VOCAB + 1, seed, scale)
        self.config = SimpleNamespace(vocab_size=VOCAB + 1, mask_token_id=VOCAB)
        self.fed: list[list[int]] = []  # each forward's cache before it, then its ids (the mask-rollback test)

    def forward(self, ids, cache, keep, tree=None):
        self.fed.append((list(cache.tokens), list(ids)))
        return super().forward(ids, cache, keep, tree)


class Oracle(HFRunner):
    """A parallel draft that knows the target's greedy continuation of the real context and proposes it, except at
    about 30% of (context length, position) pairs (a fixed hash), where it proposes another token: rounds accept
    0..γ tokens."""

    def __init__(self, target: TableLM, mask: int):
        self.target, self.mask, self.device, self.model = target, mask, torch.device("cpu"), None
        self.config = SimpleNamespace(vocab_size=VOCAB + 1, pard_token=mask)
        self.masks_left_in_cache = 0

    def new_cache(self, max_len):
        return ListCache()

    def forward(self, ids, cache, keep, tree=None):
        self.masks_left_in_cache += self.mask in cache.tokens
        cache.tokens.extend(ids)
        real = [t for t in cache.tokens if t != self.mask]
        out, ctx = [], list(real)
        for k in range(keep):
            best = int(self.target.table[ctx[-2], ctx[-1]].argmax())
            ctx.append(best)
            out.append(best if (len(real) * 7 + k) * 2654435761 % 100 >= 30 else (best + 1) % VOCAB)
        logits = torch.full((keep, VOCAB + 1), -5.0)
        logits[torch.arange(keep), torch.tensor(out)] = 5.0
        return logits


def test_mask_token_is_read_where_vllm_reads_it():
    assert mask_token(SimpleNamespace(mask_token_id=7, pard_token=9)) == 7
    assert mask_token(SimpleNamespace(pard_token=9)) == 9
    assert mask_token(SimpleNamespace(vocab_size=9)) is None and mask_token(SimpleNamespace(mask_token_id=True)) is None


def test_one_forward_a_round_accepts_deep_and_keeps_no_mask(table_lm):
    target = table_lm(VOCAB, seed=0)
    draft = Oracle(target, mask=VOCAB)
    want, _ = generate(target, None, PROMPT, 40)
    out, st = generate(target, draft, PROMPT, 40, DecodeOptions(gamma=4, schedule="constant"))
    assert out == want
    assert st.draft_forwards <= st.rounds + 1  # prefill + one forward a round, whatever γ
    assert max(i for i, c in enumerate(st.accept_histogram) if c) >= 3 and st.accept_histogram[0] > 0
    assert draft.masks_left_in_cache == 0


@pytest.mark.parametrize("form", ["appended", "reserved"])
@pytest.mark.parametrize("runner", ["fast", "fast-int8", "hf", "graph"])
def test_greedy_output_is_the_targets_on_every_runner(runner, form, tiny_llama, noisy_copy):
    """A tiny llama draft with its mask appended (id V of V + 1) or reserved (an id of the target's vocabulary)."""
    kw = dict(layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2)
    for seed in range(2):
        target = tiny_llama(seed, **kw)
        draft = noisy_copy(target, seed, scale=0.01)
        if form == "appended":
            draft.resize_token_embeddings(target.config.vocab_size + 1, mean_resizing=False)
            draft.config.mask_token_id = target.config.vocab_size
        else:
            draft.config.pard_token = target.config.vocab_size - 1
        options = DecodeOptions(gamma=3, draft_weights="int8" if runner == "fast-int8" else "float32", schedule="constant")
        t, d = {"hf": (HFRunner(target), HFRunner(draft)),
                "graph": (GraphLlama(target, graphs=False), GraphLlama(draft, graphs=False))}.get(runner, (target, draft))
        prompt = [1 + seed, 7, 11, 5]
        want, _ = generate(FastLlama(tiny_llama(seed, **kw)), None, prompt, 24)
        for opts in (options, DecodeOptions(gamma=3, tree_nodes=4, schedule="constant"), DecodeOptions(gamma=2, lookup=1, schedule="constant")):
            out, st = generate(t, d, prompt, 24, opts)
            assert out == want, (runner, form, seed, opts)
            assert st.accepted > 0 and st.draft_forwards <= st.rounds + 1


def test_the_gpu_path_drafts_on_the_device(tiny_llama, noisy_copy, monkeypatch):
    """GraphLlama (eager here): the parallel chain's argmax stays on the device until the verification's one read."""
    read_once = []
    real = spec.verify_on_device
    monkeypatch.setattr(spec, "verify_on_device", lambda *a: read_once.append(1) or real(*a))
    kw = dict(layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2)
    target = tiny_llama(4, **kw)
    draft = noisy_copy(target, 4, scale=0.01)
    draft.config.mask_token_id = target.config.vocab_size - 1
    want, _ = generate(FastLlama(tiny_llama(4, **kw)), None, [3, 4, 5], 20)
    out, st = generate(GraphLlama(target, graphs=False), GraphLlama(draft, graphs=False), [3, 4, 5], 20,
                       DecodeOptions(gamma=4, schedule="constant"))
    assert out == want and len(read_once) == st.rounds


def test_a_tree_from_one_forward(table_lm, monkeypatch):
    """Tree rounds: every level's children come from the one forward's per-position logits (no other forward);
    greedy output is the target's, and some rounds accept a path through a second-ranked child."""
    target = table_lm(VOCAB, seed=0)
    draft = ParallelTable(seed=1)
    seen = []
    real = spec.walk_greedy

    def walk(tree, best):
        path, nxt = real(tree, best)
        seen.append(any(tree.children(tree.parents[i])[0] != i for i in path))
        return path, nxt

    monkeypatch.setattr(spec, "walk_greedy", walk)
    want, _ = generate(target, None, PROMPT, 30)
    out, st = generate(target, draft, PROMPT, 30, DecodeOptions(gamma=3, tree_nodes=6, schedule="constant"))
    assert out == want and any(seen)
    # prefill + one forward a tree round (a last round with no room left drafts nothing)
    assert st.draft_forwards == st.tree_levels + 1 <= st.rounds + 1 and st.tree_nodes > 3 * st.tree_rounds
    out, st = generate(target, Oracle(target, mask=VOCAB), PROMPT, 30, DecodeOptions(gamma=4, tree_nodes=6, schedule="constant"))
    assert out == want and max(i for i, c in enumerate(st.accept_histogram) if c) >= 3


def test_the_cache_holds_real_tokens_only(table_lm):
    target, draft = table_lm(VOCAB, seed=0), ParallelTable(seed=1)
    generate(target, draft, PROMPT, 20, DecodeOptions(gamma=4, schedule="constant"))
    assert len(draft.fed) > 3
    for before, ids in draft.fed:
        assert VOCAB not in before  # the masks of the round before were cropped
        assert VOCAB not in ids[:ids.index(VOCAB)] if VOCAB in ids else True  # masks only after the real tokens


@pytest.mark.parametrize("sampling, kw", [
    (SamplingParams(temperature=1.0), {}),
    (SamplingParams(temperature=0.8, top_k=5, top_p=0.9), {}),
    (SamplingParams(temperature=1.0), {"schedule": "dynamic"}),
    (SamplingParams(temperature=1.0), {"tree_nodes": 4}),
], ids=["t1", "topk-topp", "dynamic", "tree4"])
def test_parallel_sampling_matches_target_distribution(table_lm, sampling, kw, chi2_test):
    target = table_lm(VOCAB, seed=0)
    counts = sample_joint(target, ParallelTable(seed=1), sampling, 4000, seed=11, **kw)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat < threshold, (stat, threshold)


def test_a_wrong_q_fails_the_chi_square_test(table_lm, monkeypatch, chi2_test):
    """Draw d_k from q_k but hand the acceptance rule the positions' q in reverse order (q_g for d_1, ...): the rule
    then corrects the wrong distribution, and the test must see it."""
    target = table_lm(VOCAB, seed=0)
    sampling = SamplingParams(temperature=1.0)
    real = ParallelDraft.propose

    def q_reversed(self, ctx, g, room):
        p = real(self, ctx, g, room)
        if p.q is not None:
            p.q = p.q.flip(0)
        return p

    monkeypatch.setattr(ParallelDraft, "propose", q_reversed)
    counts = sample_joint(target, ParallelTable(seed=1), sampling, 3000, seed=11)
    stat, threshold = chi2_test(counts, exact_joint(target, sampling))
    assert stat > 2 * threshold, (stat, threshold)


def test_block_logits_never_propose_the_mask():
    from decode.models.draft_folder import VocabMap

    z = torch.zeros(2, 6)
    z[:, 5] = 9.0  # the mask's logit highest
    assert block_shape(parallel.block_logits(z, 5, VocabMap(None, 5))) == (2, 5)  # appended past the vocabulary
    kept = parallel.block_logits(z, 2, VocabMap([0, 1, 3, 4, 6, 7], 8))  # reduced: the mask's column is -inf
    assert kept.shape == (2, 6) and kept[:, 2].isinf().all() and logits_to_probs(kept, SamplingParams(1.0))[:, 2].eq(0).all()


def block_shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)
