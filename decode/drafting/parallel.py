"""Parallel drafting (PARD, An et al. 2025): one draft forward proposes a whole round.

A parallel draft is a standalone causal LM trained with a mask token (decode.models: `mask_token_id` / `pard_token` in
its config.json, where vLLM and TensorRT-LLM read it). A round feeds it what it has not seen of the context (the
last emitted token, and the tokens the target accepted last round) followed by γ-1 copies of the mask:

    [.., x_t | m_1 .. m_{γ-1}]      the output at x_t is q_1 (for x_{t+1}); at mask m_j it is q_{j+1} (x_{t+1+j})

so q_k depends on the context alone, never on the tokens drafted before it. Its cache keeps the real tokens only:
the masks' rows are cropped right after the forward (the next round writes over them), so nothing is rolled back
after verification: the accepted tokens and the target's next token are simply fed at the next round's start.

    chain   d_k = argmax q_k (greedy), or a draw from q_k (sampling; q_k kept for the acceptance rule), for every k
            at once; the dynamic schedule cuts the chain after its first token below the confidence
    tree    decode.drafting.tree.grow with the children of every depth-d node taken from q_{d+1}: the same
            rule (and the same lossless walk) as a chain draft's tree, but the levels come from the one forward
            (its `expand` costs nothing)

Verification and acceptance are the decoder's own (decode.drafting.speculative). Lossless: the rejection rule
min(1, p_k(d_k) / q_k(d_k)) at position k needs only that d_k was drawn from a q_k fixed before the target's
randomness is used; q_k may depend on anything drafted or read before, here on the context alone
(docs/decoder.md has the short proof). The mask's own column is never proposed (its logit is set to -inf first).
"""

from __future__ import annotations

import torch

from decode.drafting.proposers import DraftChain, Proposal, choose
from decode.drafting.sampling import SamplingParams
from decode.drafting.tree import grow
from decode.models.draft_folder import VocabMap

MASK_FIELDS = ("mask_token_id", "pard_token")  # config.json fields naming the mask token, in vLLM's order of reading


def mask_token(config) -> int | None:
    """The draft id of a parallel draft's mask token (config.json `mask_token_id`, else `pard_token`); None for a
    chain draft (a config without either, or without a config)."""
    for name in MASK_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def block_logits(logits: torch.Tensor, mask: int, vocab: VocabMap) -> torch.Tensor:
    """(g, V_draft) logits -> the same with the mask's column at -inf (never proposed); a full-vocabulary draft whose
    mask sits past the target's vocabulary (an id appended at the end) loses that column instead."""
    logits = logits.clone()
    if mask < logits.shape[-1]:
        logits[:, mask] = float("-inf")
    if not vocab.reduced and logits.shape[-1] > vocab.target_vocab:
        logits = logits[:, :vocab.target_vocab]
    return logits


class ParallelDraft:
    """A parallel draft holding its own KV cache of real tokens. `pending`: target ids the draft has not read yet
    (after prefill the first token; after a round the accepted tokens and the next one; more after rounds another
    proposer made). A Proposer (decode.drafting.proposers)."""

    def __init__(self, draft, vocab: VocabMap, prompt_ids: list[int], first: int, max_len: int,
                 sampling: SamplingParams, confidence: float, nodes: int, generator, stats, mask: int,
                 on_device: bool = False):
        # the chain's start (the prompt read, `pending`, the GPU path's device argmax), then the mask
        DraftChain.__init__(self, draft, vocab, prompt_ids, first, max_len, sampling, confidence, nodes, generator,
                            stats, on_device)
        self.mask = mask

    unread, _catch_up, drain_reads = DraftChain.unread, DraftChain._catch_up, DraftChain.drain_reads

    def forward(self, g: int) -> torch.Tensor:
        """One draft forward over pending + (g-1) masks -> (g, V_draft) logits, q_1..q_g before any mask is cut;
        the cache then holds the real tokens only."""
        ids = self.vocab.to_draft(self.pending) + [self.mask] * (g - 1)
        t0 = self.stats.clock.start()
        logits = self.draft.forward(ids, self.cache, g)
        if g > 1:
            self.cache.crop(-(g - 1))
        self.stats.clock.stop(t0, self.stats, "draft_seconds")
        self.stats.draft_forwards += 1
        self.pending = []
        return block_logits(logits, self.mask, self.vocab)

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal:
        """d_1..d_g (target ids) from one forward, q (g, V_target) when sampling; with nodes > 0 a token tree g
        levels deep from the same forward."""
        self._catch_up()
        z = self.forward(g)
        if self.nodes:
            return self._tree(z)
        if self.on_device:
            return Proposal(device_tokens=self.vocab.targets(z.argmax(-1)), source="draft")
        tokens, qs = [], []
        for row in z:  # each position's choice reads its own q_k only: no position waits on another's token
            j, conf = choose(row, self.sampling, self.confidence, self.generator, self.vocab, qs)
            tokens.append(self.vocab.to_target(j))
            if conf < self.confidence:  # dynamic schedule: nothing after a doubtful token is proposed
                break
        return Proposal(tokens, torch.stack(qs[:len(tokens)]) if qs else None, source="draft")

    def _tree(self, z: torch.Tensor) -> Proposal:
        """decode.drafting.tree.grow over the per-position logits: depth-d nodes get their children from z[d]."""
        def expand(frontier):
            return z[frontier[0][2]].expand(len(frontier), -1)  # every frontier node is at the same depth

        tree = grow(z[0], expand, self.nodes, len(z), self.sampling, self.vocab, self.generator)
        self.stats.tree_levels += 1  # one draft forward drafted every level
        return Proposal(tree.tokens, tree=tree, source="draft")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        """The draft's cache never holds a drafted token: what the target kept and its next token are fed next."""
        self.pending = self.pending + kept + [nxt]
        self.behind += 0 if proposal.source else len(kept) + 1  # the target alone's rounds: read apart
