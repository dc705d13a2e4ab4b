"""Speculative decoding for HF causal LMs, batch size 1: generate() is the loop below (after gpt-fast).

Prefill: the target caches the prompt and picks the first token (the draft caches the prompt too).
Then rounds, with the last emitted token x not yet in the target's KV cache:
    propose:  d_1..d_g (and q_i, their proposal probs, when sampling), never past max_new_tokens: from
              context lookup when the context's suffix occurred before (decode.drafting.lookup; g up to
              max(lookup_tokens, γ)), else from the draft's γ steps from x (g <= γ; the dynamic schedule stops
              early); none without a draft or lookup (g = 0: the target alone). decode.drafting.proposers
    verify:   one target forward over [x, d_1..d_g]                -> p_0..p_g, logits (g+1, V)
    accept:   greedy: n = length of the prefix with d_i == argmax p_{i-1}; next = argmax p_n
              sampled: accept d_i with prob min(1, p(d_i)/q(d_i)); at the first rejection draw from
              norm(max(p - q, 0)); if all g pass, draw a bonus token from p_g. This leaves the output
              distributed exactly as the target's own sampling (Leviathan et al. 2023, Chen et al. 2023).
    rollback: both KV caches are cropped to the accepted prefix; nothing accepted is recomputed.
Emitted per round: d_1..d_n plus next (n + 1 tokens for one target forward), until EOS, a stop string or
max_new_tokens. A lookup proposal is a draft whose q is one-hot, so the same accept rule keeps the output
exact, greedy or sampled.
With `tree_nodes` N > 0 a round drafts a token tree instead of a chain (up to N nodes, γ levels deep: several
continuations) and verifies it in one target forward under a tree mask; the longest accepted path is kept, greedy
or sampled, by the rules in decode.drafting.tree, so the output stays the target's own.
"""

from __future__ import annotations

import time
from functools import partial

import torch

from decode.drafting import prompt_read, translate
from decode.drafting.parallel import ParallelDraft, mask_token
from decode.drafting.proposers import Clock, ContextLookup, DraftChain, HeadChain, Proposal, Proposer
from decode.drafting.sampling import SamplingParams, logits_to_probs, sample
from decode.drafting.schedule import Memory, Schedule, length_bucket
from decode.drafting.stats import Stats
from decode.drafting.tree import keep_rows, rank_counts, verify_mask, walk_greedy, walk_sampled
from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.models.feature_head import FeatureHead
from decode.models.vocab_pair import OtherTokenizerDraft
from decode.options import DecodeOptions
from decode.runners.choice import runner_for
from decode.runners.graphs import GraphLlama
from decode.runners.hf import sliding_window

DEFAULTS = DecodeOptions()  # generate()'s options when none are given (read, never changed)


def verify(target, cache, last: int, proposals: list[int], stats: Stats) -> torch.Tensor:
    """One target forward over [last, d_1..d_g]: logits (g+1, V) predicting d_1..d_g and the token after."""
    t0 = stats.clock.start()
    ids = [last] + proposals
    logits = target.forward(ids, cache, len(ids))
    stats.clock.stop(t0, stats, "target_seconds")
    stats.target_forwards += 1
    return logits


def verify_tree(target, cache, last: int, proposal: Proposal, stats: Stats, sampling: SamplingParams,
                generator=None) -> tuple[list[int], int]:
    """One target forward over [last, n_1..n_N] under the tree mask (decode.drafting.tree) and the walk down the tree ->
    (accepted path: node indices, next token). The cache keeps last and the path (and the runner's features, when
    it captures them, their rows)."""
    tree, start = proposal.tree, cache.get_seq_length()
    t0 = stats.clock.start()
    positions, mask = verify_mask(tree.parents, tree.depths, start, target.device)
    logits = target.forward([last] + tree.tokens, cache, len(tree.tokens) + 1, tree=(positions, mask))  # (N+1, V)
    stats.clock.stop(t0, stats, "target_seconds")
    stats.target_forwards += 1
    stats.tree_rounds += 1
    stats.tree_nodes += len(tree.tokens)
    if sampling.greedy:
        path, nxt = walk_greedy(tree, logits.argmax(-1).tolist())
    else:
        path, nxt = walk_sampled(tree, logits_to_probs(logits, sampling), generator)
    for d, r, hit in rank_counts(tree, path):
        counts = stats.tree_ranks.setdefault(f"{d}.{r}", [0, 0])
        counts[0], counts[1] = counts[0] + hit, counts[1] + 1
    rows = keep_rows(path)
    cache.keep(start, rows)
    if getattr(target, "features", None) is not None:  # a feature head drafts from the path's rows
        target.features = target.features[rows]
    return path, nxt


def verify_on_device(target, cache, last: int, proposal: Proposal, stats: Stats) -> tuple[torch.Tensor, int, int]:
    """verify + accept_greedy for a chain drafted on the device (Proposal.device_tokens): the target reads
    [last, d_1..d_g] without the drafts passing through the host, and the drafts and the target's argmax come
    back in one read, the round's only host sync. Fills proposal.tokens -> (logits (g+1, V), n, next)."""
    t0 = stats.clock.start()
    head = torch.tensor([last], dtype=torch.long)
    if target.device.type == "cuda":  # from pinned memory: the copy is queued, not waited for
        head = head.pin_memory().to(target.device, non_blocking=True)
    logits = target.forward(torch.cat([head, proposal.device_tokens]), cache, len(proposal.device_tokens) + 1)
    stats.clock.stop(t0, stats, "target_seconds")
    stats.target_forwards += 1
    both = torch.cat([proposal.device_tokens, logits.argmax(-1)]).tolist()
    g = len(proposal.device_tokens)
    proposal.tokens = both[:g]
    return (logits, *matched(proposal.tokens, both[g:]))


def accept_greedy(proposals: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """(g,) proposals, (g+1, V) logits -> (n accepted, next token): exact match with the target's argmax."""
    return matched(proposals, target_logits.argmax(-1).tolist())


def matched(proposals: list[int], best: list[int]) -> tuple[int, int]:
    """(n, next): the length of the prefix of proposals equal to the target's argmax tokens `best` (g+1), and
    the target's token after it."""
    n = 0
    while n < len(proposals) and proposals[n] == best[n]:
        n += 1
    return n, best[n]


def accept_sampled(proposals: list[int], q: torch.Tensor | None, p: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[int, int]:
    """Lossless rejection sampling. q: (g, V) draft probs, p: (g+1, V) target probs -> (n accepted, next token)."""
    g = len(proposals)
    if g:
        idx = torch.tensor(proposals, device=p.device)
        rows = torch.arange(g, device=p.device)
        ratio = p[rows, idx] / q[rows, idx]  # q > 0 at sampled tokens
        u = torch.rand(g, device=p.device, generator=generator)
        ok = (u < ratio).tolist()
        for n in range(g):
            if not ok[n]:
                residual = (p[n] - q[n]).clamp_min(0)
                total = residual.sum()
                # total == 0 only if p == q (then rejection has probability 0); guard against rounding
                dist = residual / total if total > 0 else p[n]
                return n, sample(dist, generator)
    return g, sample(p[g], generator)


def accept(proposals: list[int], target_logits: torch.Tensor, sampling: SamplingParams,
           q: torch.Tensor | None = None, generator=None) -> tuple[int, int]:
    """(g,) proposals, (g+1, V) logits (q: (g, V) when sampling) -> (n accepted, next token), by the rule for
    `sampling`."""
    if sampling.greedy:
        return accept_greedy(proposals, target_logits)
    return accept_sampled(proposals, q, logits_to_probs(target_logits, sampling), generator)


def propose(proposers: list[Proposer], ctx: list[int], g: int, room: int) -> Proposal:
    """The first proposal of at most g tokens (lookup: max(lookup_tokens, g)) and never more than `room`, from
    `proposers` in order (context lookup before the draft); an empty one when g <= 0 or none proposes."""
    for proposer in proposers if g > 0 else ():
        proposal = proposer.propose(ctx, g, room)
        if proposal is not None:
            return proposal
    return Proposal()


@torch.inference_mode()
def generate(target, draft, prompt_ids: list[int], max_new_tokens: int, options: DecodeOptions = DEFAULTS, *,
             eos_token_ids: tuple[int, ...] = (), stop_strings: tuple[str, ...] = (), tokenizer=None,
             vocab_map: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> tuple[list[int], Stats]:
    """Up to max_new_tokens after prompt_ids (the module docstring's loop; knobs: decode.options.DecodeOptions).

    target/draft: HF causal LMs or runners (decode.runners); llama-family models run on the lean FastLlama path.
    draft=None without options.lookup runs the target alone; with lookup it is prompt-lookup decoding on its own.
    vocab_map: (N,) target id of each draft id for a reduced-vocabulary draft (decode.models.targets.Draft.vocab_map).
    A draft with its own tokenizer comes as a decode.models.vocab_pair.OtherTokenizerDraft (decode.drafting.translate).
    Returns the new token ids (ending with EOS if one was produced) and the call's Stats.
    """
    memory = Memory.of(target)
    target = runner_for(target)
    _check_call(target, draft, max_new_tokens, options, stop_strings, tokenizer)
    # a feature head drafts from the target's hidden states at its layers: every target forward leaves them
    target.capture = tuple(draft.feature_layers) if isinstance(draft, FeatureHead) else ()
    try:
        return _generate(target, draft, prompt_ids, max_new_tokens, options, eos_token_ids, stop_strings, tokenizer,
                         vocab_map, generator, memory)
    finally:
        target.capture, target.features = (), None


def _generate(target, draft, prompt_ids, max_new_tokens, options, eos_token_ids, stop_strings, tokenizer, vocab_map,
              generator, memory: Memory) -> tuple[list[int], Stats]:
    sampling, eos, start = options.sampling, set(eos_token_ids), time.perf_counter()
    stats = Stats(clock=Clock(target.device))
    # the adaptive schedule resumes from the last generation's estimates for this draft, these options and a prompt
    # of about this length (costs and acceptance move with it)
    key = (options.gamma, options.tree_nodes, options.lookup, options.lookup_tokens, options.draft_weights,
           options.draft_context, sampling.greedy)
    bucket = length_bucket(len(prompt_ids))
    carried, nearest = memory.get(draft, key, bucket)
    sched = Schedule(options.schedule, options.gamma if draft is not None or options.lookup else 0, options.confidence,
                     tree=options.tree_nodes > 0, carried=carried, nearest=nearest)
    # room for the longest round: 4γ drafts, or a tree's nodes (verified) and the draft's expanded nodes (at most
    # tree_nodes a level, γ - 1 levels) past the last kept token
    max_len = len(prompt_ids) + max_new_tokens + max(sched.max_gamma, options.tree_nodes * options.gamma) + 2

    t_cache = target.new_cache(max_len)
    t0 = stats.clock.start()
    logits = target.forward(prompt_ids, t_cache, 1)  # (1, V)
    stats.clock.stop(t0, stats, "target_seconds", "target_prompt_seconds")
    stats.target_forwards += 1
    out = [accept([], logits, sampling, None, generator)[1]]
    window = prompt_read.choose(options, draft, target.config, len(prompt_ids))
    if draft is not None:
        stats.note_window(window.source, min(window.tokens or len(prompt_ids), len(prompt_ids)))
    proposers = _proposers(target, draft, options, sched, VocabMap(vocab_map, logits.shape[-1]), prompt_ids, out[0],
                           max_len, logits.device, generator, stats, window)
    reader = next((p for p in proposers if isinstance(p, prompt_read.Deferred)), None)
    # the first token comes after the target's prompt forward; the draft reads its window at its first drafted round
    # (prompt_read.Deferred), so that read is in the decoding time, where it is paid only if the draft drafts
    stats.generations, stats.prefill_seconds = 1, time.perf_counter() - start

    done = _stop_at(out, 0, eos, stop_strings, tokenizer, max_new_tokens)
    prior = prompt_read.read_prior(draft, target.config, stats.target_prompt_seconds, len(prompt_ids))
    sched.start(max_new_tokens - len(out), reader.unread if reader else 0, prior)  # rounds are timed from here
    while not done:
        room = max_new_tokens - len(out) - 1  # a proposal stops short of max_new_tokens: `nxt` is the +1
        proposal = propose(proposers, prompt_ids + out, min(sched.gamma, room), room)
        if proposal.tree is not None:  # verified, walked and rolled back in one call
            proposal.path, nxt = verify_tree(target, t_cache, out[-1], proposal, stats, sampling, generator)
            g, kept = len(proposal.tokens), proposal.tree.path_tokens(proposal.path)
        else:
            if proposal.device_tokens is not None:  # a greedy chain drafted on the GPU path: one host read a round
                logits, n, nxt = verify_on_device(target, t_cache, out[-1], proposal, stats)
                g = len(proposal.tokens)
            else:
                g = len(proposal.tokens)
                logits = verify(target, t_cache, out[-1], proposal.tokens, stats)  # (g + 1, V)
                n, nxt = accept(proposal.tokens, logits, sampling, proposal.q, generator)
            kept = proposal.tokens[:n]
            # rollback: the target cache keeps [.., last] + kept (nxt is the next round's last)
            if g - n:
                t_cache.crop(-(g - n))
        # each proposer catches up
        for proposer in proposers:
            proposer.advance(proposal, kept, nxt)
        stats.record(g, len(kept), proposal.source == "lookup")
        first_new = len(out)
        out += kept + [nxt]
        done = _stop_at(out, first_new, eos, stop_strings, tokenizer, max_new_tokens)
        sched.update(g, len(kept), read=reader.drain() if reader else (0, 0.0), remaining=max_new_tokens - len(out),
                     unread=reader.unread if reader else 0)

    stats.new_tokens, stats.seconds = len(out), time.perf_counter() - start
    stats.clock.settle()
    memory.put(draft, key, sched, bucket)
    return out, stats


def _check_call(target, draft, max_new_tokens: int, options: DecodeOptions, stop_strings, tokenizer) -> None:
    """The checks that need more than the options (DecodeOptions checks those)."""
    if isinstance(draft, FeatureHead):
        n = target.config.num_hidden_layers
        if draft.config.hidden_size != target.config.hidden_size or max(draft.feature_layers) >= n:
            raise UserError(f"this feature head reads layers {draft.feature_layers} of a {draft.config.hidden_size}-wide "
                            f"target; the target is {target.config.hidden_size} wide with {n} layers: use the head "
                            "trained for this target")
    if isinstance(draft, OtherTokenizerDraft):
        translate.check_call(draft, options)
    prompt_read.check(draft, options)
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if stop_strings and tokenizer is None:
        raise UserError("stop_strings need the tokenizer to decode text")
    window = sliding_window(target.config)
    if options.tree_nodes and window:
        raise UserError(f"--tree-nodes {options.tree_nodes}: this target attends within a {window}-token sliding "
                        "window, which a token tree's attention mask does not apply: use --tree-nodes 0 (a chain)")


def _proposers(target, draft, options: DecodeOptions, sched: Schedule, vocab: VocabMap, prompt_ids: list[int],
               first: int, max_len: int, device: torch.device, generator, stats: Stats,
               window: prompt_read.Window) -> list[Proposer]:
    """Context lookup (options.lookup > 0), then the draft (when there is one), in the order they are asked. A draft
    model is built at its first proposal over the prompt's window (prompt_read.Deferred): none reads before then."""
    proposers = []
    seen = prompt_ids[-window.tokens:] if window.tokens else prompt_ids  # what a draft model reads
    if options.lookup:
        proposers.append(ContextLookup(options.lookup, options.lookup_tokens, options.sampling, vocab.target_vocab,
                                       device))
    if isinstance(draft, FeatureHead):  # the head carries its own vocabulary map
        proposers.append(HeadChain(draft, VocabMap(draft.draft_ids(), vocab.target_vocab), target, prompt_ids, first,
                                   max_len, options.sampling, sched.confidence, options.tree_nodes, generator, stats))
    elif isinstance(draft, OtherTokenizerDraft):  # its own tokenizer: proposals through the text
        build = partial(translate.proposer, draft, options, sched.confidence, seen, max_len=max_len,
                        generator=generator, stats=stats)
        proposers.append(prompt_read.Deferred(lambda f: build(first=f), first, len(seen), device))
    elif draft is not None:
        draft = runner_for(draft, weights=options.draft_weights)
        on_device = isinstance(target, GraphLlama) and isinstance(draft, GraphLlama)  # the GPU path (or its CPU test)
        mask = mask_token(draft.config)  # a parallel draft: one forward a round (decode.drafting.parallel)
        kind = DraftChain if mask is None else partial(ParallelDraft, mask=mask)
        build = partial(kind, draft, vocab, seen, max_len=max_len, sampling=options.sampling,
                        confidence=sched.confidence, nodes=options.tree_nodes, generator=generator, stats=stats,
                        on_device=on_device)
        proposers.append(prompt_read.Deferred(lambda f: build(first=f), first, len(seen), device))
    return proposers


def _stop_at(out: list[int], first_new: int, eos: set[int], stop_strings, tokenizer, limit: int) -> bool:
    """Truncate `out` in place at the first stop among the tokens from first_new on; True when generation ends."""
    for i in range(first_new, len(out)):
        hit = out[i] in eos or i + 1 >= limit
        if not hit and stop_strings:
            # a stop string completed earlier in this window would already have ended generation
            tail = tokenizer.decode(out[max(0, i - 15): i + 1])
            hit = any(s in tail for s in stop_strings)
        if hit:
            del out[i + 1:]
            return True
    return False
