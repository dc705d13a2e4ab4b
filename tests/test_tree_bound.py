"""scripts/tree_bound.py's counting (issue 39's bound on what any token tree buys a draft): the rounds it
simulates, the trees it enumerates and the oracle's node budget, on rank sequences small enough to check by hand."""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tree_bound.py"


@pytest.fixture(scope="module")
def tb():
    spec = importlib.util.spec_from_file_location("tree_bound", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trees_are_the_ordered_trees_within_the_depth(tb):
    assert len(tb.trees(3, 3)) == 5  # Catalan(3)
    assert len(tb.trees(6, 6)) == 132  # Catalan(6)
    assert set(tb.trees(2, 2)) == {frozenset({(0,), (1,)}), frozenset({(0,), (0, 0)})}
    assert set(tb.trees(2, 1)) == {frozenset({(0,), (1,)})}
    for paths in tb.trees(6, 3):  # every node's parent and earlier sibling are in the tree
        assert len(paths) == 6 and max(map(len, paths)) <= 3
        for p in paths:
            assert len(p) == 1 or p[:-1] in paths
            assert p[-1] == 0 or p[:-1] + (p[-1] - 1,) in paths


def test_rounds_accept_what_each_tree_holds(tb):
    assert [tb.chain(2)(w) for w in ([0, 0, 1], [1, 0], [0, 3], [0])] == [2, 0, 1, 1]
    assert [tb.oracle(6, 2)(w) for w in ([1, 2], [4, 0], [5, 0], [0, 0, 0])] == [2, 2, 1, 2]
    assert tb.oracle(6, 4)([tb.NEVER, 0]) == 0
    held = tb.static(frozenset({(0,), (1,), (0, 0)}))
    assert [held(w) for w in ([1, 0], [0, 0, 0], [2])] == [1, 2, 0]


def test_tau_counts_tokens_per_round_and_ends_with_the_targets_own_token(tb):
    # 5 tokens all the draft's first choice: a round of 2 accepted + 1, then one of 1 accepted + the last
    assert tb.tau([[0, 0, 0, 0, 0]], tb.chain(2)) == 2.5
    assert tb.tau([[1, 1, 1]], tb.chain(2)) == 1.0
    assert tb.tau([[1, 1, 1]], tb.oracle(6, 2)) == 3.0  # one round: 2 accepted (2 + 2 nodes) + the last token
