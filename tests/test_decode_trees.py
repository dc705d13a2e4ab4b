"""Token trees (decode.drafting.tree): the tree forward computes each path's chain logits on every runner, the caches keep
exactly the accepted path, greedy output is the target's own, and the refusals say why."""

import pytest
import torch

import decode.drafting.speculative as spec
from decode import DecodeOptions, generate
from decode.drafting.sampling import SamplingParams
from decode.drafting.tree import TokenTree, grow, keep_rows, verify_mask, walk_greedy
from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.runners.fast import FastLlama
from decode.runners.hf import HFRunner

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# x's children a (0), b (1); a's children c (2), d (3); c's child e (4): paths x-a-c-e, x-a-d, x-b
PARENTS, DEPTHS, TOKENS = [-1, -1, 0, 0, 2], [1, 1, 2, 2, 3], [5, 6, 7, 8, 9]


def _path(i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = PARENTS[i]
    return out[::-1]


@pytest.mark.parametrize("runner", ["fast", "hf"])
def test_tree_forward_equals_each_paths_chain_forward(runner, tiny_llama):
    """Every node's logits equal a plain forward of [x, its path], and keep() leaves the cache a chain forward of
    the accepted path would (the next forward's logits agree)."""
    model = tiny_llama(2)
    r = FastLlama(model) if runner == "fast" else HFRunner(model)
    ctx, x = [3, 9, 27, 4], 11

    def after_ctx():
        cache = r.new_cache(32)
        r.forward(ctx, cache, 1)
        return cache

    cache = after_ctx()
    pos, mask = verify_mask(PARENTS, DEPTHS, len(ctx), model.device)
    tree = r.forward([x] + TOKENS, cache, 1 + len(TOKENS), tree=(pos, mask))  # (6, V)
    for i in range(len(TOKENS)):
        ref = r.forward([x] + [TOKENS[j] for j in _path(i)], after_ctx(), 1 + len(_path(i)))
        torch.testing.assert_close(tree[1 + i], ref[-1], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(tree[0], ref[0], rtol=1e-4, atol=1e-4)
    cache.keep(len(ctx), keep_rows([0, 3]))  # x-a-d accepted
    got = r.forward([12], cache, 1)
    ref_cache = after_ctx()
    r.forward([x, TOKENS[0], TOKENS[3]], ref_cache, 1)
    torch.testing.assert_close(got, r.forward([12], ref_cache, 1), rtol=1e-4, atol=1e-4)


def test_walk_follows_the_targets_argmax():
    tree = TokenTree(TOKENS, PARENTS, DEPTHS)
    best = [5, 8, 0, 0, 0, 0]  # x -> a (5), a -> d (8), d's argmax 0: next token
    assert walk_greedy(tree, best) == ([0, 3], 0)
    assert walk_greedy(tree, [6, 0, 1, 0, 0, 0]) == ([1], 1)  # b, then b's row (2) says 1
    assert walk_greedy(tree, [4, 0, 0, 0, 0, 0]) == ([], 4)  # no child: the target's own token


def test_grow_keeps_the_best_nodes_closed_under_parents():
    """A confident draft grows a deep chain with branches where it is unsure; every node's parent is in the tree,
    a parent comes before its children, and each parent keeps its most probable children first."""
    vocab = VocabMap(None, 10)
    # level logits: at x the draft is unsure between 3 and 4; after either, sure of 5; after 5, sure of 6
    table = {(): [3, 4], (3,): [5], (4,): [5], (3, 5): [6], (4, 5): [6]}

    def logits_for(path):
        z = torch.full((10,), -9.0)
        for rank, t in enumerate(table.get(tuple(path), [0])):
            z[t] = 4.0 - 0.3 * rank
        return z

    paths = {}

    def expand(frontier):
        out = []
        for token, rows, _ in frontier:
            path = [paths[r] for r in reversed(rows)] + [token]
            paths[len(paths)] = token
            out.append(logits_for(path))
        return torch.stack(out)

    tree = grow(logits_for([]), expand, 5, 3, SamplingParams(), vocab)
    assert len(tree.tokens) == 5
    for i, p in enumerate(tree.parents):
        assert p < i and (p < 0 or tree.depths[p] == tree.depths[i] - 1)
    assert tree.tokens[:2] == [3, 4] and tree.parents[:2] == [-1, -1]  # both first choices, most probable first
    assert [tree.tokens[i] for i in range(5) if tree.depths[i] == 2] == [5, 5]  # the confident second level
    assert max(tree.depths) == 3


@pytest.mark.parametrize("runner", ["fast", "hf"])
def test_greedy_trees_are_the_target_alone(runner, tiny_llama, noisy_copy, monkeypatch):
    """Output == target alone at several node budgets, with rounds that accept a path through a child other than
    the first and rounds that accept two or more tokens (else the test lost its point)."""
    seen = {"branch": 0, "deep": 0}

    def walk(tree, best):
        path, nxt = walk_greedy(tree, best)
        seen["branch"] += any(tree.children(tree.parents[i])[0] != i for i in path)
        seen["deep"] += len(path) >= 2
        return path, nxt

    monkeypatch.setattr(spec, "walk_greedy", walk)
    for seed in range(3):
        target = tiny_llama(seed)
        draft = noisy_copy(target, seed)
        wrap = HFRunner if runner == "hf" else (lambda m: m)
        prompt = [1 + seed, 7, 11]
        want, _ = generate(target, None, prompt, 20)
        for nodes, gamma in ((1, 1), (4, 2), (6, 3)):
            out, st = generate(wrap(target), wrap(draft), prompt, 20, DecodeOptions(gamma=gamma, tree_nodes=nodes, schedule="constant"))
            assert out == want, (seed, nodes, gamma)
            assert st.tree_rounds >= st.rounds - 1 and st.tree_nodes <= nodes * st.tree_rounds  # the last: no room
    assert seen["branch"] and seen["deep"], seen


def test_a_wide_tree_fits_the_cache_to_the_last_token(tiny_llama, noisy_copy):
    target = tiny_llama(1)
    want, _ = generate(target, None, [4, 5, 6], 12)
    out, _ = generate(target, noisy_copy(target, 1), [4, 5, 6], 12, DecodeOptions(gamma=4, tree_nodes=40, schedule="constant"))
    assert out == want


def test_trees_refused_where_they_cannot_work(tiny_llama):
    target = tiny_llama(0)
    with pytest.raises(UserError, match="--tree-nodes must be in 0..64"):
        DecodeOptions(tree_nodes=65, schedule="constant")
    with pytest.raises(UserError, match="schedule constant"):
        DecodeOptions(tree_nodes=4, schedule="heuristic")
    window = tiny_llama(0, sliding_window=8, use_sliding_window=True, max_window_layers=0)
    with pytest.raises(UserError, match="sliding"):
        generate(HFRunner(window), target, [1, 2, 3], 4, DecodeOptions(gamma=2, tree_nodes=3, schedule="constant"))
