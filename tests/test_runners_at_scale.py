"""FastLlama at users' scale, checked on CPU: no second copy of the weights on a GPU layout, the CUDA attention
path in forms SDPA's fused kernels accept (its calls recorded, its logits against HF's), RoPE types against HF,
and a model spread over devices taking the HF runner.
"""

import pytest
import torch
import torch.nn.functional as F
from test_decode_runners import ATOL, _ids, full_logits  # the same helpers as the runners' own tests
from transformers import LlamaConfig, LlamaForCausalLM

from decode.drafting.tree import verify_mask
from decode.runners import fast as runners
from decode.runners.choice import runner_for
from decode.runners.fast import FastLlama, default_attention, default_layout
from decode.runners.hf import HFRunner


def _tensors(obj) -> list[torch.Tensor]:
    """Every tensor a runner holds (its layers' tuples, _Linear weights, biases, parts, packed blocks)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, (runners._Linear, runners.smallgemm.Packed)):
        return [t for x in vars(obj).values() for t in _tensors(x)]
    return []


def _bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view or a reference counts once)."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("kw", [{}, {"tie_word_embeddings": True}, {"attention_bias": True, "mlp_bias": True}])
def test_hf_layout_holds_no_second_copy_of_the_weights(tiny_llama, kw):
    """The GPU default ("hf" layout) multiplies the HF tensors themselves; before, every runner held an (in, out)
    copy of every matrix: ~2x the model's weight memory, which a target filling its GPU cannot afford."""
    model = tiny_llama(0, init=0.1, **kw)
    weights = _bytes(model.parameters())
    fast = FastLlama(model, layout="hf")
    held = [fast.embed, fast.norm, fast.head, *fast.layers]
    assert _bytes(list(model.parameters()) + _tensors(held)) < 1.05 * weights  # only the small fused biases
    ids = _ids(9, seed=2)
    torch.testing.assert_close(fast.forward(ids, fast.new_cache(16), 9), full_logits(model, ids), atol=ATOL, rtol=0)
    # the CPU's fused (in, out) copy is a deliberate second copy (CPU-sized models; faster GEMMs there)
    assert _bytes(list(model.parameters()) + _tensors([FastLlama(model, layout="io").layers])) > 1.5 * weights


def test_layout_and_attention_follow_the_device():
    assert default_layout(torch.device("cpu")) == "io" and default_layout(torch.device("cuda", 0)) == "hf"
    assert default_attention(torch.device("cpu")) == "cpu" and default_attention(torch.device("cuda")) == "cuda"


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Record every F.scaled_dot_product_attention call's arguments (shapes, mask dtype), then run it."""
    calls, real = [], F.scaled_dot_product_attention

    def record(q, k, v, **kw):
        mask = kw.get("attn_mask")
        calls.append({"q_heads": q.shape[1], "kv_heads": k.shape[1], "n": q.shape[2], "is_causal": kw.get("is_causal", False),
                      "enable_gqa": kw.get("enable_gqa", False), "mask": None if mask is None else mask.dtype})
        return real(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", record)
    return calls


def test_cuda_attention_takes_forms_the_fused_kernels_accept(tiny_llama, sdpa_calls):
    """Before, every multi-token CUDA forward passed a boolean mask with enable_gqa=True: no fused kernel takes
    that pair, so SDPA fell back to its math kernel (float32 score matrices, ~8 GB a layer for an 8k prompt).
    The CUDA path is taken here on the CPU (runner.attention) and its logits checked against the CPU path's."""
    model = tiny_llama(3, init=0.1, layers=2)  # 4 query heads, 2 K/V heads
    ids = _ids(7 + 1 + 4 + 5, seed=3)
    cpu = FastLlama(model)
    cuda = FastLlama(model)
    cuda.attention = "cuda"
    c_cpu, c_cuda = cpu.new_cache(32), cuda.new_cache(32)
    # prompt, token, verification, a token tree (x with two children, the first with two of its own; decode.drafting.tree)
    chunks = [(ids[:7], False), (ids[7:8], False), (ids[8:12], False), (ids[12:17], True)]
    expected = []
    for chunk, tree in chunks:
        start = c_cpu.length
        shape = verify_mask([-1, -1, 0, 0], [1, 1, 2, 2], start, model.device) if tree else None
        want = cpu.forward(chunk, c_cpu, len(chunk), tree=shape)
        sdpa_calls.clear()
        got = cuda.forward(chunk, c_cuda, len(chunk), tree=shape)
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
        assert len(sdpa_calls) == 2  # one a layer
        expected.append(sdpa_calls[0])
    prompt, token, verify, trees = expected
    # a prompt: causal without a mask (flash / memory-efficient), K/V expanded to the query heads
    assert prompt == {"q_heads": 4, "kv_heads": 4, "n": 7, "is_causal": True, "enable_gqa": False, "mask": None}
    # one token: no mask, GQA in the kernel (flash decodes with it)
    assert token == {"q_heads": 4, "kv_heads": 2, "n": 1, "is_causal": False, "enable_gqa": True, "mask": None}
    # after a cache: an additive mask in the model's dtype, expanded heads (the memory-efficient kernel)
    for call, n in ((verify, 4), (trees, 5)):
        assert call == {"q_heads": 4, "kv_heads": 4, "n": n, "is_causal": False, "enable_gqa": False,
                        "mask": torch.float32}


def _llama(rope: dict, max_positions: int = 32) -> LlamaForCausalLM:
    torch.manual_seed(0)
    c = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=max_positions, rope_parameters=rope,
                    initializer_range=0.1)
    return LlamaForCausalLM(c).eval()


def test_dynamic_rope_takes_the_hf_runner_and_matches_hf():
    """Before, FastLlama sized its table past max_position_embeddings (the cache's length), so HF's dynamic NTK
    rescaled every frequency: logits off by ~0.2 on a sequence that fits. Dynamic (stateful in HF) now runs on HF."""
    model = _llama({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    assert not FastLlama.supports(model) and not FastLlama.supports_config(model.config)
    runner = runner_for(model)
    assert isinstance(runner, HFRunner)
    ids = _ids(20, seed=4)
    torch.testing.assert_close(runner.forward(ids, runner.new_cache(64), 20), full_logits(model, ids), atol=ATOL,
                               rtol=0)


def test_llama3_rope_matches_hf_across_the_original_length():
    """Llama-3.1's rope_type llama3 (static, frequency-banded scaling) stays on FastLlama and equals HF, here on a
    sequence past original_max_position_embeddings, where the banded frequencies show."""
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8, "rope_theta": 500000.0}
    model = _llama(rope, max_positions=64)
    runner = runner_for(model)
    assert isinstance(runner, FastLlama)
    ids = _ids(30, seed=5)
    ref = full_logits(model, ids)
    cache = runner.new_cache(64)
    torch.testing.assert_close(runner.forward(ids[:20], cache, 20), ref[:20], atol=ATOL, rtol=0)
    torch.testing.assert_close(runner.forward(ids[20:], cache, 10), ref[20:], atol=ATOL, rtol=0)


def test_a_model_spread_over_devices_takes_the_hf_runner(tiny_llama, capsys):
    """FastLlama keeps every layer on one device; a device-mapped model (one layer elsewhere: here on `meta`,
    standing in for a second GPU) takes HFRunner, said once on stderr."""
    model = tiny_llama(7, init=0.1)
    model.model.layers[1].to("meta")
    assert not FastLlama.supports(model)
    assert isinstance(runner_for(model), HFRunner)
    assert isinstance(runner_for(model), HFRunner)
    err = capsys.readouterr().err
    assert err.count("HF runner (FastLlama needs one device)") == 1 and "meta" in err
