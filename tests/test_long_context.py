"""The decoder at long contexts (issue 53): greedy speculative output at a ~6,000-token prompt is the target's own
(transformers' generate) on every runner: FastLlama with the CPU kernels (rows_attention's key chunks), HFRunner,
and GraphLlama's static body run eagerly (attention over a live width, not the whole buffer). A tiny random llama:
the prompt is long, the model is not, so each case takes seconds."""

import copy

import pytest
import torch

from decode import DecodeOptions, generate
from decode.runners import smallgemm
from decode.runners.fast import FastLlama
from decode.runners.graphs import GraphLlama
from decode.runners.hf import HFRunner

PROMPT, N_NEW = 6000, 24
KW = dict(layers=2, hidden=64, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192)


@pytest.fixture(scope="module")
def case(tiny_llama, noisy_copy, hf_greedy):
    """(target, a noisy copy as draft: some proposals rejected, prompt, transformers' greedy output)."""
    target = tiny_llama(21, **KW)
    prompt = torch.randint(0, 97, (PROMPT,), generator=torch.Generator().manual_seed(21)).tolist()
    return target, noisy_copy(target, 5, scale=0.05), prompt, hf_greedy(target, prompt, N_NEW)


@pytest.mark.parametrize("runner", ["fast", "hf", "graph"])
def test_greedy_at_a_6k_token_prompt_is_the_targets_own(case, runner):
    target, draft, prompt, want = case
    if runner == "fast":
        wrapped = FastLlama(target)
        assert wrapped.rows_attention is not None or smallgemm.kernel() is None  # the kernels where they build
    else:
        wrapped = HFRunner(target) if runner == "hf" else GraphLlama(copy.deepcopy(target), graphs=False)
    alone, _ = generate(wrapped, None, prompt, N_NEW)
    # the draft reads the whole prompt (its attention at 6,000 keys too): a random model's next token hangs on all of it
    out, stats = generate(wrapped, draft, prompt, N_NEW, DecodeOptions(gamma=3, schedule="constant", draft_context=8192))
    assert alone == out == want, runner
    assert 0 < stats.accepted < stats.proposed  # rollbacks at a long context, not only full accepts


def test_a_draft_reading_the_prompts_last_window_leaves_the_output_unchanged(case):
    """--draft-context 512: the draft's prompt forward reads the last 512 tokens only; the output is the target's."""
    target, draft, prompt, want = case
    runner, fed = FastLlama(draft), []
    forward = runner.forward
    runner.forward = lambda ids, cache, n, **kw: fed.append(len(ids)) or forward(ids, cache, n, **kw)
    out, stats = generate(target, runner, prompt, N_NEW, DecodeOptions(gamma=3, schedule="constant", draft_context=512))
    assert out == want
    assert fed[0] == 512 and max(fed[1:]) < 8  # the window, then a round's few tokens at a time
    assert stats.proposed > 0  # (a random model's next token hangs on all 6,000 random tokens: few are accepted)
