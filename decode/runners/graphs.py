"""The decoder's GPU path: FastLlama's forward in static shapes, each decode step one CUDA graph replay.

At batch 1 a GPU step of an 8B target is memory-bound (~3.5 ms to stream 14.8 GB on an H200), but eager PyTorch
launches each of the ~1,000 small kernels of a forward from Python and waits on the host in between, which cost
more than the weights themselves (ISSUE 37: 47 ms a target forward in the run). GraphLlama removes that:

  cache   the K/V buffers, (layers, kv_heads, capacity + MAX_GRAPH_TOKENS, head_dim) each, zero-filled, come from a
          pool the runner keeps (a GraphCache hands its buffers back when it is collected); capacity is a power of
          two >= MIN_CAPACITY. A cache takes the largest free buffer that holds it, so one buffer, and the graphs
          captured on it, serves every later generate() up to its size; a longer prompt than any before gets a
          larger buffer (its graphs are captured as they are first needed) and the smaller free ones are let go.
          Rollback is a length change, as FastLlama's StaticCache. The MAX_GRAPH_TOKENS rows past capacity are
          scratch: a graph's warm-up runs write there, never into a live cache.
  step    forward of n <= MAX_GRAPH_TOKENS tokens (a target or draft step, a verification): the ids and the start
          position go into static device buffers and the graph captured for (buffer, width, n, keep, capture)
          replays. Inside it nothing depends on a host value: positions are start + arange(n) on the device, K/V
          are written with index_copy_ at those positions, and attention reads the first `width` columns of the
          buffer under an additive mask built from them (masked rows are zeros, never NaN), one batched matmul per
          K/V head group, so GQA needs no expanded K/V. width = live_width(start + n): the live length rounded up
          to a power of two (>= MIN_CAPACITY), so a step reads at most twice the live cache, not the whole buffer
          (at an 8k-token capacity a 300-token context reads 512 columns, not 8k), and the graphs of a width
          serve every prompt, each captured when first needed.
  tree    a token tree's forward (decode.drafting.tree: a verification, or a draft's level) replays its own graph: the
          rows' rotary offsets and their mask over the last TREE_WINDOW columns are static inputs too (every
          column before the window is visible to every row; a tree whose mask differs there runs eagerly).
  other   a prompt (n > MAX_GRAPH_TOKENS) runs FastLlama's eager forward on the same buffers.
  weights q|k|v and gate|up become one matmul each: the HF parameters are re-pointed into one buffer per layer
          (the same memory, one GEMV instead of two or three).

GraphLlama.static_forward is the graph's body and runs eagerly too, on any device, so the CPU tests check its
positions, masks and rollback against FastLlama's logits (tests/test_graphs.py).
"""

from __future__ import annotations

import os
import weakref

import torch
import torch.nn.functional as F

from decode.runners.fast import FastLlama, StaticCache, _Linear

MAX_GRAPH_TOKENS = 17  # a verification of γ = 16 drafts; longer forwards (prompts) run eagerly
MIN_CAPACITY = 256
TREE_WINDOW = 2 * MAX_GRAPH_TOKENS  # the last columns a captured tree forward's mask may vary over
ENV = "SPECDISTILL_CUDA_GRAPHS"  # "0": the GPU decoder runs FastLlama's eager forward (for comparison)


def graphs_enabled(device: torch.device) -> bool:
    """CUDA graphs on a CUDA device unless SPECDISTILL_CUDA_GRAPHS=0."""
    return device.type == "cuda" and os.environ.get(ENV, "1") != "0"


def tree_window(tree, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A tree forward's (positions (n,), mask (n, start + n)) as a graph's static inputs: (rotary offsets from
    start (n,), mask over the last TREE_WINDOW columns (n, TREE_WINDOW)), or None when some row does not see a
    column before the window (then it runs eagerly)."""
    positions, mask = tree
    lo = start + n - TREE_WINDOW
    if lo > 0 and not bool(mask[:, :lo].all()):
        return None
    window = torch.ones(n, TREE_WINDOW, dtype=torch.bool, device=mask.device)
    part = mask[:, max(lo, 0):]
    window[:, TREE_WINDOW - part.shape[1]:] = part
    return positions - start, window


def capacity_for(max_len: int) -> int:
    """The buffer size a cache of max_len positions takes: the next power of two, at least MIN_CAPACITY."""
    cap = MIN_CAPACITY
    while cap < max_len:
        cap *= 2
    return cap


def live_width(end: int, capacity: int) -> int:
    """The buffer columns a step that ends at position `end` attends over: capacity_for(end), at most the
    buffer's capacity (a power of two too). One graph per width, so a step reads at most twice the live cache."""
    return min(capacity_for(end), capacity)


class _Buffers:
    """Static K/V for every layer, with the graphs captured on them: {(n, keep, capture): _Graph}."""

    def __init__(self, runner: GraphLlama, capacity: int):
        shape = (len(runner.layers), runner.n_kv, capacity + MAX_GRAPH_TOKENS, runner.head_dim)
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: usable in and out of inference mode
            self.k = torch.zeros(shape, dtype=runner.dtype, device=runner.device)
            self.v = torch.zeros_like(self.k)
        self.capacity = capacity
        self.graphs: dict[tuple, _Graph] = {}


class GraphCache(StaticCache):
    """A live StaticCache on pooled buffers (its K/V are the buffers', not its own)."""

    def __init__(self, buffers: _Buffers, max_len: int):  # no StaticCache.__init__: nothing to allocate
        self.buffers, self.k, self.v = buffers, buffers.k, buffers.v
        self.capacity, self.max_len, self.length = buffers.capacity, max_len, 0


class _Graph:
    """One captured forward: static ids (n,) and start () in (a tree's: also offsets (n,) and window mask
    (n, TREE_WINDOW)), static (logits, features) out."""

    def __init__(self, runner: GraphLlama, buffers: _Buffers, width: int, n: int, keep: int, tree: bool = False):
        dev = runner.device
        with torch.inference_mode(False), torch.no_grad():
            self.ids = torch.zeros(n, dtype=torch.long, device=dev)
            # warm-up runs write K/V at start..start+n: the scratch rows past capacity, never a live position
            self.start = torch.full((), buffers.capacity, dtype=torch.long, device=dev)
            self.tree = (torch.arange(n, device=dev), torch.ones(n, TREE_WINDOW, dtype=torch.bool, device=dev)) \
                if tree else None
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # cuBLAS and the allocator settle before capture
            for _ in range(2):
                runner.static_forward(self.ids, self.start, buffers, keep, self.tree, width)
        torch.cuda.current_stream(dev).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):  # a private memory pool: replays in any order cannot clobber another's
            self.out = runner.static_forward(self.ids, self.start, buffers, keep, self.tree, width)

    def run(self, ids, start: int, tree=None):
        self.ids.copy_(ids, non_blocking=True)
        self.start.fill_(start)
        if tree is not None:
            self.tree[0].copy_(tree[0], non_blocking=True)
            self.tree[1].copy_(tree[1], non_blocking=True)
        self.graph.replay()
        return self.out


def fuse(lin: _Linear, modules) -> None:
    """Make an "hf"-layout _Linear over several nn.Linear one matmul: their weights (and biases) are copied into
    one (sum(out), in) buffer and each module's parameter re-pointed to its rows of it, so the model computes
    as before and the memory stays the same."""
    if len(modules) < 2:
        return
    with torch.inference_mode(False):  # ordinary tensors: the model's own forward may run outside inference mode
        w = torch.cat([m.weight.data for m in modules])
        b = torch.cat([m.bias.data for m in modules]) if all(m.bias is not None for m in modules) else None
    row = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight.data = w[row:row + rows]
        if b is not None:
            m.bias.data = b[row:row + rows]
        row += rows
    lin.parts = [(w, b)]


class GraphLlama(FastLlama):
    """FastLlama whose steps are CUDA graph replays (the module docstring). graphs=False keeps the static forward
    but runs it eagerly (the CPU tests; any device)."""

    @torch.no_grad()
    def __init__(self, model, graphs: bool = True):
        super().__init__(model, layout="hf")
        for (_, qkv, _, _, gate_up, _), layer in zip(self.layers, model.model.layers):
            a, m = layer.self_attn, layer.mlp
            fuse(qkv, [a.q_proj, a.k_proj, a.v_proj])
            fuse(gate_up, [m.gate_proj, m.up_proj])
        self.graphs = graphs and self.device.type == "cuda"
        self._free: list[_Buffers] = []  # buffers no live cache holds (with their graphs)
        self._old_tables: list[tuple] = []
        self._steps = torch.arange(MAX_GRAPH_TOKENS, device=self.device)

    def _rope_table(self, n: int) -> None:
        # a captured graph reads the table it was captured with: a grown table must not free the old one
        self._old_tables.append((self._cos, self._sin))
        super()._rope_table(n)

    def new_cache(self, max_len: int) -> GraphCache:
        """A cache on the largest free buffer that holds max_len positions (its graphs come with it), else on a
        new buffer of capacity_for(max_len), the smaller free buffers let go (a larger one serves their prompts)."""
        cap = capacity_for(max_len)
        self._free.sort(key=lambda b: b.capacity)
        if self._free and self._free[-1].capacity >= cap:
            buffers = self._free.pop()
        else:
            self._free.clear()
            buffers = _Buffers(self, cap)
        self._rope_table(buffers.capacity + MAX_GRAPH_TOKENS)
        cache = GraphCache(buffers, max_len)
        weakref.finalize(cache, self._free.append, buffers)  # back to the pool when the cache is gone
        return cache

    @torch.no_grad()
    def forward(self, ids, cache, keep: int, tree=None) -> torch.Tensor:
        """FastLlama.forward's contract; ids: a list or a (n,) device tensor of ids. Graph replay where the
        module docstring says; the result is the caller's own tensor (a copy of the graph's output)."""
        n, start = len(ids), cache.length
        if start + n > cache.capacity:
            raise ValueError(f"KV cache holds {cache.capacity} positions; {start + n} needed")
        static_tree = tree_window(tree, start, n) if tree is not None else None
        if (tree is not None and static_tree is None) or n > MAX_GRAPH_TOKENS or not isinstance(cache, GraphCache):
            return super().forward(ids.tolist() if torch.is_tensor(ids) else ids, cache, keep, tree)
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long)
            ids = ids.pin_memory() if self.graphs and self.device.type == "cuda" else ids
        width = live_width(start + n, cache.capacity)
        if self.graphs:  # captured when a (width, n, keep, capture, tree) is first needed on these buffers
            key = (width, n, keep, self.capture, tree is not None)
            graph = cache.buffers.graphs.get(key)
            if graph is None:
                graph = cache.buffers.graphs[key] = _Graph(self, cache.buffers, width, n, keep, tree is not None)
            logits, features = graph.run(ids, start, static_tree)
        else:
            start_t = torch.full((), start, dtype=torch.long, device=self.device)
            logits, features = self.static_forward(ids.to(self.device), start_t, cache.buffers, keep, static_tree,
                                                   width)
        cache.length = start + n
        if self.capture:
            self.features = features.clone()
        return logits.clone()

    def static_forward(self, ids: torch.Tensor, start: torch.Tensor, buffers: _Buffers, keep: int, tree=None,
                       width: int | None = None):
        """The graph's body: ids (n,) on the device after `start` (a () device tensor) cached positions ->
        (logits (keep, V), features (n, len(capture) * H) or None). Reads no host value from the device.
        tree = (offsets (n,), window (n, TREE_WINDOW) bool) from tree_window: row i at rotary position start +
        offsets[i], seeing every column before the window and the window's columns where window[i] is True.
        width: the buffer columns attention reads (live_width; >= start + n), None = all of them."""
        n, width = ids.shape[0], width or buffers.k.shape[2]
        slots = start + self._steps[:n]  # (n,) where the rows' K/V go
        pos = slots if tree is None else start + tree[0]  # (n,) rotary positions
        h = F.embedding(ids, self.embed)  # (n, H)
        cos, sin = self._cos[pos], self._sin[pos]  # (n, head_dim)
        group = self.n_heads // self.n_kv
        cols = torch.arange(width, device=self.device)
        if tree is None:  # token i sees every position <= start + i: the cache, itself and the new tokens before it
            hidden = cols[None] > slots[:, None]
        else:
            rel = cols - (start + n - TREE_WINDOW)  # (width,) a column's index in the window
            inside = (rel >= 0) & (rel < TREE_WINDOW)
            seen = tree[1][:, rel.clamp(0, TREE_WINDOW - 1)]  # (n, width)
            hidden = (cols[None] >= start + n) | (inside[None] & ~seen)
        bias = torch.zeros(n, width, dtype=self.dtype, device=self.device)
        bias = bias.masked_fill_(hidden, float("-inf")).repeat(group, 1)  # (group * n, width)
        nq, nkv, hd = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim
        captured = []
        for li, (ln1, qkv_lin, o_lin, ln2, gate_up_lin, down_lin) in enumerate(self.layers):
            if li in self.capture:
                captured.append(h)
            qkv = qkv_lin(self._norm(h, ln1))  # (n, nq + 2 nkv)
            q = qkv[:, :nq].view(n, self.n_heads, hd).transpose(0, 1)  # (heads, n, hd)
            k = qkv[:, nq:nq + nkv].view(n, self.n_kv, hd).transpose(0, 1)
            v = qkv[:, nq + nkv:].view(n, self.n_kv, hd).transpose(0, 1)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            buffers.k[li].index_copy_(1, slots, k)
            buffers.v[li].index_copy_(1, slots, v.contiguous())
            att = self._attend_few(q, buffers.k[li, :, :width], buffers.v[li, :, :width], bias)  # (heads, n, hd)
            h = h + o_lin(att.transpose(0, 1).reshape(n, nq))
            gate, up = gate_up_lin(self._norm(h, ln2)).chunk(2, dim=-1)
            h = h + down_lin(self.act(gate) * up)
        features = torch.cat(captured, -1) if self.capture else None
        return self.head(self._norm(h[-keep:], self.norm)), features
