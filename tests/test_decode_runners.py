"""Runners compute exactly the HF model's function: FastLlama logits vs HF logits, and KV-cache rollback.

A fresh full forward of HF's model over the whole sequence is the reference for every chunk a runner computes
after a cache, and for every chunk after a crop (the decoder's rollback).
"""

import pytest
import torch

from decode.runners.choice import runner_for
from decode.runners.fast import FastLlama, StaticCache
from decode.runners.hf import HFRunner

ATOL = 1e-5


def full_logits(model, ids: list[int]) -> torch.Tensor:
    """(len(ids), V) logits of one uncached HF forward."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def _ids(n: int, seed: int = 0, vocab: int = 97) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


CONFIGS = {
    "llama": ("llama", {}),
    "llama-bias": ("llama", {"attention_bias": True, "mlp_bias": True}),
    "llama-tied-head_dim": ("llama", {"tie_word_embeddings": True, "head_dim": 16}),
    "llama-mha-3layers": ("llama", {"num_key_value_heads": 4, "layers": 3}),
    "llama-rope-scaling": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "qwen2": ("qwen2", {}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True}),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def model(request, tiny_llama, tiny_qwen2):
    kind, kw = CONFIGS[request.param]
    make = tiny_llama if kind == "llama" else tiny_qwen2
    # the default init here: small logits, close to real models' scale; 0.5 init checked in test_decode_lossless
    return make(seed=len(request.param), init=0.1, **kw)


def test_fast_llama_supports_llama_and_qwen2(model):
    assert FastLlama.supports(model)
    assert isinstance(runner_for(model), FastLlama)
    assert isinstance(runner_for(model, fast=False), HFRunner)


@pytest.mark.parametrize("runner_kind", ["fast", "hf"])
def test_chunked_forward_after_cache_equals_full_forward(model, runner_kind):
    """Prefill, then chunks of 3, 1, 5, 1 tokens: each chunk's logits equal the full forward's at those positions."""
    runner = FastLlama(model) if runner_kind == "fast" else HFRunner(model)
    ids = _ids(7 + 3 + 1 + 5 + 1, seed=1)
    ref = full_logits(model, ids)
    cache = runner.new_cache(64)
    start = 0
    for n in (7, 3, 1, 5, 1):
        chunk = ids[start : start + n]
        got = runner.forward(chunk, cache, n)
        assert got.shape == (n, model.config.vocab_size)
        torch.testing.assert_close(got, ref[start : start + n], atol=ATOL, rtol=0)
        start += n
    assert cache.get_seq_length() == len(ids)
    # keep < n returns only the last positions
    cache2 = runner.new_cache(64)
    torch.testing.assert_close(runner.forward(ids, cache2, 2), ref[-2:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("runner_kind", ["fast", "hf"])
def test_crop_then_reforward_equals_fresh_forward(model, runner_kind):
    """The decoder's rollback: forward [x, d1..d4], keep 1 of 4 drafts, forward different tokens."""
    runner = FastLlama(model) if runner_kind == "fast" else HFRunner(model)
    prompt, drafts, fresh = _ids(6, seed=2), _ids(5, seed=3), _ids(3, seed=4)
    cache = runner.new_cache(64)
    runner.forward(prompt, cache, 1)
    runner.forward(drafts, cache, 5)
    cache.crop(-3)  # keep drafts[:2]
    assert cache.get_seq_length() == len(prompt) + 2
    got = runner.forward(fresh, cache, 3)
    ref = full_logits(model, prompt + drafts[:2] + fresh)
    torch.testing.assert_close(got, ref[-3:], atol=ATOL, rtol=0)
    # crop back to the prompt, then a single-token step
    cache.crop(-(2 + 3))
    got = runner.forward(fresh[:1], cache, 1)
    torch.testing.assert_close(got, full_logits(model, prompt + fresh[:1])[-1:], atol=ATOL, rtol=0)


def test_static_cache_crop_is_a_length_change():
    cache = StaticCache(2, 1, 8, 4, torch.float32, "cpu")
    cache.length = 6
    cache.crop(-2)
    assert cache.get_seq_length() == 4
    cache.crop(0)
    assert cache.get_seq_length() == 4


def test_fast_llama_rejects_overflowing_cache(tiny_llama):
    runner = FastLlama(tiny_llama(0))
    cache = runner.new_cache(4)
    runner.forward([1, 2, 3], cache, 1)
    with pytest.raises(ValueError, match="KV cache holds 4 positions; 5 needed"):
        runner.forward([4, 5], cache, 1)


def test_mistral_without_sliding_window_matches_hf():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=None,
        initializer_range=0.1,
    )
    model = MistralForCausalLM(cfg).eval()
    runner = runner_for(model)
    assert isinstance(runner, FastLlama)
    ids = _ids(9, seed=5)
    cache = runner.new_cache(32)
    torch.testing.assert_close(runner.forward(ids, cache, 9), full_logits(model, ids), atol=ATOL, rtol=0)


def test_unsupported_models_take_the_hf_runner(tiny_qwen2):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=32, n_layer=1, n_head=4)).eval()
    assert isinstance(runner_for(gpt2), HFRunner)
    sliding = tiny_qwen2(0, use_sliding_window=True, sliding_window=16)
    assert not FastLlama.supports(sliding)
    assert isinstance(runner_for(sliding), HFRunner)


def test_runner_for_is_cached_and_rebuilt_after_a_weight_change(tiny_llama):
    model = tiny_llama(0, init=0.1)
    r1 = runner_for(model)
    assert runner_for(model) is r1
    assert runner_for(r1) is r1  # runners pass through
    ids = _ids(5, seed=6)
    before = r1.forward(ids, r1.new_cache(8), 1)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2.0)  # an in-place update, as an optimizer step does
    r2 = runner_for(model)
    assert r2 is not r1
    after = r2.forward(ids, r2.new_cache(8), 1)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, full_logits(model, ids)[-1:], atol=ATOL, rtol=0)


def test_fused_rms_norm_is_llamas_bitwise(tiny_llama):
    """FastLlama's float32 norm (torch's fused rms_norm) gives LlamaRMSNorm's exact bits, from one token to a prompt:
    the target's own logits, and so the lossless check against transformers, do not move."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    fast = FastLlama(tiny_llama(0))
    g = torch.Generator().manual_seed(0)
    for n, d, scale in [(1, 576, 1.0), (3, 576, 30.0), (16, 744, 1e-3), (300, 576, 5.0), (7, 32, 1.0)]:
        norm = LlamaRMSNorm(d, eps=fast.eps)
        norm.weight.data = torch.randn(d, generator=g)
        x = torch.randn(n, d, generator=g) * scale
        assert torch.equal(fast._norm(x, norm.weight), norm(x))
