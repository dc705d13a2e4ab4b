"""How much τ any token tree of N nodes can buy a standalone draft (docs/results.md, issue 39): an upper bound.

Greedy decoding emits the target's own output y_0, y_1, ..., and a round's draft always sees the true prefix, so
the draft's rank of y_{t+i} at depth i + 1 of a round starting at t is the rank of y_{t+i} in the draft's
distribution after y_0..y_{t+i-1}: one draft forward over prompt + output gives every rank. A tree in which each
parent keeps a prefix of its draft-ranked children (decode.drafting.tree's trees, EAGLE-2's top-k expansion) accepts a
depths only if it holds the path of ranks r_t..r_{t+a-1}, which takes sum(r + 1) nodes. So per round:

    chain γ:            a = the leading zero ranks, at most γ
    oracle (N, D):      the longest a <= D with sum(r_t..r_{t+a-1} + 1) <= N: a tree that knew the target's tokens
    best static (N, D): the one fixed tree of N nodes (of every such tree: ordered trees, Catalan(N) shapes) with
                        the highest τ on these very prompts (in-sample, so optimistic too)

and τ = tokens emitted / rounds. No timing: τ only.

    python scripts/tree_bound.py --draft RUN/train/checkpoint-000550/hf --limit 24 --max-new-tokens 64 --nodes 6 --depth 2 4
"""
from __future__ import annotations

import argparse
import functools

import torch

from decode.bench import encode_all
from decode.drafting.speculative import generate
from decode.models.draft_folder import VocabMap
from decode.models.feature_head import FeatureHead
from decode.models.targets import eos_ids, load_draft, load_target
from decode.options import DecodeOptions
from decode.runners.choice import runner_for
from distill.prompts import load_prompts

NEVER = 10**6  # rank of a token outside the draft's vocabulary: no tree holds it


@torch.no_grad()
def ranks_along_output(draft, vocab: VocabMap, prompt: list[int], out: list[int]) -> list[int]:
    """(len(out),) the draft's rank of out[t] after prompt + out[:t] (0 = its first choice), as the decoder feeds
    it (context outside a reduced vocabulary reads as draft id 0)."""
    runner = runner_for(draft.model)
    ids = vocab.to_draft(prompt + out[:-1])
    cache = runner.new_cache(len(ids) + 1)
    logits = runner.forward(ids, cache, len(out)).float()  # (len(out), V_draft)
    wanted = vocab.teacher(torch.tensor(out)).tolist()  # draft ids, -1 outside the draft vocabulary
    return [NEVER if y < 0 else int((row > row[y]).sum()) for row, y in zip(logits, wanted)]


def tau(ranks: list[list[int]], accepted) -> float:
    """τ over every prompt's rank sequence; accepted(window) -> depths a round starting there accepts."""
    tokens = rounds = 0
    for r in ranks:
        t = 0
        while t < len(r):
            a = min(accepted(r[t:]), len(r) - t - 1)  # the last token of the output is always a target's own
            t, tokens, rounds = t + a + 1, tokens + a + 1, rounds + 1
    return tokens / rounds


def chain(gamma: int):
    return lambda w: next((i for i, x in enumerate(w[:gamma]) if x), min(gamma, len(w)))


def oracle(nodes: int, depth: int):
    def accepted(w):
        a, used = 0, 0
        while a < min(depth, len(w)) and used + w[a] + 1 <= nodes:
            used, a = used + w[a] + 1, a + 1
        return a
    return accepted


@functools.cache
def trees(nodes: int, depth: int) -> tuple[frozenset, ...]:
    """Every tree of `nodes` nodes and at most `depth` levels below the root whose parents keep a prefix of their
    children, as the set of rank paths it holds."""
    def forests(n: int, d: int) -> list[tuple[tuple[int, ...], ...]]:  # ordered forests of n nodes: path sets
        if n == 0:
            return [()]
        if d == 0:
            return []
        out = []
        for size in range(1, n + 1):  # the first tree takes `size` nodes, the rest of the forest n - size
            for sub in forests(size - 1, d - 1):
                for rest in forests(n - size, d):
                    first = ((0,),) + tuple((0,) + p for p in sub)
                    out.append(first + tuple((p[0] + 1,) + p[1:] for p in rest))
        return out
    return tuple(frozenset(f) for f in forests(nodes, depth))


def static(paths: frozenset):
    def accepted(w):
        a = 0
        while a < len(w) and tuple(w[:a + 1]) in paths:
            a += 1
        return a
    return accepted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", required=True, help="a standalone draft folder")
    ap.add_argument("--limit", type=int, default=24, help="held-out prompts, taken in turn from each category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--depth", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args()
    target, tok = load_target(args.target, "float32")
    draft = load_draft(args.draft, target, tok)
    if isinstance(draft.model, FeatureHead):
        raise SystemExit(f"{args.draft} is a feature head: this bound reads a standalone draft's own forward")
    vocab = VocabMap(draft.vocab_map, target.config.vocab_size)  # the identity for a full-vocabulary draft
    rows = load_prompts("heldout", limit=args.limit, spread=True)
    ranks = []
    for prompt in encode_all(rows, tok, args.max_new_tokens, target.config.max_position_embeddings):
        out, _ = generate(target, None, prompt, args.max_new_tokens, DecodeOptions(), eos_token_ids=eos_ids(target, tok))
        ranks.append(ranks_along_output(draft, vocab, prompt, out))
    flat = [x for r in ranks for x in r]
    print(f"{len(ranks)} prompts, {len(flat)} tokens; the draft's rank of the target's token: "
          + ", ".join(f"{k}: {sum(x == k for x in flat) / len(flat):.3f}" for k in range(5))
          + f", outside its vocabulary: {sum(x == NEVER for x in flat) / len(flat):.3f}")
    base = tau(ranks, chain(2))
    print(f"chain γ 2: τ {base:.4f}")
    for d in args.depth:
        best = max(trees(args.nodes, d), key=lambda paths: tau(ranks, static(paths)))
        b, o = tau(ranks, static(best)), tau(ranks, oracle(args.nodes, d))
        print(f"depth {d}: chain τ {tau(ranks, chain(d)):.4f}; {args.nodes} nodes: best static τ {b:.4f} "
              f"({b / base:.3f}x chain γ 2) {sorted(best, key=lambda p: (len(p), p))}; "
              f"oracle τ {o:.4f} ({o / base:.3f}x)")


if __name__ == "__main__":
    main()
