"""Token trees: a round drafts several continuations and the target verifies them all in one forward (after
EAGLE-2's dynamic trees; SpecInfer's and Jeon et al. 2024's acceptance rules).

grow: below the last emitted token x (the root), level 0 is the draft's usual first step (it feeds what the draft
      has not seen) and gives x's children; each later level feeds the promising nodes of the level before in one
      draft forward (tree mask, decode.drafting.proposers) and gives their children. A node's priority is its parent's times
      the draft's rank-i probability among the parent's children (rank i: the i-th most probable token when greedy,
      the i-th draw without replacement when sampling; in both cases the i-th largest probability of q_parent, so
      whether a node is drafted never depends on its own token, which keeps sampled trees exact). The tree is the
      `nodes` nodes of highest priority: a child never outranks its parent nor an earlier sibling, so the set is
      closed under parents and each parent keeps a prefix of its children.
verify: [x, n_1..n_N] in one target forward; node i sits at position start + depth_i and sees the cache, its
      ancestors and itself (verify_mask).
walk: greedy: from the root, follow the child whose token is the target's argmax there; the argmax where no child
      matches is the next token. The output is the target's own greedy output.
      sampled: at node u with children x_1..x_k drawn without replacement from q_u, accept x_i with probability
      min(1, p(x_i) / q_i(x_i)), q_i = q_u without x_1..x_{i-1}, renormalised; on rejection p <- norm(max(p - q_i, 0)).
      When no child is accepted the next token is drawn from p. The emitted tokens are distributed as the target's
      own sampling (recursive rejection sampling, Jeon et al. 2024; SpecInfer's multi-draft rule with draws taken
      without replacement).
rollback: both caches keep the accepted path's entries (keep_rows) and forget the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from decode.drafting.sampling import SamplingParams, logits_to_probs, sample
from decode.models.draft_folder import VocabMap


@dataclass
class TokenTree:
    """A drafted tree in target ids, parents before children (node i's parent has a smaller index)."""

    tokens: list[int] = field(default_factory=list)  # (N,)
    parents: list[int] = field(default_factory=list)  # (N,) parent's index, -1 for the root x
    depths: list[int] = field(default_factory=list)  # (N,) 1 for x's children
    # sampling: parent index (-1 = root) -> (V_target,) q_u, the distribution its children were drawn from
    q: dict[int, torch.Tensor] = field(default_factory=dict)
    fed: list[int] = field(default_factory=list)  # (N,) the node's row among the tree rows the draft fed, -1: none

    def children(self, u: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == u]

    def path_tokens(self, path: list[int]) -> list[int]:
        return [self.tokens[i] for i in path]


def verify_mask(parents: list[int], depths: list[int], start: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (N+1,) and mask (N+1, start+N+1) bool for a forward over [x, n_1..n_N] after `start` cached
    positions: row 0 is x; row i+1 is node i, which sees the cache, x, its ancestors and itself."""
    n = len(parents) + 1
    vis = torch.zeros(n, n, dtype=torch.bool)
    vis[:, 0] = True
    for i, p in enumerate(parents):
        if p >= 0:
            vis[i + 1] = vis[p + 1]
        vis[i + 1, i + 1] = True
    mask = torch.cat([torch.ones(n, start, dtype=torch.bool), vis], 1)
    positions = start + torch.tensor([0] + list(depths))
    return positions.to(device), mask.to(device)


def walk_greedy(tree: TokenTree, best: list[int]) -> tuple[list[int], int]:
    """best: (N+1,) the target's argmax at [x, n_1..n_N] -> (accepted path: node indices, next token)."""
    u, path = -1, []
    while True:
        t = best[u + 1]
        match = next((c for c in tree.children(u) if tree.tokens[c] == t), None)
        if match is None:
            return path, t
        path.append(match)
        u = match


def walk_sampled(tree: TokenTree, p: torch.Tensor, generator=None) -> tuple[list[int], int]:
    """p: (N+1, V) the target's probabilities at [x, n_1..n_N] -> (accepted path, next token), by recursive
    rejection sampling (module docstring)."""
    u, path = -1, []
    while True:
        pu, q = p[u + 1], tree.q.get(u)
        moved = False
        for c in tree.children(u):
            x = tree.tokens[c]
            if q[x] > 0 and float(torch.rand((), generator=generator, device=p.device)) < float(pu[x] / q[x]):
                path.append(c)
                u, moved = c, True
                break
            residual = (pu - q).clamp_min(0)
            total = residual.sum()
            pu = residual / total if total > 0 else pu  # total == 0 only if pu == q: then x was accepted surely
            q = q.clone()
            q[x] = 0.0  # the next child was drawn without x
            q = q / q.sum() if q.sum() > 0 else q
        if not moved:
            return path, sample(pu, generator)


def rank_counts(tree: TokenTree, path: list[int]) -> list[tuple[int, int, bool]]:
    """(depth, rank, accepted) for every child the walk offered the target: the children of the root and of each
    accepted node, rank = order among its siblings (0 = the draft's first choice)."""
    out = []
    for d, u in enumerate([-1] + path, start=1):
        taken = path[d - 1] if d <= len(path) else None
        out += [(d, r, c == taken) for r, c in enumerate(tree.children(u))]
    return out


def static_tree(ranks: dict[str, list[int]], nodes: int) -> list[tuple[int, ...]]:
    """A fixed tree of `nodes` nodes from measured acceptance by (depth, rank) ("d.r" -> [accepted, offered]):
    the paths of child ranks with the highest product of acceptance rates, each node after its parent and its
    earlier siblings, in vLLM's `speculative_token_tree` form ([(0,), (1,), (0, 0), ...])."""
    def rate(d: int, r: int) -> float:
        hit, offered = ranks.get(f"{d}.{r}", [0, 0])
        return hit / offered if offered else 0.0

    def value(path: tuple[int, ...]) -> float:
        v = 1.0
        for d, r in enumerate(path, start=1):
            v *= rate(d, r)
        return v

    chosen, frontier = [], [(0,)]  # a path enters the frontier once its parent and earlier sibling are chosen
    while frontier and len(chosen) < nodes:
        best = max(frontier, key=lambda p: (value(p), -len(p)))
        if value(best) <= 0:
            break
        frontier.remove(best)
        chosen.append(best)
        frontier += [best[:-1] + (best[-1] + 1,), best + (0,)]
    return sorted(chosen, key=lambda p: (len(p), p))


def keep_rows(path: list[int]) -> list[int]:
    """Rows of a verification [x, n_1..n_N] the target's cache keeps: x and the accepted path."""
    return [0] + [i + 1 for i in path]


# --- growing a tree from a draft


@dataclass
class _Node:
    token: int  # target id
    parent: int  # pool index, -1 = root
    depth: int
    priority: float
    row: int = -1  # fed row (order in which the draft fed it), -1 = not fed


def _children(logits: torch.Tensor, k: int, sampling: SamplingParams, vocab: VocabMap, generator):
    """(V_draft,) draft logits at a node -> (k' <= k draft ids, the draft's k' largest probabilities, q expanded to
    the target's vocabulary when sampling else None). Greedy: the k most probable ids; sampled: k draws without
    replacement (Gumbel top-k, the same law as drawing one at a time)."""
    if sampling.greedy:
        probs = torch.softmax(logits.float(), -1)
        top = probs.topk(min(k, probs.shape[-1]))
        return top.indices.tolist(), top.values.tolist(), None
    q = logits_to_probs(logits, sampling).float()
    k = min(k, int((q > 0).sum()))
    u = torch.rand(q.shape, generator=generator, device=q.device).clamp_(1e-20, 1.0)
    keys = q.log() - (-u.log()).log()  # log q + Gumbel noise
    ids = keys.topk(k).indices.tolist()
    return ids, q.topk(k).values.tolist(), vocab.expand(q)


def grow(root_logits: torch.Tensor, expand, nodes: int, depth: int, sampling: SamplingParams, vocab: VocabMap,
         generator=None) -> TokenTree:
    """A tree of at most `nodes` nodes and `depth` levels (module docstring).

    root_logits: (V_draft,) the draft's logits at x. expand(frontier) feeds the draft a level's nodes in one
    forward and returns their logits (F, V_draft); frontier: (token, its ancestors' fed rows, depth) per node, fed
    rows counting up from 0 in the order nodes are fed (its own row: the rows fed before + its index).

    Only nodes whose priority is still among the `nodes` best are expanded: no descendant of another can enter
    the tree (it would rank below its ancestor), so the tree is the top `nodes` of the full tree of `nodes`
    children per node and `depth` levels, which is what makes a node's inclusion independent of its token."""
    pool: list[_Node] = []
    dists: dict[int, torch.Tensor] = {}
    fed = 0

    def add(parent: int, logits: torch.Tensor, d: int, prio: float) -> None:
        ids, probs, q = _children(logits, nodes, sampling, vocab, generator)
        if q is not None:
            dists[parent] = q
        pool.extend(_Node(vocab.to_target(j), parent, d, prio * pr) for j, pr in zip(ids, probs))

    add(-1, root_logits, 1, 1.0)
    for level in range(1, depth):
        threshold = _nth_priority(pool, nodes)
        frontier = sorted((i for i, n in enumerate(pool) if n.depth == level and n.priority >= threshold),
                          key=lambda i: (-pool[i].priority, i))[:nodes]
        if not frontier:
            break
        frontier.sort()
        logits = expand([(pool[i].token, _ancestor_rows(pool, i), level) for i in frontier])
        for i, row_logits in zip(frontier, logits):
            pool[i].row, fed = fed, fed + 1
            add(i, row_logits, level + 1, pool[i].priority)
    return _select(pool, dists, nodes)


def _ancestor_rows(pool: list[_Node], i: int) -> list[int]:
    rows, p = [], pool[i].parent
    while p >= 0:
        rows.append(pool[p].row)
        p = pool[p].parent
    return rows


def _nth_priority(pool: list[_Node], nodes: int) -> float:
    if len(pool) < nodes:
        return 0.0
    return sorted((n.priority for n in pool), reverse=True)[nodes - 1]


def _select(pool: list[_Node], dists: dict[int, torch.Tensor], nodes: int) -> TokenTree:
    """The `nodes` pool nodes of highest priority (ties: the earlier, so parents and earlier siblings first), in
    pool order, as a TokenTree."""
    chosen = sorted(sorted(range(len(pool)), key=lambda i: (-pool[i].priority, i))[:nodes])
    index = {p: i for i, p in enumerate(chosen)}
    tree = TokenTree()
    for p in chosen:
        n = pool[p]
        tree.tokens.append(n.token)
        tree.parents.append(index[n.parent] if n.parent >= 0 else -1)
        tree.depths.append(n.depth)
        tree.fed.append(n.row)
    tree.q = {(index[p] if p >= 0 else -1): q for p, q in dists.items() if p < 0 or p in index}
    return tree


def level_inputs(frontier: list, base: int, fed_so_far: int, device) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """A level's draft forward (grow's expand): frontier (token, ancestors' fed rows, depth) per node, after the
    draft's cache holds `base` positions before the tree (x last, at base - 1) and fed_so_far tree rows ->
    (tokens, positions (F,), mask (F, base + fed_so_far + F) bool: the cache before the tree, the node's fed
    ancestors, itself)."""
    f = len(frontier)
    fed_ancestors = [rows for _, rows, _ in frontier]
    mask = torch.zeros(f, base + fed_so_far + f, dtype=torch.bool)
    mask[:, :base] = True
    for i, anc in enumerate(fed_ancestors):
        for r in anc:
            mask[i, base + r] = True
        mask[i, base + fed_so_far + i] = True
    positions = torch.tensor([base - 1 + d for _, _, d in frontier], device=device)
    return [t for t, _, _ in frontier], positions, mask.to(device)
