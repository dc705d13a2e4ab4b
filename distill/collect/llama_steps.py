"""Collection's decode steps for a llama-family target: the batch's rows in static shapes, on a GPU each step one
CUDA graph replay.

transformers' own loop (a DynamicCache, a mask grown by torch.cat, each step launched op by op from Python) and a
host read of every row's token and top-k each step ran an 8B-shaped target at 245-275 tok/s at batch 64 on an
H100, ~5% of what streaming its weights allows (docs/results.md). Here:

  prefill  the HF model's own forward over the (B, L) left-padded prompts (its padding, masks and attention), its
           K/V then copied into static buffers (layers, B, kv_heads, capacity + SCRATCH, head_dim); `rows` prompts
           at a time (kv_budget.prefill_rows), long prompts one row at a time, unpadded
  step     one token a row: row b's id at rotary position pos[b], its K/V written at column `slot` (left padding
           aligns the rows, so one column for all), attending to columns valid_from[b]..slot; then
           Outputs.record on the device (greedy, or an exponential race drawn from the steps' own generator).
           Nothing reads a host value, so on CUDA a step is captured once per (width, sampling) and replayed
  width    on CUDA attention reads the first live_width(slot + 1) columns (decode.runners.graphs: a power of two, at
           most the capacity), so a step reads at most twice the live cache, not the whole buffer; one graph a width
  body     on CUDA (step_ops): RMSNorm as F.rms_norm, RoPE over q and k together as one flip and one addcmul, the
           o and down projections' residual as addmm's C. The CPU keeps the decoder's layer code (its outputs as
           before). Per layer at the tiny shape, aten ops a step: docs/data-engine.md
  weights  GraphLlama's: q|k|v and gate|up fused into one matmul each (the model's own memory, re-pointed)

Attention folds the query heads that share a K/V head into the query-length axis: q (B, kv_heads, group, hd)
against K/V (B, kv_heads, columns, hd) under one (B, 1, 1, columns) additive mask. One SDPA call reads each K/V head
once, with no expanded copy, and its fused kernels accumulate the scores in float32.

On CUDA one LlamaSteps (buffers, graphs, Outputs) is pooled on the model: a batch takes it when it has the batch's
rows and at least its capacity (the prompt + new tokens rounded up to ROUND), else it is let go and a new one made
(as GraphLlama.new_cache), so one batch's buffers live at a time (kv_budget plans batches that fit). The columns
past capacity (and Outputs' last one) are scratch, where a graph's warm-up runs write. On the CPU the capacity is
exact (a CPU-sized model's buffers are no reason to round up) and finished rows leave the batch (select). A failed
capture runs the steps eagerly and is counted (eager_fallbacks: collect.json, and the GPU check's collection row).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from decode.drafting.sampling import SamplingParams
from decode.runners.choice import runner_for
from decode.runners.fast import FastLlama
from decode.runners.graphs import GraphLlama, graphs_enabled, live_width
from decode.runners.hf import cache_arg
from distill.collect import kv_budget, step_ops
from distill.collect.outputs import Outputs
from distill.sync_debug import hot_loop

ROW_PREFILL = 1024  # prompts of at least this many tokens (the batch's longest) prefill one row at a time
SCRATCH = 16  # buffer columns past capacity: a graph's warm-up writes the first; 16 keep rows 16-aligned for SDPA
ROUND = 256  # CUDA: buffer capacity in multiples of this many positions
FALLBACKS = "_specdistill_eager_fallbacks"  # on the model: one line per capture that failed
PEAK = "_specdistill_kv_peak"  # on the model: most bytes of K/V (buffers + a prefill's caches) held at once


def supports(model) -> bool:
    """llama-family models on one device (decode.runners.FastLlama's rule)."""
    return FastLlama.supports(model)


def row_cost(model) -> kv_budget.RowCost:
    """What a batch row of this model costs (kv_budget), with this device's capacity rounding."""
    if not supports(model):  # HFSteps: a DynamicCache of exactly the positions, every prompt padded
        return kv_budget.cost_of(model.config, model.dtype, mask_below=2**62)
    return kv_budget.cost_of(model.config, model.dtype, SCRATCH, ROUND if graphs_enabled(model.device) else 1,
                             ROW_PREFILL)


def eager_fallbacks(model) -> list[str]:
    return model.__dict__.get(FALLBACKS, [])


def kv_peak(model) -> int:
    return model.__dict__.get(PEAK, 0)


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
        self.model, self.capacity, self.rows = model, capacity, batch
        self.shape = (max_new_tokens, k, tuple(sorted(eos)))
        self.fused = graphs_enabled(r.device)  # the captured body (step_ops); the CPU keeps the decoder's
        r._rope_table(capacity + 1)  # rotary positions up to capacity
        self.cos, self.sin = r._cos, r._sin  # this table: a captured graph reads it
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: a graph replays outside inference mode
            shape = (len(r.layers), batch, r.n_kv, capacity + SCRATCH, r.head_dim)
            self.k = torch.zeros(shape, dtype=r.dtype, device=r.device)
            self.v = torch.zeros_like(self.k)
            self.pos = torch.zeros(batch, dtype=torch.long, device=r.device)
            self.valid_from = torch.zeros(batch, dtype=torch.long, device=r.device)
            self.slot = torch.zeros((), dtype=torch.long, device=r.device)
            self.cols = torch.arange(capacity + SCRATCH, device=r.device)
            self.out = Outputs(batch, max_new_tokens, k, eos, r.device)
            self.signed_sin = step_ops.signed_sin(self.sin) if self.fused else None
        self.gen = torch.Generator(device=r.device)  # the batch's draws; a captured graph has it registered
        self.graphs: dict[tuple, object] = {}  # (width, sampling) -> a captured step, or False (capture failed)
        self.end = 0  # the host's copy of slot

    @classmethod
    def for_batch(cls, model, batch: int, max_len: int, max_new_tokens: int, k: int, eos: set[int]) -> LlamaSteps:
        """Steps for `batch` rows of up to max_len positions: on CUDA the pooled steps when they hold this batch
        (the same rows, at least its capacity), else new ones, the old let go first; new on the CPU."""
        if not graphs_enabled(model.device):
            return cls(model, batch, max_len, max_new_tokens, k, eos)
        pool = model.__dict__.setdefault("_specdistill_batch_pool", [])
        cap, shape = row_cost(model).capacity(max_len), (max_new_tokens, k, tuple(sorted(eos)))
        fits = [s for s in pool if s.rows == batch and s.capacity >= cap and s.shape == shape]
        steps = max(fits, key=lambda s: s.capacity) if fits else None
        pool.clear()  # one batch's buffers at a time (kv_budget)
        if steps is None:
            if model.device.type == "cuda":
                torch.cuda.empty_cache()  # the old buffers' and graphs' memory, before the new buffers take theirs
            steps = cls(model, batch, cap, max_new_tokens, k, eos)
        pool.append(steps)
        steps.out.reset()
        return steps

    def seed(self, generator: torch.Generator | None) -> torch.Generator:
        """The steps' generator, at `generator`'s state (the caller's stream, drawn here), or seeded from the
        global RNG when there is none."""
        if generator is not None:
            self.gen.set_state(generator.get_state())
        else:
            self.gen.manual_seed(int(torch.randint(2**62, ())))
        return self.gen

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, rows: int = 0) -> torch.Tensor:
        """The HF forward over the prompts (B, L) (left-padded: mask (B, L), positions (B, L)), `rows` of them at a
        time (0: all), its K/V copied into the buffers -> the last position's logits (B, V). Prompts of ROW_PREFILL
        tokens or more run one row at a time: unpadded, attention takes its causal kernel, which skips the blocks
        above the diagonal that a padding mask makes it compute (half the work at 4K tokens, and no (B, L, L)
        mask), and one long row fills a device."""
        (B, L), real = ids.shape, mask.sum(-1)  # real: (B,) prompt tokens of each row
        if L >= ROW_PREFILL:
            logits = torch.cat([self._prefill_row(b, ids[b, L - n:], L) for b, n in enumerate(real.tolist())])
        else:
            rows = rows or B
            logits = torch.cat([self._prefill_rows(slice(b, b + rows), ids, mask, pos) for b in range(0, B, rows)])
        self.pos.copy_(real)  # the next token's rotary position: after the row's own tokens
        self.valid_from.copy_(L - real)
        self.slot.fill_(L)
        self.end = L
        return logits

    def _prefill_rows(self, b: slice, ids, mask, pos) -> torch.Tensor:
        """Rows b of the padded batch through the model, their K/V into columns 0..L-1 -> their logits (rows, V)."""
        cache, L = DynamicCache(config=self.model.config), ids.shape[1]
        logits = self.model(input_ids=ids[b], attention_mask=mask[b], position_ids=pos[b],
                            **{cache_arg(self.model): cache}, use_cache=True, logits_to_keep=1).logits[:, -1]
        for li, layer in enumerate(cache.layers):
            self.k[li, b, :, :L].copy_(layer.keys)
            self.v[li, b, :, :L].copy_(layer.values)
        self._held(cache)
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
        self._held(cache)
        return logits

    def _held(self, cache) -> None:
        """Note the K/V bytes held now: the buffers and a prefill's cache (kv_peak, checked against the budget)."""
        now = 2 * self.k.nbytes + sum(x.keys.nbytes + x.values.nbytes for x in cache.layers)
        self.model.__dict__[PEAK] = max(kv_peak(self.model), now)

    def forward(self, ids: torch.Tensor, width: int) -> torch.Tensor:
        """One token a row: ids (B,) -> logits (B, V), attending over the buffers' first `width` columns; then pos
        and slot move on one. Reads no host value."""
        r, B = self.r, ids.shape[0]
        nq, nkv, hd, group = r.n_heads * r.head_dim, r.n_kv * r.head_dim, r.head_dim, r.n_heads // r.n_kv
        h = F.embedding(ids, r.embed)  # (B, H)
        cos = self.cos[self.pos][:, None]  # (B, 1, hd)
        sin = (self.signed_sin if self.fused else self.sin)[self.pos][:, None]
        cols = self.cols[:width]
        hidden = (cols[None] < self.valid_from[:, None]) | (cols[None] > self.slot)  # (B, width)
        bias = torch.zeros(hidden.shape, dtype=r.dtype, device=r.device).masked_fill_(hidden, float("-inf"))
        bias = bias[:, None, None]  # (B, 1, 1, width): every query head of a row, the same columns
        at = self.slot.view(1)
        norm = step_ops.rms_norm(r.eps) if self.fused else r._norm
        add = step_ops.add_linear if self.fused else (lambda h, lin, x: h + lin(x))
        for li, (ln1, qkv_lin, o_lin, ln2, gate_up_lin, down_lin) in enumerate(r.layers):
            qkv = qkv_lin(norm(h, ln1))  # (B, nq + 2 nkv)
            if self.fused:
                q, k = step_ops.rope_qk(qkv[:, :nq + nkv].view(B, r.n_heads + r.n_kv, hd), cos, sin, r.n_heads)
            else:
                q = r._rope(qkv[:, :nq].view(B, r.n_heads, hd), cos, sin)
                k = r._rope(qkv[:, nq:nq + nkv].view(B, r.n_kv, hd), cos, sin)
            self.k[li].index_copy_(2, at, k[:, :, None])
            self.v[li].index_copy_(2, at, qkv[:, nq + nkv:].reshape(B, r.n_kv, 1, hd))
            # query head j reads K/V head j // group (HF's repeat_kv): (B, kv_heads, group, hd)
            att = F.scaled_dot_product_attention(q.reshape(B, r.n_kv, group, hd), self.k[li, :, :, :width],
                                                 self.v[li, :, :, :width], attn_mask=bias)
            h = add(h, o_lin, att.reshape(B, nq))
            gate, up = gate_up_lin(norm(h, ln2)).chunk(2, dim=-1)
            h = add(h, down_lin, r.act(gate) * up)
        self.pos += 1
        self.slot += 1
        return r.head(norm(h, r.norm))  # (B, V)

    def width(self) -> int:
        """Columns the next step attends over: all of them on the CPU (its results as before), else the live
        width of the step's position (decode.runners.graphs.live_width)."""
        return live_width(self.end + 1, self.capacity) if self.fused else self.capacity + SCRATCH

    def _step(self, sampling: SamplingParams, width: int) -> None:
        self.out.record(self.forward(self.out.next, width), sampling, self.gen)

    @torch.no_grad()
    def advance(self, sampling: SamplingParams) -> None:
        """One decode step: the rows read Outputs.next, Outputs records what they produce (sampled rows draw from
        the steps' generator: seed()). On CUDA it replays the graph of its (width, sampling), captured at the
        first such step, under the sync check (distill.sync_debug)."""
        width = self.width()
        self.end += 1
        if not graphs_enabled(self.r.device):
            return self._step(sampling, width)
        key = (width, sampling)
        if key not in self.graphs:
            self.graphs[key] = self._capture(sampling, width)
        with hot_loop(self.r.device):
            if self.graphs[key] is False:  # capture failed: eager, counted in eager_fallbacks
                return self._step(sampling, width)
            self.graphs[key].replay()

    def _capture(self, sampling: SamplingParams, width: int):
        """A CUDA graph of one step (cuda_graph), or False where capture fails (a line on stderr, and one in
        eager_fallbacks: the steps then run eagerly). Its warm-up and capture runs write the scratch columns; the
        state and the generator's stream they move are put back."""
        o = self.out
        state = (self.pos, self.slot, o.t, o.done, o.length, o.next)
        saved, drawn = [x.clone() for x in state], self.gen.get_state()

        def scratch():
            self.slot.fill_(self.capacity)
            self.pos.zero_()  # a rotary position inside the table
            o.t.fill_(o.max_new_tokens)

        try:
            graph = cuda_graph(lambda: self._step(sampling, width), scratch, self.r.device,
                               None if sampling.greedy else self.gen)
        except RuntimeError as e:
            line = f"collection's decode step (width {width}) could not be captured as a CUDA graph ({str(e)[:120]})"
            print(f"specdistill: {line}; it runs eagerly", file=sys.stderr)
            self.model.__dict__.setdefault(FALLBACKS, []).append(line)
            graph = False
        for x, v in zip(state, saved):
            x.copy_(v)
        self.gen.set_state(drawn)
        return graph

    def select(self, keep: torch.Tensor) -> None:
        """Keep only these rows (keep (B',) indices into the current batch), in that order (CPU: no graph)."""
        self.k, self.v = self.k[:, keep], self.v[:, keep]
        self.pos, self.valid_from = self.pos[keep], self.valid_from[keep]
        self.out.select(keep)


def cuda_graph(step, scratch, device, generator: torch.Generator | None = None):
    """step() captured as a CUDA graph, after two warm-up runs on a side stream (cuBLAS and the allocator settle);
    scratch() before each run points it at the scratch columns. A generator the step draws from is registered
    with the graph, so each replay advances its stream as an eager step would."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            scratch()
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    scratch()
    graph = torch.cuda.CUDAGraph()
    if generator is not None:
        graph.register_generator_state(generator)
    with torch.cuda.graph(graph):  # a private memory pool: the step's temporaries keep their addresses
        step()
    return graph
