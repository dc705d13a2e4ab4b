"""Score-mode collection's logits equal the model's own forward's, including what an architecture does past its
head (Gemma2's final logit soft-capping), so the stored top-k is the target's true distribution."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

from distill.collect.generation import head_logits, score_batch


def _gemma2(cap: float | None) -> Gemma2ForCausalLM:
    torch.manual_seed(0)
    c = Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, sliding_window=8, final_logit_softcapping=cap,
                     attn_logit_softcapping=50.0, query_pre_attn_scalar=8, initializer_range=0.5)
    return Gemma2ForCausalLM(c).eval()


def _reference(model, prompt: list[int], response: list[int], k: int):
    """Top-k ids and logprobs at the response positions from one plain forward of prompt + response."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    rows = logits[len(prompt) - 1: len(prompt) + len(response) - 1]
    vals, ids = torch.topk(torch.log_softmax(rows.float(), -1), k, -1)
    return ids.tolist(), vals


@pytest.mark.parametrize("cap", [2.0, None])
def test_score_batch_matches_the_models_own_forward_with_soft_capping(cap):
    """Before, score mode ran the base model and the head only: with Gemma2's final_logit_softcapping (30 in the
    real models; 2 here so it bites at this size) every stored logprob was the uncapped, wrong distribution."""
    model = _gemma2(cap)
    prompts, responses = [[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15]]
    got = score_batch(model, prompts, responses, k=5, pad_id=0)
    for g, p, r in zip(got, prompts, responses):
        ids, vals = _reference(model, p, r, 5)
        assert g.topk_ids == ids
        torch.testing.assert_close(torch.tensor(g.topk_logprobs), vals.to(torch.float16).float(), atol=2e-3, rtol=0)


def test_head_logits_is_the_plain_head_without_rescaling():
    torch.manual_seed(1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    h = torch.randn(3, 32)
    with torch.no_grad():
        assert torch.equal(head_logits(model, h), model.lm_head(h))
