"""Collection's decode steps for a llama-family target: the batch's rows in static shapes, on a GPU each step one
CUDA graph replay.

transformers' own loop (a DynamicCache, a mask grown by torch.cat, each step launched op by op from Python) and a
host read of every row's token and top-k each step ran an 8B-shaped target at 245-275 tok/s at batch 64 on an
H100, ~5% of what streaming its weights allows (docs/results.md). Here:

  prefill  the HF model's own forward over the (B, L) left-padded prompts (its padding, masks and attention), its
           K/V then copied into static buffers (layers, B, kv_heads, capacity + SCRATCH, head_dim); long prompts
           one row at a time, unpadded
  step     one token a row: row b's id at rotary position pos[b], its K/V written at column `slot` (left padding
           aligns the rows, so one column for all), attending to columns valid_from[b]..slot; then
           Outputs.record on the device. Nothing reads a host value, so on CUDA a greedy step is captured once per
           (batch, capacity) and replayed; the graph reads the ids Outputs.next holds and writes the next ones
  weights  GraphLlama's: q|k|v and gate|up fused into one matmul each (the model's own memory, re-pointed)

Attention folds the query heads that share a K/V head into the query-length axis: q (B, kv_heads, group, hd)
against K/V (B, kv_heads, columns, hd) under one (B, 1, 1, columns) additive mask. One SDPA call reads each K/V head
once, with no expanded copy, and its fused kernels accumulate the scores in float32.

On CUDA the buffers (and their graph and Outputs) are pooled by (batch, capacity): capacity is a power of two
>= prompt + new tokens (decode.runners.graphs.capacity_for), so every batch of one size reuses them. The columns past
capacity (and Outputs' last one) are scratch, where a graph's warm-up runs write. On the CPU the capacity is exact
(a CPU-sized model's buffers are no reason to round up) and finished rows leave the batch (select).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from decode.drafting.sampling import SamplingParams
from decode.runners.choice import runner_for
from decode.runners.fast import FastLlama
from decode.runners.graphs import GraphLlama, capacity_for, graphs_enabled
from decode.runners.hf import cache_arg
from distill.collect.outputs import Outputs

ROW_PREFILL = 1024  # prompts of at least this many tokens (the batch's longest) prefill one row at a time
SCRATCH = 16  # buffer columns past capacity: a graph's warm-up writes the first; 16 keep rows 16-aligned for SDPA


def supports(model) -> bool:
    """llama-family models on one device (decode.runners.FastLlama's rule)."""
    return FastLlama.supports(model)


def batch_runner(model) -> GraphLlama:
    """The model's GraphLlama, built once: on CUDA the decoder's own (runner_for), so the weights are fused once;
    elsewhere one that runs eagerly, kept on the model."""
    if graphs_enabled(model.device):
        return runner_for(model)
    runner = model.__dict__.get("_specdistill_batch")
    if runner is None:
        runner = model.__dict__["_specdistill_batch"] = GraphLlama(model, graphs=False)
    return runner


class LlamaSteps:
    """One batch's decode steps (see the module docstring). for_batch() builds or reuses one; then prefill(),
    advance() per token, select() to drop rows (CPU)."""

    def __init__(self, model, batch: int, capacity: int, max_new_tokens: int, k: int, eos: set[int]):
        r = self.r = batch_runner(model)
        self.model, self.capacity = model, capacity
        r._rope_table(capacity + 1)  # rotary positions up to capacity
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: a graph replays outside inference mode
            shape = (len(r.layers), batch, r.n_kv, capacity + SCRATCH, r.head_dim)
            self.k = torch.zeros(shape, dtype=r.dtype, device=r.device)
            self.v = torch.zeros_like(self.k)
            self.pos = torch.zeros(batch, dtype=torch.long, device=r.device)
            self.valid_from = torch.zeros(batch, dtype=torch.long, device=r.device)
            self.slot = torch.zeros((), dtype=torch.long, device=r.device)
            self.cols = torch.arange(capacity + SCRATCH, device=r.device)
            self.out = Outputs(batch, max_new_tokens, k, eos, r.device)
        self.graph = None

    @classmethod
    def for_batch(cls, model, batch: int, max_len: int, max_new_tokens: int, k: int, eos: set[int]) -> LlamaSteps:
        """Steps for `batch` rows of up to max_len positions: pooled on the model on CUDA, new on the CPU."""
        if not graphs_enabled(model.device):
            return cls(model, batch, max_len, max_new_tokens, k, eos)
        pool = model.__dict__.setdefault("_specdistill_batch_pool", {})
        key = (batch, capacity_for(max_len), max_new_tokens, k, tuple(sorted(eos)))
        if key not in pool:
            pool[key] = cls(model, batch, key[1], max_new_tokens, k, eos)
        steps = pool[key]
        steps.out.reset()
        return steps

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The HF forward over the prompts (B, L) (left-padded: mask (B, L), positions (B, L)), its K/V copied into
        the buffers -> the last position's logits (B, V). Prompts of ROW_PREFILL tokens or more run one row at a
        time: unpadded, attention takes its causal kernel, which skips the blocks above the diagonal that a padding
        mask makes it compute (half the work at 4K tokens, and no (B, L, L) mask), and one long row fills a device."""
        L, real = ids.shape[1], mask.sum(-1)  # real: (B,) prompt tokens of each row
        if L >= ROW_PREFILL:
            logits = torch.cat([self._prefill_row(b, ids[b, L - n:], L) for b, n in enumerate(real.tolist())])
        else:
            cache = DynamicCache(config=self.model.config)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, **{cache_arg(self.model): cache},
                                use_cache=True, logits_to_keep=1).logits[:, -1]
            for li, layer in enumerate(cache.layers):
                self.k[li, :, :, :L].copy_(layer.keys)
                self.v[li, :, :, :L].copy_(layer.values)
        self.pos.copy_(real)  # the next token's rotary position: after the row's own tokens
        self.valid_from.copy_(L - real)
        self.slot.fill_(L)
        return logits

    def _prefill_row(self, b: int, ids: torch.Tensor, L: int) -> torch.Tensor:
        """Row b's prompt ids (n,) alone, its K/V written right-aligned at columns L - n..L - 1 (where the padded
        batch puts them) -> its last logits (1, V)."""
        cache, n = DynamicCache(config=self.model.config), ids.shape[0]
        logits = self.model(input_ids=ids[None], **{cache_arg(self.model): cache}, use_cache=True,
                            logits_to_keep=1).logits[:, -1]
        for li, layer in enumerate(cache.layers):
            self.k[li, b, :, L - n:L].copy_(layer.keys[0])
            self.v[li, b, :, L - n:L].copy_(layer.values[0])
        return logits

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """One token a row: ids (B,) -> logits (B, V); then pos and slot move on one. Reads no host value."""
        r, B = self.r, ids.shape[0]
        nq, nkv, hd, group = r.n_heads * r.head_dim, r.n_kv * r.head_dim, r.head_dim, r.n_heads // r.n_kv
        h = F.embedding(ids, r.embed)  # (B, H)
        cos, sin = r._cos[self.pos][:, None], r._sin[self.pos][:, None]  # (B, 1, hd)
        hidden = (self.cols[None] < self.valid_from[:, None]) | (self.cols[None] > self.slot)  # (B, capacity + SCRATCH)
        bias = torch.zeros(hidden.shape, dtype=r.dtype, device=r.device).masked_fill_(hidden, float("-inf"))
        bias = bias[:, None, None]  # (B, 1, 1, capacity + SCRATCH): every query head of a row, the same columns
        at = self.slot.view(1)
        for li, (ln1, qkv_lin, o_lin, ln2, gate_up_lin, down_lin) in enumerate(r.layers):
            qkv = qkv_lin(r._norm(h, ln1))  # (B, nq + 2 nkv)
            q = r._rope(qkv[:, :nq].view(B, r.n_heads, hd), cos, sin)
            k = r._rope(qkv[:, nq:nq + nkv].view(B, r.n_kv, hd), cos, sin)
            self.k[li].index_copy_(2, at, k[:, :, None])
            self.v[li].index_copy_(2, at, qkv[:, nq + nkv:].reshape(B, r.n_kv, 1, hd))
            # query head j reads K/V head j // group (HF's repeat_kv): (B, kv_heads, group, hd)
            att = F.scaled_dot_product_attention(q.view(B, r.n_kv, group, hd), self.k[li], self.v[li], attn_mask=bias)
            h = h + o_lin(att.reshape(B, nq))
            gate, up = gate_up_lin(r._norm(h, ln2)).chunk(2, dim=-1)
            h = h + down_lin(r.act(gate) * up)
        self.pos += 1
        self.slot += 1
        return r.head(r._norm(h, r.norm))  # (B, V)

    def _step(self, sampling: SamplingParams, generator=None) -> None:
        self.out.record(self.forward(self.out.next), sampling, generator)

    @torch.no_grad()
    def advance(self, sampling: SamplingParams, generator=None) -> None:
        """One decode step: the rows read Outputs.next, Outputs records what they produce. A greedy step on CUDA
        replays the batch's graph (captured at the first one)."""
        if not (sampling.greedy and graphs_enabled(self.r.device)):
            return self._step(sampling, generator)
        if self.graph is None:
            self.graph = self._capture(sampling)
        if self.graph is False:  # capture failed once: eager from then on
            return self._step(sampling, generator)
        self.graph.replay()

    def _capture(self, sampling: SamplingParams):
        """A CUDA graph of one greedy step (cuda_graph), or False where capture fails (a line on stderr; the steps
        then run eagerly). Its warm-up and capture runs write the scratch columns; the state they move is put back."""
        o = self.out
        state = (self.pos, self.slot, o.t, o.done, o.length, o.next)
        saved = [x.clone() for x in state]

        def scratch():
            self.slot.fill_(self.capacity)
            self.pos.zero_()  # a rotary position inside the table
            o.t.fill_(o.max_new_tokens)

        try:
            graph = cuda_graph(lambda: self._step(sampling), scratch, self.r.device)
        except RuntimeError as e:
            print(f"specdistill: collection's decode step could not be captured as a CUDA graph ({str(e)[:120]}); "
                  "it runs eagerly", file=sys.stderr)
            graph = False
        for x, v in zip(state, saved):
            x.copy_(v)
        return graph

    def select(self, keep: torch.Tensor) -> None:
        """Keep only these rows (keep (B',) indices into the current batch), in that order (CPU: no graph)."""
        self.k, self.v = self.k[:, keep], self.v[:, keep]
        self.pos, self.valid_from = self.pos[keep], self.valid_from[keep]
        self.out.select(keep)


def cuda_graph(step, scratch, device):
    """step() captured as a CUDA graph, after two warm-up runs on a side stream (cuBLAS and the allocator settle);
    scratch() before each run points it at the scratch columns."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            scratch()
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    scratch()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a private memory pool: the step's temporaries keep their addresses
        step()
    return graph
