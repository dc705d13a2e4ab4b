"""FastLlama: a lean forward for llama-family models (llama, mistral, qwen2) on one device, in the spirit of gpt-fast.

A preallocated KV cache (StaticCache) whose rollback is a length change (no torch.cat, no copy), and no per-call
mask or cache-object machinery. On the CPU its weights are pre-transposed into (in, out) layout with q|k|v and
gate|up fused into one matrix each (at batch 1 and 1-8 tokens, CPU GEMMs run markedly faster that way than HF's
(out, in) nn.Linear), a second copy of the weights that CPU-sized models afford. Elsewhere (CUDA) it multiplies the
HF model's own tensors: no copy, so a target that fills the GPU still fits with its runner. On a CPU in float32,
forwards of 2-16 tokens (a verification) multiply with decode.runners.smallgemm (its AVX-512, AVX2 or portable
build, whichever the CPU runs best), which reads each weight once whatever the token count (the portable build
only where it beats torch's matmul there); single tokens and prompts of up to 256 tokens do too where that beats
torch's matmul on the machine at hand (timed once per runner). It computes the same function as the HF model;
tests check its logits against HF's and its greedy output against `generate`.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from decode.runners import smallgemm
from decode.runners.hf import STATEFUL_ROPE, model_devices, rope_type

FAST_MODEL_TYPES = ("llama", "mistral", "qwen2")


class StaticCache:
    """Preallocated K/V for every layer: (layers, kv_heads, max_len, head_dim) each; `length` positions valid."""

    def __init__(self, n_layers: int, kv_heads: int, max_len: int, head_dim: int, dtype, device):
        self.k = torch.empty(n_layers, kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    def crop(self, n: int) -> None:
        """crop(-n) forgets the last n positions (DynamicCache's convention)."""
        assert n <= 0 and -n <= self.length
        self.length += n

    def get_seq_length(self) -> int:
        return self.length

    def keep(self, start: int, rows: list[int]) -> None:
        """Keep positions start + rows[i] at start + i (every layer), forget the rest: an accepted tree path."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.k.device) + start
        end = start + len(rows)
        self.k[:, :, start:end] = self.k[:, :, idx]  # the gather copies before the write
        self.v[:, :, start:end] = self.v[:, :, idx]
        self.length = end


class _Linear:
    """y = x @ W^T + b for one or more nn.Linear layers sharing an input, outputs concatenated.

    layout "io" (CPU): W copied into one (in, sum(out)) matrix; 2-16 rows go through decode.runners.smallgemm where it is
    usable (and, for float32, faster: FastLlama.set_paths). weights float16 / int8: 1-16 rows multiply weights stored that way (decode.runners.smallgemm; drafts only: it
    rounds them). Longer inputs (a prompt) use the exact float32 weight.
    layout "hf": the HF layers' own (out, in) tensors, one matmul each (no copy)."""

    def __init__(self, *linears, small_m: bool, weights: str = "float32", layout: str = "io"):
        biases = [lin.bias for lin in linears]
        self.b = torch.cat(biases).contiguous() if all(x is not None for x in biases) else None
        self.parts = None
        self.packed = None
        if layout == "hf":
            self.w = None
            self.parts = [(lin.weight, lin.bias) for lin in linears]  # references, not copies
            return
        self.w = torch.cat([lin.weight for lin in linears], 0).t().contiguous()  # (in, sum(out)): a copy
        self.packed = smallgemm.Packed(self.w, weights) if small_m else None
        # the row counts the kernel takes: [MIN_ROWS, MAX_ROWS] (a verification) unless FastLlama.set_paths widens
        # them (1 row, prompts up to PROMPT_ROWS) or empties them (the kernel loses to torch's matmul here)
        self.min_rows = smallgemm.MIN_ROWS if weights == "float32" else 1
        self.max_rows = smallgemm.MAX_ROWS

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x: (n, in) -> (n, out)
        if self.parts is not None:
            outs = [F.linear(x, w, b) for w, b in self.parts]
            return outs[0] if len(outs) == 1 else torch.cat(outs, -1)
        if self.packed is not None and self.min_rows <= x.shape[0] <= self.max_rows:
            return self.packed(x, self.b)
        return self.torch_mm(x)

    def torch_mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.b, x, self.w) if self.b is not None else x @ self.w


def default_layout(device: torch.device) -> str:
    """"io" on the CPU (the fused (in, out) copy is faster there, and CPU-sized models afford two copies); "hf"
    elsewhere: on a GPU the pre-transposed copy buys nothing and would double the weights' memory."""
    return "io" if device.type == "cpu" else "hf"


def default_attention(device: torch.device) -> str:
    """Which attention code a forward takes: "cpu" (up to MAX_ROWS tokens: the kernel module's rows_attention where
    it builds, else batched matmuls for a verification; SDPA with a boolean mask otherwise), or "cuda" (SDPA in a
    form its flash / memory-efficient kernels accept; see _cuda_sdpa_args)."""
    return "cpu" if device.type == "cpu" else "cuda"


def _cuda_sdpa_args(mask: torch.Tensor | None, start: int, tree: bool, dtype) -> tuple[dict, bool]:
    """SDPA keyword arguments for a forward of n tokens after `start` cached ones, and whether K/V must be
    expanded to one head per query head first. mask: (n, end) bool, None for one token.

    A boolean mask with enable_gqa=True fits no fused CUDA kernel (flash takes no mask; the memory-efficient
    kernel takes a mask but not GQA), so SDPA falls back to its math kernel, which materialises every (heads, n,
    end) score matrix in float32: ~8 GB a layer for an 8k-token prompt. Instead:
      one token:              no mask (it sees the whole cache), enable_gqa: flash in bf16/fp16
      a prompt (empty cache): is_causal, K/V expanded: flash in bf16/fp16, memory-efficient in fp32
      n tokens after a cache: the mask as an additive float bias of the model's dtype, K/V expanded:
                              the memory-efficient kernel (a verification: n is small)
    """
    if mask is None:
        return {"enable_gqa": True}, False
    if start == 0 and not tree:
        return {"is_causal": True}, True
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return {"attn_mask": bias}, True


def _faster(linears: list[_Linear], rows: int, repeats: int, a, b) -> bool:
    """Whether multiplying `rows`-token inputs by these very weights is faster with b(lin, x) than with a(lin, x):
    a pass over all of them each way, alternating, median of `repeats` (the first pass of each is a warm-up)."""
    xs = [torch.randn(rows, lin.w.shape[0], dtype=lin.w.dtype) for lin in linears]
    times = {a: [], b: []}
    for _ in range(repeats + 1):
        for how in (a, b):
            t0 = time.perf_counter()
            for lin, x in zip(linears, xs):
                how(lin, x)
            times[how].append(time.perf_counter() - t0)
    median = {k: sorted(t[1:])[repeats // 2] for k, t in times.items()}
    return median[b] < median[a]


def _kernel_wins(linears: list[_Linear], rows: int, repeats: int) -> bool:
    """Whether `rows`-token forwards multiply faster through decode.runners.smallgemm than through torch's matmul (MKL).
    Which wins depends on the machine: on one 2-core box MKL was ~20% faster at one row; on another (AMD) the
    kernel was 1.8x at one row and 1.7x at a 44-token prompt. The portable build is timed at a verification's rows
    too (the AVX2 and AVX-512 builds win there by design)."""
    return _faster(linears, rows, repeats, lambda lin, x: lin.torch_mm(x), lambda lin, x: lin.packed(x, lin.b))


def _choose_prefetch(linears: list[_Linear], rows: int, repeats: int) -> int:
    """Sets, and returns, the kernel's prefetch distance for these weights (smallgemm.PREFETCH_BYTES or 0),
    whichever multiplies `rows` tokens faster here: software prefetch made a 5-row pass 1.4-1.5x faster on a
    Sapphire Rapids and an earlier layout slower on an AMD EPYC (decode/runners/csrc/smallgemm.cpp)."""
    def at(distance):
        def multiply(lin, x):
            lin.packed.prefetch = distance
            lin.packed(x, lin.b)
        return multiply

    chosen = smallgemm.PREFETCH_BYTES if _faster(linears, rows, repeats, at(0), at(smallgemm.PREFETCH_BYTES)) else 0
    for lin in linears:
        lin.packed.prefetch = chosen
    return chosen


PROMPT_ROWS, PROMPT_PROBE = 256, 64  # prompts of up to PROMPT_ROWS tokens may use the kernel, judged at PROMPT_PROBE
VERIFY_PROBE = 5  # a portable build's verifications (MIN_ROWS..MAX_ROWS tokens) are judged at γ = 4's 5 rows


class FastLlama:
    """Lean batch-1 forward for llama-family HF models on one device (on the CPU the weights are copied: rebuild
    after training steps; runner_for does)."""


    @staticmethod
    def supports(model) -> bool:
        if not FastLlama.supports_config(model.config) or len(model_devices(model)) > 1:
            return False
        m = getattr(model, "model", None)
        return m is not None and hasattr(m, "layers") and hasattr(m, "rotary_emb")

    @staticmethod
    def supports_config(c) -> bool:
        """What a model's config alone says: a llama-family model without a sliding window, with static RoPE
        frequencies."""
        if getattr(c, "model_type", None) not in FAST_MODEL_TYPES:
            return False
        # dynamic NTK and longrope change the frequencies with the sequence length, statefully (HF's rotary
        # module keeps a grown table until a short sequence resets it); FastLlama's table is built once per cache
        if rope_type(c) in STATEFUL_ROPE:
            return False
        # FastLlama has no sliding-window mask; HFRunner applies the model's own
        return not (getattr(c, "use_sliding_window", False) or (c.model_type == "mistral" and getattr(c, "sliding_window", None)))

    @torch.no_grad()
    def __init__(self, model, weights: str = "float32", layout: str | None = None):
        """weights: float16 or int8 keeps the weights so for forwards of up to 16 tokens (decode.runners.smallgemm; a
        draft's numerics only move its acceptance, and its step is memory-bound). Ignored (float32) where the
        kernel is not usable. layout: "io" | "hf" (_Linear); default_layout(device) unless given."""
        c = self.config = model.config
        self.device, self.dtype = model.device, model.dtype
        self.layout = layout or default_layout(self.device)
        self.attention = default_attention(self.device)
        self.n_heads, self.n_kv = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.act = ACT2FN[c.hidden_act]
        self.embed = model.model.embed_tokens.weight
        self.rotary = model.model.rotary_emb
        small_m = self.layout == "io" and smallgemm.usable_for(model.lm_head.weight)
        self.weights = weights = weights if small_m else "float32"
        kw = dict(small_m=small_m, weights=weights, layout=self.layout)
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, _Linear(a.q_proj, a.k_proj, a.v_proj, **kw), _Linear(a.o_proj, **kw),
                layer.post_attention_layernorm.weight, _Linear(m.gate_proj, m.up_proj, **kw), _Linear(m.down_proj, **kw),
            ))
        self.norm = model.model.norm.weight
        self.head = _Linear(model.lm_head, **kw)
        # forwards of up to MAX_ROWS tokens on the CPU: each layer's RoPE, cache write and attention in one call of
        # the kernel's module (decode/runners/csrc/attention.cpp) instead of a dozen tiny torch ops; torch's ops otherwise
        self.rows_attention = smallgemm.kernel().rows_attention if small_m else None
        self._cos = self._sin = None
        self.capture, self.features = (), None
        # one-token forwards and prompts (17-256 tokens): rounded weights take the kernel for single tokens and
        # their exact float32 copy for prompts; exact weights take whichever of the kernel and torch's matmul is
        # faster on this machine for each (timed once, here: ~1 s for the default target). The target alone, the
        # baseline of every speedup, so runs on the fastest path we have, and prefill does too. Verifications
        # (2-16 tokens) take the avx2 / avx512 kernel always: it reads each weight once where MKL repacks it (v(4)
        # 1.5-3.2 on an AVX2 EPYC), and a timing on a busy shared box can call two close paths either way. The
        # portable build is timed at a verification too: plain C++ may lose there.
        self.one_row = self.prompt = self.verify = "torch"
        self.prefetch = 0  # the kernel's software prefetch distance in bytes (decode.runners.smallgemm.PREFETCH_BYTES)
        lin = self.linears()
        if small_m:  # timed at a verification's rows first: it moves the kernel's side of the timings below
            self.prefetch = _choose_prefetch(lin, VERIFY_PROBE if weights == "float32" else 1, 5)
        if small_m and weights != "float32":
            self.one_row = self.verify = "smallgemm"
        elif small_m:
            verify = "smallgemm"
            if self.head.packed.isa == "portable" and not _kernel_wins(lin, VERIFY_PROBE, 5):
                verify = "torch"
            self.set_paths("smallgemm" if _kernel_wins(lin, 1, 5) else "torch",
                           "smallgemm" if verify == "smallgemm" and _kernel_wins(lin, PROMPT_PROBE, 3) else "torch",
                           verify)

    def linears(self) -> list[_Linear]:
        return [lin for layer in self.layers for lin in layer if isinstance(lin, _Linear)] + [self.head]

    def set_paths(self, one_row: str, prompt: str = "torch", verify: str = "smallgemm") -> None:
        """Multiply one-token forwards, prompts of up to PROMPT_ROWS tokens and verifications (MIN_ROWS..MAX_ROWS
        tokens) with "smallgemm" or "torch" (float32 weights only). The kernel's rows must be one range
        (_Linear.min_rows..max_rows): a prompt on the kernel needs verifications on it too."""
        for how in (one_row, prompt, verify):
            if how not in ("smallgemm", "torch") or (how == "smallgemm" and self.head.packed is None):
                raise ValueError(f"matmul path {how!r} is not available here")
        if self.weights != "float32":
            raise ValueError("set_paths is for float32 weights (rounded ones always take the kernel)")
        if verify == "torch":  # the kernel lost at verification size: it would not win at a prompt's either
            prompt = "torch"
        for lin in self.linears():
            lin.min_rows = 1 if one_row == "smallgemm" else smallgemm.MIN_ROWS
            lin.max_rows = PROMPT_ROWS if prompt == "smallgemm" else smallgemm.MAX_ROWS
            if verify == "torch":  # one row at most (or none: min_rows > max_rows)
                lin.max_rows = 1
        self.one_row, self.prompt, self.verify = one_row, prompt, verify

    def new_cache(self, max_len: int) -> StaticCache:
        self._rope_table(max_len)
        return StaticCache(len(self.layers), self.n_kv, max_len, self.head_dim, self.dtype, self.device)

    def _rope_table(self, n: int) -> None:
        if self._cos is None or self._cos.shape[0] < n:
            pos = torch.arange(n, device=self.device)[None]
            cos, sin = self.rotary(self.embed[:1][None], pos)  # (1, n, head_dim)
            self._cos, self._sin = cos[0], sin[0]

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            # torch's fused kernel: bitwise LlamaRMSNorm's result in float32 here (checked in tests), ~3x faster
            # at one token than the five ops below (aten::mean alone ~30 us a call on a 2-core CPU)
            return F.rms_norm(x, (x.shape[-1],), w, self.eps)
        # as LlamaRMSNorm: normalise in float32, cast back, then scale
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    @staticmethod
    def _rope(x, cos, sin):
        # x: (heads, n, hd); cos/sin: (n, hd). rotate_half(x) = cat(-x2, x1)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def _attend_few(self, q, k, v, bias):
        """Attention for a few query tokens on CPU: q (heads, n, hd), k/v (kv_heads, end, hd), bias (group * n, end).
        SDPA's CPU kernel with a boolean mask converts the mask in every layer and costs ~1.6x its mask-free
        one-token call; two batched matmuls over the query heads that share a K/V head do not."""
        heads, n, hd = q.shape
        qg = q.reshape(self.n_kv, heads // self.n_kv * n, hd)  # query head h reads K/V head h // group
        scores = torch.baddbmm(bias, qg, k.transpose(1, 2), alpha=hd ** -0.5)  # (kv_heads, group * n, end)
        return torch.bmm(torch.softmax(scores, -1), v).view(heads, n, hd)

    def _torch_attention(self, qkv, cache: StaticCache, li: int, start: int, cos, sin, bias, sdpa, expand):
        """One layer's RoPE, cache write and attention in torch's ops: qkv (n, nq + 2 nkv) -> (n, nq)."""
        n, hd, end = qkv.shape[0], self.head_dim, start + qkv.shape[0]
        nq, nkv = self.n_heads * hd, self.n_kv * hd
        q = qkv[:, :nq].view(n, self.n_heads, hd).transpose(0, 1)  # (heads, n, hd)
        k = qkv[:, nq:nq + nkv].view(n, self.n_kv, hd).transpose(0, 1)
        v = qkv[:, nq + nkv:].view(n, self.n_kv, hd).transpose(0, 1)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        cache.k[li, :, start:end] = k
        cache.v[li, :, start:end] = v
        k, v = cache.k[li, :, :end], cache.v[li, :, :end]  # (kv_heads, end, hd)
        if bias is not None:
            att = self._attend_few(q, k, v, bias)
        else:
            if expand:  # (heads, end, hd): query head h reads K/V head h // group, as HF's repeat_kv
                group = self.n_heads // self.n_kv
                k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
            att = F.scaled_dot_product_attention(q[None], k[None], v[None], **sdpa)[0]  # (heads, n, hd)
        return att.transpose(0, 1).reshape(n, nq)

    @torch.no_grad()
    def forward(self, ids: list[int], cache: StaticCache, keep: int, tree=None) -> torch.Tensor:
        """Logits (keep, V) for the last `keep` of ids, after the cached positions.

        tree = (positions (n,), mask (n, start + n) bool): a token tree's forward (decode.drafting.tree), id i at rotary
        position positions[i] attending where mask[i] is True; None: causal, at positions start..start + n - 1.
        """
        n, start = len(ids), cache.length
        end = start + n
        if end > cache.k.shape[2]:
            raise ValueError(f"KV cache holds {cache.k.shape[2]} positions; {end} needed")
        h = self.embed[torch.tensor(ids, device=self.device)]  # (n, hidden)
        if tree is not None:
            pos, mask = tree
            cos, sin = self._cos[pos], self._sin[pos]
        else:
            # causal mask over [cache | new]: new token i sees cache and new tokens 0..i
            mask = None
            if n > 1:
                mask = torch.ones(n, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
            cos, sin = self._cos[start:end], self._sin[start:end]
        group = self.n_heads // self.n_kv
        bias, sdpa, expand = None, {"attn_mask": mask, "enable_gqa": True}, False
        fused = self.attention == "cpu" and self.rows_attention is not None and n <= smallgemm.MAX_ROWS
        if self.attention == "cuda":
            sdpa, expand = _cuda_sdpa_args(mask, start, tree is not None, self.dtype)
        elif fused:
            mask = mask.contiguous() if mask is not None else None
        elif mask is not None and n <= smallgemm.MAX_ROWS:
            # a verification on the CPU: the mask as an additive bias, built once for every layer, (group * n, end)
            bias = torch.zeros(n, end, dtype=self.dtype).masked_fill_(~mask, float("-inf")).repeat(group, 1)
        elif start == 0 and tree is None:
            # a prompt on the CPU: SDPA's causal kernel skips the blocks above the diagonal, which a boolean mask
            # makes it compute (and mask): half the attention's work, 2.2x faster at 4k tokens (the same values)
            sdpa = {"is_causal": True, "enable_gqa": True}
        captured = []
        for li, (ln1, qkv_lin, o_lin, ln2, gate_up_lin, down_lin) in enumerate(self.layers):
            if li in self.capture:  # the hidden state entering layer li, (n, hidden)
                captured.append(h)
            qkv = qkv_lin(self._norm(h, ln1))  # (n, nq + 2 nkv)
            if fused:  # the cache written at start..end - 1, (n, nq)
                att = self.rows_attention(qkv, cache.k[li], cache.v[li], start, cos, sin, mask, self.n_heads, self.n_kv)
            else:
                att = self._torch_attention(qkv, cache, li, start, cos, sin, bias, sdpa, expand)
            h = h + o_lin(att)
            gate, up = gate_up_lin(self._norm(h, ln2)).chunk(2, dim=-1)  # (n, intermediate) each
            h = h + down_lin(self.act(gate) * up)
        cache.length = end
        if self.capture:
            self.features = torch.cat(captured, -1)  # (n, len(capture) * hidden)
        return self.head(self._norm(h[-keep:], self.norm))  # (keep, V)
