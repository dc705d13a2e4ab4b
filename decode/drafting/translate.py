"""A draft with its own tokenizer in the decoder (universal assisted generation; docs/decoder.md, "Drafts with another
tokenizer"). The draft reads and writes text; the target verifies its own tokens, so the loop, the acceptance rules
and losslessness are decode.drafting.speculative's, unchanged.

    DraftText    the draft's KV cache holds draft ids that spell the committed text: the prompt as the draft reads it
                 (decode.models.vocab_pair.draft_prompt), then the bytes of every token the target emitted. sync()
                 feeds what the cache lacks and re-encodes the last LOOKBEHIND positions with it, so a word the
                 target's tokens split (' jum' + 'ps') reaches the draft as its own tokenizer writes it (' jumps').
    TextChain    greedy chains: γ draft steps -> their text -> the target's tokens for that text alone, encoded after
                 the committed text. Where a target token straddles the cut (the target wrote ' fo', the draft ' fox')
                 the draft's text past the cut ('x') becomes target tokens that continue ' fo'; transformers
                 re-encodes a window across the cut and drops that text. γ draft steps propose any number of target
                 tokens (Stats.draft_tokens counts the steps behind them; the cost model takes the ratio).
    SharedChain  sampling, and token trees: the draft's logits restricted to the shared vocabulary (vocab_pair.SharedVocab),
                 so every draft step proposes one target token, and q (zero outside the shared ids) enters the usual
                 rejection rule exactly as it was sampled: lossless (the proof is in docs/decoder.md).
A pair sharing too little of its vocabulary (vocab_pair.MIN_COVERAGE) decodes greedy chains; sampling and trees are
refused in one line (check_call).
"""

from __future__ import annotations

import torch

from decode.drafting.proposers import Proposal, choose
from decode.drafting.tree import grow, level_inputs
from decode.errors import UserError
from decode.models.vocab_pair import (
    MIN_COVERAGE,
    OtherTokenizerDraft,
    draft_prompt,
    encode_text,
    joined,
    split_utf8,
    token_bytes,
)
from decode.runners.choice import runner_for

LOOKBEHIND = 4  # positions re-encoded with new text: a word split at the cut is rarely longer
DRAFT_PER_TARGET = 4  # draft cache positions budgeted per target position (GPT-2 needs ~1.3 per Gemma token)


def check_call(draft: OtherTokenizerDraft, options) -> None:
    """Sampling and token trees take their proposals from the shared vocabulary: refused where it covers too little."""
    if options.sampling.greedy and not options.tree_nodes:
        return
    coverage = draft.shared.coverage
    if coverage < MIN_COVERAGE:
        what = f"--tree-nodes {options.tree_nodes}" if options.tree_nodes else "sampling (--temperature > 0)"
        raise UserError(f"{what} needs proposals from the vocabulary both tokenizers share, and only {coverage:.0%} of "
                        f"a reference text's target tokens are in it (at least {MIN_COVERAGE:.0%}: α can be no higher); "
                        "use --temperature 0 --tree-nodes 0 (greedy chains read the draft's text whatever its vocabulary)")


def proposer(draft: OtherTokenizerDraft, options, confidence: float, prompt_ids: list[int], first: int, max_len: int,
             generator, stats):
    """The proposer generate() asks (decode.drafting.proposers.Proposer): TextChain for greedy chains, else SharedChain."""
    runner = runner_for(draft.model, weights=options.draft_weights)
    margin = max(4 * options.gamma, options.tree_nodes * options.gamma) + 2  # a round's most fed proposals
    text = DraftText(runner, draft, prompt_ids, first, max_len - len(prompt_ids), margin, stats)
    if options.sampling.greedy and not options.tree_nodes:
        return TextChain(text, draft, confidence, stats)
    return SharedChain(text, draft, options.sampling, confidence, options.tree_nodes, generator, stats)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


class DraftText:
    """The draft's cache and the text it spells. ids / pieces: each position's draft id and bytes (the prompt's
    positions, below `floor`, are never re-encoded); text: the bytes the target emitted; covered: how much of text
    the cache holds (a character cut in two waits for its other bytes); tail: positions past the covered text
    (proposals fed but not yet verified)."""

    def __init__(self, runner, draft: OtherTokenizerDraft, prompt_ids: list[int], first: int, new_len: int,
                 margin: int, stats):
        self.runner, self.stats, self.tok = runner, stats, draft.tokenizer
        self.table, self.t_table = token_bytes(draft.tokenizer), token_bytes(draft.target_tokenizer)
        prompt = draft_prompt(prompt_ids, draft.target_tokenizer, draft.tokenizer)
        limit = getattr(runner.config, "max_position_embeddings", None) or len(prompt) + DRAFT_PER_TARGET * new_len
        self.capacity, self.margin = min(limit, len(prompt) + DRAFT_PER_TARGET * new_len), margin
        self.ids, self.pieces, self.floor = list(prompt), [b""] * len(prompt), len(prompt)
        self.text, self.covered, self.tail = bytearray(), 0, 0
        self.full = len(prompt) + margin > self.capacity  # the draft's context cannot hold the prompt: it never proposes
        self.cache = runner.new_cache(self.capacity)
        if not self.full:
            self.forward(prompt, prompt=True)
        self.commit([first])

    def forward(self, ids: list[int], tree=None, prompt: bool = False) -> torch.Tensor:
        """One draft forward over ids (timed and counted) -> logits (len(ids) when a tree, else 1, V_draft)."""
        t0 = self.stats.clock.start()
        logits = self.runner.forward(ids, self.cache, len(ids) if tree is not None else 1, tree=tree)
        self.stats.clock.stop(t0, self.stats, "draft_seconds", *(("draft_prompt_seconds",) if prompt else ()))
        self.stats.draft_forwards += 1
        return logits

    def _crop(self, n: int) -> None:
        if n > 0:
            self.cache.crop(-n)
            del self.ids[-n:], self.pieces[-n:]

    def _append(self, ids: list[int]) -> None:
        self.ids += ids
        self.pieces += [(self.table[j] if j < len(self.table) else None) or b"" for j in ids]  # specials: no text

    def commit(self, target_ids: list[int]) -> None:
        """The target emitted these: their bytes join the text; the fed proposals that spell its next bytes stay in
        the cache, the rest leave it."""
        self.text += joined(self.t_table, target_ids)
        start, kept = len(self.ids) - self.tail, 0
        for piece in self.pieces[start:]:
            if not piece or self.text[self.covered:self.covered + len(piece)] != piece:
                break
            self.covered += len(piece)
            kept += 1
        self._crop(self.tail - kept)
        self.tail = 0

    def sync(self) -> torch.Tensor | None:
        """Feed the committed text the cache lacks -> the draft's (V_draft,) logits after it; None once the draft's
        context is full (the target decodes alone from there)."""
        if self.full:
            return None
        start = max(self.floor, len(self.ids) - LOOKBEHIND)
        while start > self.floor and self.pieces[start][:1] and self.pieces[start][0] & 0xC0 == 0x80:
            start -= 1  # the re-encoded window begins on a whole character
        old = b"".join(self.pieces[start:])
        text, used = split_utf8(old + bytes(self.text[self.covered:]))
        new = encode_text(self.tok, text)
        if start + len(new) + self.margin > self.capacity:
            self.full = True
            return None
        same = common_prefix(self.ids[start:], new)
        self._crop(len(self.ids) - start - same)
        self.covered += used - len(old)
        if same == len(new):  # nothing new to feed: the last position again, for its logits
            return self._refeed()
        self._append(new[same:])
        return self.forward(new[same:])[-1]

    def _refeed(self) -> torch.Tensor:
        j, piece = self.ids[-1], self.pieces[-1]
        self._crop(1)
        self.ids.append(j)
        self.pieces.append(piece)
        return self.forward([j])[-1]

    def pending(self) -> bool:
        """Committed bytes the cache lacks after sync (a character whose last bytes the target has not emitted)."""
        return self.covered < len(self.text)

    def feed_proposal(self, j: int) -> torch.Tensor:
        """Feed the draft's own proposal j -> its (V_draft,) logits after it."""
        self._append([j])
        self.tail += 1
        return self.forward([j])[-1]

    def keep_tree(self, base: int, rows: list[int], draft_ids: list[int]) -> None:
        """A tree round: the cache keeps the accepted path's fed rows (draft_ids, at base on) as proposals to check."""
        self.cache.keep(base, rows)
        del self.ids[base:], self.pieces[base:]
        self._append(draft_ids)
        self.tail = len(draft_ids)


class TextChain:
    """Greedy chains through the text (module docstring)."""

    def __init__(self, text: DraftText, draft: OtherTokenizerDraft, confidence: float, stats):
        self.text, self.confidence, self.stats = text, confidence, stats
        self.target_tok, self.table = draft.target_tokenizer, token_bytes(draft.tokenizer)
        self.draft_eos = draft.tokenizer.eos_token_id

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal:
        """g greedy draft steps -> the target's tokens for their text (at most room), and the target's EOS after them
        where the draft ended its text."""
        logits = self.text.sync()
        if logits is None:
            return Proposal()
        drafted, ended = [], False
        for step in range(g):
            j = int(logits.argmax())
            if j >= len(self.table) or self.table[j] is None:  # a special token: its EOS ends the text
                ended = j == self.draft_eos
                break
            drafted.append(j)
            if step == g - 1 or (self.confidence and float(torch.softmax(logits.float(), -1)[j]) < self.confidence):
                break
            logits = self.text.feed_proposal(j)
        self.stats.draft_tokens += len(drafted) + ended
        data, pending = joined(self.table, drafted), bytes(self.text.text[self.text.covered:])
        if not data.startswith(pending):  # the draft wrote past an incomplete character otherwise than the target
            return Proposal(source="draft")
        text, used = split_utf8(data[len(pending):], skip_invalid=False)
        if ended and used == len(data) - len(pending):  # the draft's text is complete: the target's EOS after it
            tokens = encode_text(self.target_tok, text) + [self.target_tok.eos_token_id]
        else:  # whitespace at the end of a text joins the word after it (' ' + 'def' is ' def'): left to the next round
            tokens = encode_text(self.target_tok, text.rstrip() or text)
        return Proposal([t for t in tokens if t is not None][:room], source="draft")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        self.text.commit(kept + [nxt])


class SharedChain:
    """Sampled chains and token trees over the shared vocabulary (module docstring)."""

    def __init__(self, text: DraftText, draft: OtherTokenizerDraft, sampling, confidence: float, nodes: int,
                 generator, stats):
        self.text, self.shared, self.sampling, self.confidence = text, draft.shared, sampling, confidence
        self.nodes, self.generator, self.stats = nodes, generator, stats
        self.base = 0  # a tree round: the cache's length before its tree rows

    def propose(self, ctx: list[int], g: int, room: int) -> Proposal:
        """Up to g draft steps, each one shared token (its target id; q (g, V_target) when sampling); with nodes > 0
        a token tree g levels deep. None proposed while a character is incomplete (the draft would start mid-way)."""
        logits = self.text.sync()
        if logits is None or self.text.pending():
            return Proposal()
        if self.nodes:
            return self._tree(logits, g)
        tokens, qs = [], []
        for step in range(g):
            j, conf = choose(self.shared.restrict(logits), self.sampling, self.confidence, self.generator, self.shared,
                             qs)
            tokens.append(self.shared.to_target(j))
            if step == g - 1 or conf < self.confidence or not self.text.table[j]:  # nothing to feed after EOS
                break
            logits = self.text.feed_proposal(j)
        self.stats.draft_tokens += len(tokens)
        return Proposal(tokens, torch.stack(qs) if qs else None, source="draft")

    def _tree(self, root: torch.Tensor, depth: int) -> Proposal:
        """decode.drafting.tree.grow over the shared ids: each level's nodes fed in one forward under a tree mask."""
        self.base, fed = len(self.text.ids), [0]

        def expand(frontier):
            tokens, pos, mask = level_inputs(frontier, self.base, fed[0], root.device)
            fed[0] += len(tokens)
            self.stats.tree_levels += 1
            return self.shared.restrict(self.text.forward(self.shared.to_draft(tokens), tree=(pos, mask)))

        self.stats.tree_levels += 1  # level 0: the sync forward
        tree = grow(self.shared.restrict(root), expand, self.nodes, depth, self.sampling, self.shared, self.generator)
        self.stats.draft_tokens += len(tree.tokens)
        return Proposal(tree.tokens, tree=tree, source="draft")

    def advance(self, proposal: Proposal, kept: list[int], nxt: int) -> None:
        if proposal.source == "draft" and proposal.tree is not None:
            rows = []
            for i in proposal.path:
                if proposal.tree.fed[i] < 0:
                    break
                rows.append(proposal.tree.fed[i])
            self.text.keep_tree(self.base, rows, self.shared.to_draft(kept[:len(rows)]))
        self.text.commit(kept + [nxt])
