"""How the decoder runs a model: one forward over new tokens after a KV cache, returning the last positions' logits.

    runner.new_cache(max_len) -> cache          cache.crop(-n) drops the last n positions
    runner.forward(ids, cache, keep) -> (keep, V) logits
    runner.forward(ids, cache, keep, siblings=s)   FastLlama only (runner.tree): the last s ids are alternatives
                                                   to ids[1] (a token tree verified in one forward; decode.speculative)

HFRunner works for any HF causal LM (DynamicCache). FastLlama is a lean forward for llama-family models
(llama, mistral, qwen2), in the spirit of gpt-fast: weights pre-transposed into (in, out) layout with q|k|v and
gate|up fused into one matrix each (at batch 1 and 1-8 tokens, CPU GEMMs run markedly faster that way than
HF's (out, in) nn.Linear), a preallocated KV cache whose rollback is a length change (no torch.cat, no copy),
and no per-call mask or cache-object machinery. On an AVX-512 CPU in float32, forwards of 2-16 tokens (a
verification) multiply with decode.smallgemm, which reads each weight once whatever the token count; single
tokens and prompts of up to 256 tokens do too where that beats torch's matmul on the machine at hand (timed once
per runner). It computes the same function as the HF model; tests check its logits against HF's and its greedy
output against `generate`.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.activations import ACT2FN

from decode import smallgemm

FAST_MODEL_TYPES = ("llama", "mistral", "qwen2")


class HFRunner:
    tree = False  # no sibling tokens in one forward (FastLlama has them)

    def __init__(self, model):
        self.model, self.config, self.device = model, model.config, model.device

    def new_cache(self, max_len: int):
        # no config: a config-built cache gives sliding-window layers that cannot be cropped (rolled back)
        # once past the window; the model applies its window through the attention mask anyway
        return DynamicCache()

    def forward(self, ids: list[int], cache, keep: int) -> torch.Tensor:
        x = torch.tensor([ids], device=self.device)
        return self.model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=keep).logits[0]


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

    def move(self, src: int, dst: int) -> None:
        """Copy position src's K/V (every layer) to position dst: an accepted sibling takes its chain slot."""
        self.k[:, :, dst] = self.k[:, :, src]
        self.v[:, :, dst] = self.v[:, :, src]


class _Linear:
    """y = x @ w + b with w in (in, out) layout; 2-16 rows go through decode.smallgemm where it is usable.

    weights float16 / int8: 1-16 rows multiply weights stored that way (decode.smallgemm; drafts only: it rounds
    them). Longer inputs (a prompt) use the exact float32 weight."""

    def __init__(self, *linears, small_m: bool, weights: str = "float32"):
        # nn.Linear layers sharing an input -> one (in, sum(out)) weight and the concatenated bias (or None)
        self.w = torch.cat([lin.weight for lin in linears], 0).t().contiguous()
        biases = [lin.bias for lin in linears]
        self.b = torch.cat(biases).contiguous() if all(x is not None for x in biases) else None
        self.packed = smallgemm.Packed(self.w, weights) if small_m else None
        self.min_rows = smallgemm.MIN_ROWS if weights == "float32" else 1
        self.max_rows = smallgemm.MAX_ROWS  # up to PROMPT_ROWS for float32 where the kernel wins there too

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x: (n, in) -> (n, out)
        if self.packed is not None and self.min_rows <= x.shape[0] <= self.max_rows:
            return self.packed(x, self.b)
        return self.torch_mm(x)

    def torch_mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.b, x, self.w) if self.b is not None else x @ self.w


def _kernel_wins(linears: list[_Linear], rows: int, repeats: int) -> bool:
    """Whether `rows`-token forwards multiply faster through decode.smallgemm than through torch's matmul (MKL),
    timed on these very weights: a pass over all of them each way, alternating, median of `repeats` (the first
    pass of each is a warm-up). Which wins depends on the machine: on one 2-core box MKL was ~20% faster at one
    row; on another (AMD) the kernel was 1.8x at one row and 1.7x at a 44-token prompt."""
    xs = [torch.randn(rows, lin.w.shape[0], dtype=lin.w.dtype) for lin in linears]
    times = {False: [], True: []}
    for _ in range(repeats + 1):
        for kernel in (False, True):
            t0 = time.perf_counter()
            for lin, x in zip(linears, xs):
                lin.packed(x, lin.b) if kernel else lin.torch_mm(x)
            times[kernel].append(time.perf_counter() - t0)
    median = {k: sorted(t[1:])[repeats // 2] for k, t in times.items()}
    return median[True] < median[False]


PROMPT_ROWS, PROMPT_PROBE = 256, 64  # prompts of up to PROMPT_ROWS tokens may use the kernel, judged at PROMPT_PROBE


class FastLlama:
    """Lean batch-1 forward for llama-family HF models (weights are copied; rebuild after training steps)."""

    tree = True  # forward(..., siblings=s) verifies alternatives to the first drafted token in the same pass

    @staticmethod
    def supports(model) -> bool:
        if not FastLlama.supports_config(model.config):
            return False
        m = getattr(model, "model", None)
        return m is not None and hasattr(m, "layers") and hasattr(m, "rotary_emb")

    @staticmethod
    def supports_config(c) -> bool:
        """What a model's config alone says: a llama-family model without a sliding window."""
        if getattr(c, "model_type", None) not in FAST_MODEL_TYPES:
            return False
        # FastLlama has no sliding-window mask; HFRunner applies the model's own
        return not (getattr(c, "use_sliding_window", False) or (c.model_type == "mistral" and getattr(c, "sliding_window", None)))

    @torch.no_grad()
    def __init__(self, model, weights: str = "float32"):
        """weights: float16 or int8 keeps the weights so for forwards of up to 16 tokens (decode.smallgemm; a
        draft's numerics only move its acceptance, and its step is memory-bound). Ignored (float32) where the
        kernel is not usable."""
        c = self.config = model.config
        self.device, self.dtype = model.device, model.dtype
        self.n_heads, self.n_kv = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.act = ACT2FN[c.hidden_act]
        self.embed = model.model.embed_tokens.weight
        self.rotary = model.model.rotary_emb
        small_m = smallgemm.usable_for(model.lm_head.weight)
        self.weights = weights = weights if small_m else "float32"
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, _Linear(a.q_proj, a.k_proj, a.v_proj, small_m=small_m, weights=weights),
                _Linear(a.o_proj, small_m=small_m, weights=weights), layer.post_attention_layernorm.weight,
                _Linear(m.gate_proj, m.up_proj, small_m=small_m, weights=weights),
                _Linear(m.down_proj, small_m=small_m, weights=weights),
            ))
        self.norm = model.model.norm.weight
        self.head = _Linear(model.lm_head, small_m=small_m, weights=weights)
        self._cos = self._sin = None
        # one-token forwards and prompts (17-256 tokens): rounded weights take the kernel for single tokens and
        # their exact float32 copy for prompts; exact weights take whichever of the kernel and torch's matmul is
        # faster on this machine for each (timed once, here: ~1 s for the default target). The target alone, the
        # baseline of every speedup, so runs on the fastest path we have, and prefill does too.
        self.one_row = self.prompt = "torch"
        if small_m and weights != "float32":
            self.one_row = "smallgemm"
        elif small_m:
            lin = self.linears()
            self.set_paths("smallgemm" if _kernel_wins(lin, 1, 5) else "torch",
                           "smallgemm" if _kernel_wins(lin, PROMPT_PROBE, 3) else "torch")

    def linears(self) -> list[_Linear]:
        return [lin for layer in self.layers for lin in layer if isinstance(lin, _Linear)] + [self.head]

    def set_paths(self, one_row: str, prompt: str = "torch") -> None:
        """Multiply one-token forwards, and prompts of up to PROMPT_ROWS tokens, with "smallgemm" or "torch"
        (float32 weights only; 2-16 tokens always take the kernel where it is usable)."""
        for how in (one_row, prompt):
            if how not in ("smallgemm", "torch") or (how == "smallgemm" and self.head.packed is None):
                raise ValueError(f"matmul path {how!r} is not available here")
        if self.weights != "float32":
            raise ValueError("set_paths is for float32 weights (rounded ones always take the kernel)")
        for lin in self.linears():
            lin.min_rows = 1 if one_row == "smallgemm" else smallgemm.MIN_ROWS
            lin.max_rows = PROMPT_ROWS if prompt == "smallgemm" else smallgemm.MAX_ROWS
        self.one_row, self.prompt = one_row, prompt

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

    @torch.no_grad()
    def forward(self, ids: list[int], cache: StaticCache, keep: int, siblings: int = 0) -> torch.Tensor:
        """Logits (keep, V) for the last `keep` of ids, after the cached positions.

        siblings = s > 0: ids = [x, d_1..d_g, s_1..s_s], where each s_j is an alternative to d_1: it sits at
        d_1's position and sees the cache and x only. Their K/V land after d_g's (StaticCache.move puts an
        accepted one in place).
        """
        n, start = len(ids), cache.length
        end = start + n
        if end > cache.k.shape[2]:
            raise ValueError(f"KV cache holds {cache.k.shape[2]} positions; {end} needed")
        if siblings and not 0 < siblings <= n - 2:
            raise ValueError(f"siblings={siblings} needs x and a first draft before them ({n} ids)")
        h = self.embed[torch.tensor(ids, device=self.device)]  # (n, hidden)
        # causal mask over [cache | new]: new token i sees cache and new tokens 0..i
        mask = None
        if n > 1:
            mask = torch.ones(n, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
        if siblings:
            chain = n - siblings
            pos = torch.cat([torch.arange(start, start + chain), torch.full((siblings,), start + 1)]).to(self.device)
            cos, sin = self._cos[pos], self._sin[pos]
            mask[chain:, start + 1:] = False  # a sibling sees cache + x ...
            rows = torch.arange(chain, n, device=self.device)
            mask[rows, start + rows] = True  # ... and itself
        else:
            cos, sin = self._cos[start:end], self._sin[start:end]
        nq, nkv, hd = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim
        bias = None
        if mask is not None and n <= smallgemm.MAX_ROWS and self.device.type == "cpu":
            # a verification: the mask as an additive bias, built once for every layer, (group * n, end)
            group = self.n_heads // self.n_kv
            bias = torch.zeros(n, end, dtype=self.dtype).masked_fill_(~mask, float("-inf")).repeat(group, 1)
        for li, (ln1, qkv_lin, o_lin, ln2, gate_up_lin, down_lin) in enumerate(self.layers):
            x = self._norm(h, ln1)
            qkv = qkv_lin(x)  # (n, nq + 2 nkv)
            q = qkv[:, :nq].view(n, self.n_heads, hd).transpose(0, 1)  # (heads, n, hd)
            k = qkv[:, nq:nq + nkv].view(n, self.n_kv, hd).transpose(0, 1)
            v = qkv[:, nq + nkv:].view(n, self.n_kv, hd).transpose(0, 1)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            cache.k[li, :, start:end] = k
            cache.v[li, :, start:end] = v
            if bias is not None:
                att = self._attend_few(q, cache.k[li, :, :end], cache.v[li, :, :end], bias)
            else:
                att = F.scaled_dot_product_attention(
                    q[None], cache.k[li, :, :end][None], cache.v[li, :, :end][None], attn_mask=mask, enable_gqa=True
                )[0]  # (heads, n, hd)
            h = h + o_lin(att.transpose(0, 1).reshape(n, nq))
            x = self._norm(h, ln2)
            gu = gate_up_lin(x)  # (n, 2 * intermediate)
            gate, up = gu.chunk(2, dim=-1)
            h = h + down_lin(self.act(gate) * up)
        cache.length = end
        return self.head(self._norm(h[-keep:], self.norm))  # (keep, V)


def runner_for(model, fast: bool = True, weights: str = "float32"):
    """The fastest runner that computes this model exactly: FastLlama when supported, else HFRunner.
    weights: float16 / int8 give FastLlama with weights stored so (drafts; see FastLlama) where the kernel is usable.

    FastLlama copies the weights, so it is built once and kept on the model, and rebuilt only when a weight
    has changed since (a training step bumps the parameters' version counters).
    """
    if isinstance(model, (HFRunner, FastLlama)):
        return model
    if not (fast and FastLlama.supports(model)):
        return HFRunner(model)
    key = tuple((p.data_ptr(), p._version) for p in model.parameters())
    slots = model.__dict__.setdefault("_specdistill_fast", {})  # {weights: (key, runner)}: every kind kept
    cached = slots.get(weights)
    if cached is None or cached[0] != key:
        cached = slots[weights] = (key, FastLlama(model, weights))
    return cached[1]
