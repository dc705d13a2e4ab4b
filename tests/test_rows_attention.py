"""decode/runners/csrc/attention.cpp: one layer's RoPE, cache write and attention for a few rows, in the kernel's module,
equals FastLlama's torch ops (one token, a chain, a token tree; GQA; head sizes on and off the 8-float lanes) on
every ISA build this CPU runs, and a row's result does not depend on how many rows share the call."""

import pytest
import torch

from decode.runners import smallgemm
from decode.runners.fast import FastLlama
from tests.test_smallgemm import isa_kernel


def _forwards(runner, ids, fused: bool):
    """A prompt, one token, a 4-token chain and a 3-node tree (two siblings, then a child of the first)."""
    kept = runner.rows_attention
    runner.rows_attention = kept if fused else None
    try:
        cache = runner.new_cache(40)
        outs = [runner.forward(ids[:20], cache, 1), runner.forward(ids[20:21], cache, 1),
                runner.forward(ids[21:25], cache, 4)]
        start = cache.length
        mask = torch.zeros(3, start + 3, dtype=torch.bool)
        mask[:, :start] = True
        mask[[0, 1, 2, 2], [start, start + 1, start, start + 2]] = True
        outs.append(runner.forward(ids[25:28], cache, 3, tree=(torch.tensor([start, start, start + 1]), mask)))
        return outs, cache
    finally:
        runner.rows_attention = kept


@pytest.mark.parametrize("isa", list(smallgemm.ISAS))
@pytest.mark.parametrize("hidden", [32, 48])  # head_dim 8 (the lanes' path), 12 (the one-float path)
def test_matches_torch_ops_and_rows_are_independent(tiny_llama, monkeypatch, isa, hidden):
    isa_kernel(isa)
    monkeypatch.setenv(smallgemm.ISA_ENV, isa)
    model = tiny_llama(3, hidden=hidden, num_attention_heads=4, num_key_value_heads=2)
    runner = FastLlama(model)
    assert runner.rows_attention is not None
    runner.set_paths("smallgemm", "torch", "smallgemm")  # every few-row product on the kernel: row-independent
    ids = torch.randint(0, model.config.vocab_size, (28,), generator=torch.Generator().manual_seed(2)).tolist()
    (fused, fused_cache), (ref, ref_cache) = _forwards(runner, ids, True), _forwards(runner, ids, False)
    for got, want in zip(fused, ref):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    n = fused_cache.length
    torch.testing.assert_close(fused_cache.k[:, :, :n], ref_cache.k[:, :, :n], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused_cache.v[:, :, :n], ref_cache.v[:, :, :n], rtol=1e-5, atol=1e-5)
    # the 4-token chain's rows, bitwise, as four one-token forwards
    cache = runner.new_cache(40)
    runner.forward(ids[:20], cache, 1)  # the same prefix, the same way (a prompt's rows take torch's ops)
    runner.forward(ids[20:21], cache, 1)
    singles = torch.cat([runner.forward([t], cache, 1) for t in ids[21:25]])
    assert torch.equal(singles, fused[2])


def test_refuses_several_rows_without_a_mask():
    module = isa_kernel(smallgemm.chosen_isa())
    kc = torch.zeros(2, 16, 8)
    qkv, cos = torch.zeros(3, (4 + 2 * 2) * 8), torch.ones(3, 8)
    with pytest.raises(RuntimeError, match="more than one row needs a mask"):
        module.rows_attention(qkv, kc, kc.clone(), 0, cos, cos, None, 4, 2)


@pytest.mark.parametrize("isa", list(smallgemm.ISAS))
def test_a_long_context_in_key_chunks_matches_torch_whatever_the_threads_and_rows(isa):
    """2,500 cached keys: the AVX builds split them into chunks of 1,024 (combined after), the portable one reads
    them in one pass. Both match torch's attention; the result is bitwise the same on one thread and on two, and
    a verification's row i is bitwise the one-token call at its position."""
    module = isa_kernel(isa)
    heads, kv, hd, start, n = 6, 2, 16, 2500, 5
    g = torch.Generator().manual_seed(3)
    kc, vc = torch.randn(kv, start + n, hd, generator=g), torch.randn(kv, start + n, hd, generator=g)
    qkv = torch.randn(n, (heads + 2 * kv) * hd, generator=g) * 2
    angle = torch.rand(n, hd // 2, generator=g).repeat(1, 2) * 6.3
    cos, sin = angle.cos().contiguous(), angle.sin().contiguous()
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = module.rows_attention(qkv, kc, vc, start, cos, sin, mask, heads, kv)
        torch.set_num_threads(2)
        two = module.rows_attention(qkv, kc, vc, start, cos, sin, mask, heads, kv)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)

    def rotate(x):  # (n, h, hd): HF's rotate_half convention
        return x * cos[:, None] + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin[:, None]

    q = rotate(qkv[:, :heads * hd].view(n, heads, hd)).transpose(0, 1)  # (heads, n, hd)
    torch.testing.assert_close(kc[:, start:], rotate(qkv[:, heads * hd:(heads + kv) * hd].view(n, kv, hd)).transpose(0, 1))
    want = torch.nn.functional.scaled_dot_product_attention(q[None], kc[None], vc[None], attn_mask=mask,
                                                            enable_gqa=True)[0]  # (heads, n, hd)
    torch.testing.assert_close(one, want.transpose(0, 1).reshape(n, heads * hd), rtol=1e-4, atol=1e-5)
    for i in range(n):  # the cache already holds rows start..start + i - 1; this call writes row start + i again
        row = module.rows_attention(qkv[i:i + 1].contiguous(), kc, vc, start + i, cos[i:i + 1].contiguous(),
                                    sin[i:i + 1].contiguous(), None, heads, kv)
        assert torch.equal(row[0], one[i])
