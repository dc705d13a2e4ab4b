"""decode.runners.graphs: the GPU decoder's static-shape forward, run eagerly on the CPU (graphs=False), against FastLlama's
eager forward and HF: positions from a device tensor, the mask over the live width, K/V written in place, rollback
by a length change, fused q|k|v and gate|up, the buffer pool, graphs per live width. A CUDA graph replays exactly this body (decode.runners.graphs)."""

from __future__ import annotations

import gc

import pytest
import torch

from decode.drafting import speculative
from decode.drafting.tree import keep_rows, level_inputs, verify_mask
from decode.options import DecodeOptions
from decode.runners import graphs
from decode.runners.fast import FastLlama
from decode.runners.graphs import MAX_GRAPH_TOKENS, MIN_CAPACITY, GraphLlama, capacity_for, live_width

FAST_FORWARD = FastLlama.forward


@pytest.fixture
def pair(tiny_llama):
    """(GraphLlama eager, FastLlama) over two copies of one GQA llama (GraphLlama re-points its model's weights)."""
    kw = dict(layers=3, hidden=64, num_attention_heads=8, num_key_value_heads=2)
    return GraphLlama(tiny_llama(3, **kw), graphs=False), FastLlama(tiny_llama(3, **kw))


def _steps(runner, prompt, chunks, crop_after=None):
    """Prefill `prompt`, then forward each chunk (all logits); crop_after=(i, n): crop n positions after chunk i."""
    cache = runner.new_cache(len(prompt) + sum(map(len, chunks)) + 4)
    out = [runner.forward(prompt, cache, 1)]
    for i, chunk in enumerate(chunks):
        out.append(runner.forward(chunk, cache, len(chunk)))
        if crop_after and crop_after[0] == i:
            cache.crop(-crop_after[1])
    return out, cache


def test_static_steps_match_fastllama_after_a_prompt_and_a_rollback(pair):
    graph, fast = pair
    prompt = list(range(5, 30))  # 25 tokens > MAX_GRAPH_TOKENS: the eager prefill on the same buffers
    chunks = [[3], [7, 8, 9, 10, 11], [12], [40, 41, 42]]
    crop = (1, 3)  # a verification that kept 2 of its 5 tokens: the next step overwrites the dropped positions
    a, ca = _steps(graph, prompt, chunks, crop)
    b, cb = _steps(fast, prompt, chunks, crop)
    assert ca.length == cb.length == 25 + 1 + 5 - 3 + 1 + 3
    for x, y in zip(a, b):  # float32, matmuls in another order (HF's (out, in) weights vs FastLlama's (in, out) copy)
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5 * float(y.abs().max()))
    assert len(prompt) > MAX_GRAPH_TOKENS and all(len(c) <= MAX_GRAPH_TOKENS for c in chunks)


def test_tree_forwards_take_the_static_path_and_match_fastllama(pair, monkeypatch):
    """A tree verification and a draft-style level whose rows see tree rows already in the cache (decode.drafting.tree):
    the static forward (what a graph replays) gives FastLlama's logits, and keep() leaves the same cache."""
    graph, fast = pair
    eager = []
    monkeypatch.setattr(FastLlama, "forward", lambda self, *a, **k: eager.append(1) or FAST_FORWARD(self, *a, **k))
    prompt = list(range(5, 30))
    parents, depths = [-1, -1, 0, 0, 2], [1, 1, 2, 2, 3]
    results = []
    for runner in (graph, fast):
        cache = runner.new_cache(64)
        runner.forward(prompt, cache, 1)
        start = cache.length
        tree = runner.forward([3, 5, 6, 7, 8, 9], cache, 6, tree=verify_mask(parents, depths, start, runner.device))
        cache.keep(start, keep_rows([0, 2]))  # x, then nodes 0 and 2: three rows kept
        base = cache.length
        # a draft's levels after it: two children of the last kept row, then one child of each, which sees the
        # cache before the tree and its parent's fed row only
        tokens, pos, mask = level_inputs([(11, [], 1), (12, [], 1)], base, 0, runner.device)
        level1 = runner.forward(tokens, cache, 2, tree=(pos, mask))
        tokens, pos, mask = level_inputs([(13, [0], 2), (14, [1], 2)], base, 2, runner.device)
        level2 = runner.forward(tokens, cache, 2, tree=(pos, mask))
        results.append((tree, level1, level2))
        if runner is graph:
            assert len(eager) == 1  # its prefill: every tree forward took the static path
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5 * float(y.abs().max()))


def test_static_forward_matches_hf_logits(tiny_llama):
    model = tiny_llama(4, layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2)
    ids = torch.randint(0, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        ref = model(ids).logits[0]
    runner = GraphLlama(model, graphs=False)
    cache = runner.new_cache(32)
    got = torch.cat([runner.forward(ids[0, :4].tolist(), cache, 4), runner.forward(ids[0, 4:].tolist(), cache, 8)])
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the fused buffers leave the HF model computing what it did
        torch.testing.assert_close(model(ids).logits[0], ref, rtol=0, atol=0)


def test_bf16_static_steps_stay_close_to_the_eager_forward(tiny_llama):
    kw = dict(layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2, init=0.05)  # a trained model's scale
    graph = GraphLlama(tiny_llama(5, **kw).to(torch.bfloat16), graphs=False)
    fast = FastLlama(tiny_llama(5, **kw).to(torch.bfloat16))
    a, _ = _steps(graph, list(range(20)), [[1], [2, 3, 4]])
    b, _ = _steps(fast, list(range(20)), [[1], [2, 3, 4]])
    for x, y in zip(a, b):
        assert x.dtype == torch.bfloat16
        torch.testing.assert_close(x.float(), y.float(), rtol=0.02, atol=0.02 * float(y.abs().max()))


def test_buffers_are_pooled_by_capacity_and_reused_after_a_cache_is_gone(pair):
    graph, _ = pair
    assert capacity_for(1) == capacity_for(MIN_CAPACITY) == MIN_CAPACITY and capacity_for(MIN_CAPACITY + 1) == 512
    first = graph.new_cache(100)
    buffers = first.buffers
    other = graph.new_cache(120)  # a second live cache (a draft that is the target itself) gets its own buffers
    assert other.buffers is not buffers and other.capacity == first.capacity == MIN_CAPACITY
    del first
    gc.collect()
    assert graph.new_cache(200).buffers is buffers
    graph.forward([5] * 250, other, 1)
    with pytest.raises(ValueError, match="holds 256 positions; 260 needed"):  # the scratch rows are not for use
        graph.forward([5] * 10, other, 1)


def test_the_decoder_on_the_static_path_keeps_the_targets_output(tiny_llama, monkeypatch):
    read_once = []
    real = speculative.verify_on_device
    monkeypatch.setattr(speculative, "verify_on_device", lambda *a: read_once.append(1) or real(*a))
    kw = dict(layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2)
    target = GraphLlama(tiny_llama(6, **kw), graphs=False)
    draft = GraphLlama(tiny_llama(7, **kw), graphs=False)
    prompt = list(range(3, 23))
    alone, _ = speculative.generate(FastLlama(tiny_llama(6, **kw)), None, prompt, 24)
    # gamma 3: the chain drafted on the device, verified with one host read a round; a tree (the eager forward on
    # the same buffers); lookup: host-side proposals between device-side ones
    for options in (DecodeOptions(gamma=3), DecodeOptions(gamma=2, tree_nodes=3), DecodeOptions(gamma=2, lookup=2)):
        out, stats = speculative.generate(target, draft, prompt, 24, options)
        assert out == alone and stats.rounds > 0 and stats.proposed > 0
        assert bool(read_once) == (options.tree_nodes == 0)  # a tree is drafted and walked on the host
        read_once.clear()
    out, stats = speculative.generate(target, target, prompt, 24, DecodeOptions(gamma=4))  # draft = target
    assert out == alone and stats.acceptance_rate == 1.0


def test_static_steps_at_a_long_context_read_the_live_width_and_match_fastllama(tiny_llama):
    """A 3,000-token prompt on a 4,096-capacity buffer: steps attend over live_width columns (4,096 here; 256 for a
    short prompt on the same buffer), and give FastLlama's logits."""
    kw = dict(layers=2, hidden=64, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096)
    graph, fast = GraphLlama(tiny_llama(8, **kw), graphs=False), FastLlama(tiny_llama(8, **kw))
    assert live_width(3001, 4096) == 4096 and live_width(200, 4096) == MIN_CAPACITY and live_width(257, 8192) == 512
    prompt = torch.randint(0, 97, (3000,), generator=torch.Generator().manual_seed(8)).tolist()
    chunks = [[3], [7, 8, 9, 10, 11], [12]]
    a, ca = _steps(graph, prompt, chunks, (1, 2))
    b, _ = _steps(fast, prompt, chunks, (1, 2))
    assert ca.capacity == 4096
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5 * float(y.abs().max()))


def test_graphs_are_captured_per_live_width_and_serve_later_prompts(pair, monkeypatch):
    """The graph path's bookkeeping without CUDA (a stand-in runs the static body where a graph would replay):
    one graph per (width, n, keep) captured when first needed, a later prompt on the same buffer captures none,
    and a longer prompt than any before takes a larger buffer (the smaller free one is let go)."""
    graph, fast = pair
    made = []

    class Captured:  # what graphs._Graph replays, run eagerly
        def __init__(self, runner, buffers, width, n, keep, tree=False):
            made.append((width, n, keep))
            self.args = (runner, buffers, keep, width)

        def run(self, ids, start, tree=None):
            runner, buffers, keep, width = self.args
            return runner.static_forward(ids, torch.tensor(start), buffers, keep, tree, width)

    monkeypatch.setattr(graphs, "_Graph", Captured)
    graph.graphs = True
    prompt = [i % 97 for i in range(250)]  # 250 tokens: the steps cross from width 256 to 512
    out, cache = _steps(graph, prompt, [[3], [4, 5, 6, 7, 8], [9], [10]])
    ref, _ = _steps(fast, prompt, [[3], [4, 5, 6, 7, 8], [9], [10]])
    assert made == [(256, 1, 1), (256, 5, 5), (512, 1, 1)] and cache.capacity == 512
    for x, y in zip(out, ref):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5 * float(y.abs().max()))
    buffers = cache.buffers
    del cache
    gc.collect()
    _, again = _steps(graph, list(range(5, 95)), [[3], [4]])  # a shorter prompt: the same buffer, no capture
    assert again.buffers is buffers and len(made) == 3
    del again
    gc.collect()
    _, longer = _steps(graph, [i % 97 for i in range(600)], [[3]])
    assert longer.capacity == 1024 and longer.buffers is not buffers and graph._free == []
    assert made[3:] == [(1024, 1, 1)]
