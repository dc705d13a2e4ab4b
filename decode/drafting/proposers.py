"""Where a round's proposal d_1..d_g comes from, and what each source does once the target has accepted some of it.

    ContextLookup  the tokens that followed the context's suffix earlier in the context (decode.drafting.lookup); no model
                   runs, and q is one-hot when sampling, so the same acceptance rule keeps the output exact
    DraftChain     the draft model, γ greedy or sampled steps (the dynamic schedule stops at a doubtful token);
                   with `nodes` > 0 a token tree of up to that many nodes, γ levels deep (decode.drafting.tree)
    HeadChain      a feature head (decode.models.feature_head): its first step reads the target's features at the
                   verified positions (left by the verification itself, runner.capture), later steps its own
                   output; a token tree too with `nodes` > 0 (each node reads its parent's output)

All are a Proposer: generate() asks them in turn for a proposal and tells each, after every round (whoever
proposed), what the target kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from decode.drafting.lookup import continuation
from decode.drafting.prompt_read import wall_clock
from decode.drafting.sampling import SamplingParams, logits_to_probs, sample
from decode.drafting.tree import TokenTree, grow, level_inputs
from decode.models.draft_folder import VocabMap


class Clock:
    """Seconds spent in a phase (the draft's steps, a target forward), added to a Stats field. On a CPU: the wall
    clock around it. On a GPU: CUDA events recorded around it and read once, when generate() ends (settle), so
    that timing adds no host sync to a round."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple] = []  # (start event, end event, stats, field) not read yet

    def start(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started, stats, *names: str) -> None:
        """Add the time since `started` to each of the Stats fields `names`."""
        if not self.cuda:
            elapsed = time.perf_counter() - started
            for name in names:
                setattr(stats, name, getattr(stats, name) + elapsed)
            return
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks += [(started, event, stats, name) for name in names]

    def settle(self) -> None:
        for started, ended, stats, name in self.marks:
            ended.synchronize()
            setattr(stats, name, getattr(stats, name) + started.elapsed_time(ended) / 1e3)
        self.marks.clear()


@dataclass
class Proposal:
    """One round's proposal in target ids; empty: the round verifies the last token alone (the target alone)."""

    tokens: list[int] = field(default_factory=list)  # d_1..d_g (a tree: its nodes, tree.tokens)
    q: torch.Tensor | None = None  # (g, V_target) proposal probs when sampling, else None (a chain's)
    tree: TokenTree | None = None  # a token tree instead of a chain (decode.drafting.tree)
    path: list[int] = field(default_factory=list)  # a tree: the accepted nodes (filled by generate())
    source: str = ""  # "draft" | "lookup" ("" when empty)
    # a greedy chain drafted on the GPU path: d_1..d_g as a (g,) device tensor; `tokens` is filled from it by the
    # round's one host read (decode.drafting.speculative.verify_on_device)
    device_tokens: torch.Tensor | None = None


class Proposer(Protocol):
    def propose(self, ctx: list[int], g: int, room: int) -> Proposal | None:
        """A proposal of about g tokens (never more than room) after ctx (prompt + output, target ids), or None."""

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        """The round verified `proposal`; the target kept `kept` (d_1..d_n, or a tree's path) and emitted nxt after
        it."""


class ContextLookup:
    """Proposes what followed the latest earlier occurrence of the context's last `min_ngram` (or more) tokens."""

    def __init__(self, min_ngram: int, tokens: int, sampling: SamplingParams, vocab_size: int, device: torch.device):
        self.min_ngram, self.tokens, self.sampling = min_ngram, tokens, sampling
        self.vocab_size, self.device = vocab_size, device

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal | None:
        """Up to max(lookup_tokens, g) tokens (at most `room`); None when the context has no match.
        Lookup tokens cost no draft forward, so a proposal may be longer than the draft's g."""
        tokens = continuation(ctx, self.min_ngram, min(max(self.tokens, g), room))
        if not tokens:
            return None
        q = None
        if not self.sampling.greedy:  # a deterministic proposal: q is one-hot, (g, V)
            q = torch.zeros(len(tokens), self.vocab_size, device=self.device)
            q[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal(tokens, q, source="lookup")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        """Nothing to do: the next lookup reads the context as it is then."""


def choose(logits: torch.Tensor, sampling: SamplingParams, confidence: float, generator, vocab: VocabMap,
           qs: list) -> tuple[int, float]:
    """A draft's next token from its (V_draft,) logits: argmax when greedy, else a sample from q (appended to qs,
    expanded to the target's vocabulary) -> (draft id, its probability; 1.0 when greedy and no confidence is
    needed)."""
    if sampling.greedy:
        j = int(logits.argmax())
        return j, float(torch.softmax(logits.float(), -1)[j]) if confidence else 1.0
    q = logits_to_probs(logits, sampling)
    j = sample(q, generator)
    qs.append(vocab.expand(q))
    return j, float(q[j])


class DraftChain:
    """The draft model, holding its own KV cache. `pending`: target ids the draft has not seen yet (1 token, 2 after
    a full accept, more after rounds it did not propose); the next proposal starts by feeding them."""

    def __init__(self, draft, vocab: VocabMap, prompt_ids: list[int], first: int, max_len: int,
                 sampling: SamplingParams, confidence: float, nodes: int, generator, stats, on_device=False):
        self.draft, self.vocab, self.sampling, self.generator, self.stats = draft, vocab, sampling, generator, stats
        self.confidence, self.nodes = confidence, nodes
        # greedy chains on the GPU path: each argmax feeds the next step on the device, no host read (propose)
        self.on_device = on_device and sampling.greedy and not confidence and not nodes
        self.cache = draft.new_cache(max_len)
        t0 = stats.clock.start()
        draft.forward(vocab.to_draft(prompt_ids), self.cache, 1)
        stats.clock.stop(t0, stats, "draft_seconds", "draft_prompt_seconds")
        stats.draft_forwards += 1
        self.pending = [first]
        self.base = 0  # a tree round: the draft cache's length before its tree rows
        self.behind = 0  # tokens emitted in rounds that drafted nothing (the target alone's): read apart (_catch_up)
        self.reads: list[tuple[int, float]] = []  # (tokens, wall seconds) of those reads, for the schedule

    @property
    def unread(self) -> int:
        """Tokens the draft reads apart before its next proposal (a catch-up; 0 for a round's usual 1-2)."""
        return len(self.pending) - 1 if self.behind >= 2 else 0

    def _catch_up(self) -> None:
        """After rounds it did not draft, read what they emitted in one forward of its own, timed apart (the
        schedule counts it as a one-off, not as a drafted round's cost); the next step feeds the last token."""
        if self.behind < 2:
            return
        ids, self.pending, self.behind = self.pending[:-1], self.pending[-1:], 0
        t0, wall = self.stats.clock.start(), wall_clock(self.draft.device)
        self.draft.forward(self.vocab.to_draft(ids), self.cache, 1)
        self.stats.clock.stop(t0, self.stats, "draft_seconds", "draft_catchup_seconds")
        self.stats.draft_forwards += 1
        self.reads.append((len(ids), wall_clock(self.draft.device) - wall))

    def drain_reads(self) -> list[tuple[int, float]]:
        reads, self.reads = self.reads, []
        return reads

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal:
        """Run the draft up to g steps from `pending` -> d_1..d_g (target ids) and their draft distributions q
        (g, V_target) when sampling; with nodes > 0 a token tree g levels deep instead. The last proposal is
        never fed back: the cache ends holding pending + d_1..d_{g-1} (a tree: pending + the expanded nodes)."""
        self._catch_up()
        if self.nodes:
            return self._propose_tree(g)
        if self.on_device:
            return self._propose_on_device(g)
        tokens, qs, inp = [], [], self.pending
        t0 = self.stats.clock.start()
        for _ in range(g):
            logits = self.draft.forward(self.vocab.to_draft(inp), self.cache, 1)[-1]  # (V_draft,)
            j, conf = choose(logits, self.sampling, self.confidence, self.generator, self.vocab, qs)
            tokens.append(self.vocab.to_target(j))
            inp = tokens[-1:]
            if conf < self.confidence:  # dynamic schedule: a doubtful token ends the proposal
                break
        self.stats.clock.stop(t0, self.stats, "draft_seconds")
        self.stats.draft_forwards += len(tokens)
        return Proposal(tokens, torch.stack(qs) if qs else None, source="draft")

    def _propose_tree(self, depth: int) -> Proposal:
        """decode.drafting.tree.grow: level 0 feeds `pending`, each later level its expanded nodes in one forward."""
        t0 = self.stats.clock.start()
        root = self.draft.forward(self.vocab.to_draft(self.pending), self.cache, 1)[-1]  # (V_draft,) at x
        self.base, fed = self.cache.get_seq_length(), [0]

        def expand(frontier):
            tokens, pos, mask = level_inputs(frontier, self.base, fed[0], root.device)
            fed[0] += len(tokens)
            self.stats.draft_forwards += 1
            self.stats.tree_levels += 1
            return self.draft.forward(self.vocab.to_draft(tokens), self.cache, len(tokens), tree=(pos, mask))

        tree = grow(root, expand, self.nodes, depth, self.sampling, self.vocab, self.generator)
        self.stats.clock.stop(t0, self.stats, "draft_seconds")
        self.stats.draft_forwards += 1
        self.stats.tree_levels += 1
        return Proposal(tree.tokens, tree=tree, source="draft")

    def _propose_on_device(self, g: int) -> Proposal:
        """g greedy steps whose ids never leave the device: Proposal.device_tokens (g,) target ids, its host
        list left for the verification's single read (decode.drafting.speculative)."""
        t0 = self.stats.clock.start()
        inp, drafted = self.vocab.to_draft(self.pending), []
        for _ in range(g):
            j = self.draft.forward(inp, self.cache, 1)[-1].argmax()  # () draft id, on the device
            drafted.append(j)
            inp = j.view(1)
        self.stats.clock.stop(t0, self.stats, "draft_seconds")
        self.stats.draft_forwards += g
        return Proposal(device_tokens=self.vocab.targets(torch.stack(drafted)), source="draft")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        """Roll the draft cache back to what it saw of `kept`; the rest of kept and nxt become pending."""
        if proposal.source != "draft":  # the draft did not run: everything emitted is new to it
            self.pending = self.pending + kept + [nxt]
            self.behind += 0 if proposal.source else len(kept) + 1  # a lookup round is lookup's own cost
            return
        if proposal.tree is not None:  # the path's expanded nodes (a prefix of it) stay, at their path positions
            rows = []
            for i in proposal.path:
                if proposal.tree.fed[i] < 0:
                    break
                rows.append(proposal.tree.fed[i])
            self.cache.keep(self.base, rows)
            self.pending = kept[len(rows):] + [nxt]
            return
        g = len(proposal.tokens)
        seen = min(len(kept), g - 1)  # the cache holds pending + d_1..d_{g-1}; kept is d_1..d_n
        if g - 1 - seen:
            self.cache.crop(-(g - 1 - seen))
        self.pending = kept[seen:] + [nxt]


class HeadChain:
    """A feature head, holding its own KV cache. Head position p pairs token x_{p+1} with the target's features f_p.
    `pending`: pairs the head has not read yet (the prompt's after prefill; after a round, (f_x, d_1), ...,
    (f_{d_n}, next) from the verification's features); a proposal starts by reading them, fused by fc."""

    def __init__(self, head, vocab: VocabMap, target, prompt_ids: list[int], first: int, max_len: int,
                 sampling: SamplingParams, confidence: float, nodes: int, generator, stats):
        self.head, self.vocab, self.target, self.sampling = head, vocab, target, sampling
        self.confidence, self.nodes, self.generator, self.stats = confidence, nodes, generator, stats
        self.cache = head.new_cache(max_len)
        self.ids, self.feats = prompt_ids[1:] + [first], target.features  # (P,), (P, F) from the target's prefill
        self.drafted = 0  # head positions the last proposal added past the pending pairs (advance drops them)

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal:
        """Read the pending pairs, then up to g steps, each reading the last drafted token and the head's own
        output -> d_1..d_g (target ids), q (g, V_target) when sampling; with nodes > 0 a token tree g levels deep.
        The cache ends holding the pending pairs and the drafted positions, which advance() drops again."""
        t0 = self.stats.clock.start()
        out, logits = self.head.step(self.ids, self.head.fuse(self.feats), self.cache)  # (n, H), (V_draft,)
        self.ids, self.feats = [], self.feats[:0]
        proposal = self._tree(out[-1], logits, g) if self.nodes else self._chain(out, logits, g)
        self.stats.clock.stop(t0, self.stats, "draft_seconds")
        return proposal

    def _chain(self, out: torch.Tensor, logits: torch.Tensor, g: int) -> Proposal:
        tokens, qs = [], []
        while True:
            j, conf = choose(logits, self.sampling, self.confidence, self.generator, self.vocab, qs)
            tokens.append(self.vocab.to_target(j))
            if len(tokens) == g or conf < self.confidence:
                break
            out, logits = self.head.step(tokens[-1:], out[-1:], self.cache)
        self.stats.draft_forwards += len(tokens)
        self.drafted = len(tokens) - 1
        return Proposal(tokens, torch.stack(qs) if qs else None, source="draft")

    def _tree(self, last_out: torch.Tensor, root: torch.Tensor, depth: int) -> Proposal:
        """decode.drafting.tree.grow: a node at depth d reads its token and its parent's output (x's: last_out, (H,))."""
        base, outs = self.cache.length, []  # outs: (H,) head output of each fed tree row

        def expand(frontier):
            tokens, pos, mask = level_inputs(frontier, base, len(outs), root.device)
            hid = torch.stack([outs[rows[0]] if rows else last_out for _, rows, _ in frontier])  # (F, H)
            out, logits = self.head.step(tokens, hid, self.cache, tree=(pos, mask))  # (F, H), (F, V_draft)
            outs.extend(out)
            self.stats.draft_forwards += 1
            self.stats.tree_levels += 1
            return logits

        tree = grow(root, expand, self.nodes, depth, self.sampling, self.vocab, self.generator)
        self.stats.draft_forwards += 1
        self.stats.tree_levels += 1
        self.drafted = len(outs)
        return Proposal(tree.tokens, tree=tree, source="draft")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        """Drop the drafted positions (they read the head's own output, not the target's features); the
        verification's features at [x, d_1..d_n] (a tree: x and its accepted path) pair with d_1..d_n, nxt as the
        next pending."""
        if proposal.source == "draft" and self.drafted:
            self.cache.crop(-self.drafted)
        self.drafted = 0
        n = len(kept)
        self.ids = self.ids + kept + [nxt]
        self.feats = torch.cat([self.feats, self.target.features[:n + 1]])
