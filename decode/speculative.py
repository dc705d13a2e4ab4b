"""Speculative decoding for HF causal LMs, batch size 1, in four small functions (after gpt-fast).

One round, with the last emitted token x not yet in the target's KV cache:
    propose: the draft runs γ steps from x                      -> d_1..d_γ (and q_i when sampling)
    verify:  one target forward over [x, d_1..d_γ]               -> p_0..p_γ, logits (γ+1, V)
    accept:  greedy: n = length of the prefix with d_i == argmax p_{i-1}; next = argmax p_n
             sampled: accept d_i with prob min(1, p(d_i)/q(d_i)); at the first rejection draw from
             norm(max(p - q, 0)); if all γ pass, draw a bonus token from p_γ. This leaves the output
             distributed exactly as the target's own sampling (Leviathan et al. 2023, Chen et al. 2023).
    rollback: both KV caches are cropped to the accepted prefix; nothing accepted is recomputed.
Emitted per round: d_1..d_n plus next (n + 1 tokens for one target forward). γ = 0 is the target alone.
With `lookup`, a round first looks for the context's suffix earlier in the context (decode.lookup) and
proposes what followed it; the draft runs only when there is no match. A lookup proposal is a draft whose
q is one-hot, so the same accept rule keeps the output exact, greedy or sampled.
With `candidates` K > 1 (greedy, FastLlama target), the draft's next K - 1 best tokens at the first drafted
position are verified in the same target forward as siblings of d_1 (a token tree): when the target's token
there is one of them, it is accepted with the target's next token after it (2 tokens), as when d_1 is
accepted with γ = 1. On a CPU, where verifying a few more tokens costs little (decode.smallgemm), this lifts
the tokens per round for the price of K - 1 more verified tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from decode.errors import UserError
from decode.lookup import continuation
from decode.runners import FAST_MODEL_TYPES, runner_for
from decode.sampling import SamplingParams, logits_to_probs, sample
from decode.smallgemm import WEIGHTS

SCHEDULES = ("constant", "heuristic", "dynamic")
GREEDY = SamplingParams()
DEFAULT_CONFIDENCE = 0.4  # dynamic schedule: stop drafting once the draft's top probability falls below this


@dataclass
class Stats:
    """Counts for one or many generate() calls (merge with +=)."""

    new_tokens: int = 0
    rounds: int = 0  # verification forwards of the target (prefill not counted)
    proposed: int = 0
    accepted: int = 0
    target_forwards: int = 0  # prefill + verification
    draft_forwards: int = 0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    seconds: float = 0.0
    accept_histogram: list[int] = field(default_factory=list)  # [k] = rounds that accepted exactly k drafts
    full_rounds: int = 0  # rounds that accepted every proposal
    lookup_rounds: int = 0  # of `rounds`: proposals from context lookup (no draft forward)
    lookup_proposed: int = 0
    lookup_accepted: int = 0
    lookup_full: int = 0
    sibling_accepted: int = 0  # of `accepted`: rounds whose first position was a sibling (candidates > 1)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tau(self) -> float:
        """Tokens emitted per verification forward (accepted + 1)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    def __iadd__(self, other: Stats) -> Stats:
        for name in ("new_tokens", "rounds", "proposed", "accepted", "target_forwards", "draft_forwards",
                     "target_seconds", "draft_seconds", "seconds", "full_rounds", "lookup_rounds", "lookup_proposed",
                     "lookup_accepted", "lookup_full", "sibling_accepted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        h = self.accept_histogram
        h.extend([0] * (len(other.accept_histogram) - len(h)))
        for k, c in enumerate(other.accept_histogram):
            h[k] += c
        return self

    def as_dict(self) -> dict:
        return {
            "tokens": self.new_tokens,
            "seconds": round(self.seconds, 4),
            "tokens_per_s": round(self.new_tokens / self.seconds, 3) if self.seconds else 0.0,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tau": round(self.tau, 4),
            "proposed": self.proposed,
            "accepted": self.accepted,
            "rounds": self.rounds,
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "target_seconds": round(self.target_seconds, 4),
            "draft_seconds": round(self.draft_seconds, 4),
            "accept_histogram": list(self.accept_histogram),
            "full_rounds": self.full_rounds,
            "sibling_accepted": self.sibling_accepted,
            "lookup": {"rounds": self.lookup_rounds, "proposed": self.lookup_proposed,
                       "accepted": self.lookup_accepted, "full_rounds": self.lookup_full},
        }


class DraftVocab:
    """Maps between target ids and a reduced draft vocabulary (identity when the draft has the full vocabulary).

    Context tokens outside the draft vocabulary are fed to the draft as draft id 0: the draft sees a slightly
    lossy context, but verification by the target keeps the output exact.
    """

    def __init__(self, vocab_map: torch.Tensor | None, target_vocab: int):
        self.reduced = vocab_map is not None
        if self.reduced:
            self.d2t = vocab_map.tolist()
            self.d2t_tensor = vocab_map
            t2d = [0] * target_vocab
            for d, t in enumerate(self.d2t):
                t2d[t] = d
            self.t2d = t2d
            self.target_vocab = target_vocab

    def to_draft(self, ids: list[int]) -> list[int]:
        return [self.t2d[t] for t in ids] if self.reduced else ids

    def to_target(self, j: int) -> int:
        return self.d2t[j] if self.reduced else j

    def expand(self, q: torch.Tensor) -> torch.Tensor:
        """(V_draft,) draft probs -> (V_target,), zero outside the draft vocabulary."""
        if not self.reduced:
            return q
        return torch.zeros(self.target_vocab, dtype=q.dtype, device=q.device).index_copy_(0, self.d2t_tensor, q)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def propose(draft, cache, pending: list[int], gamma: int, sampling: SamplingParams, vocab: DraftVocab,
            confidence: float, generator, stats: Stats,
            candidates: int = 1) -> tuple[list[int], torch.Tensor | None, list[int]]:
    """Run the draft up to γ steps. `pending`: target ids not yet in the draft cache (1, or 2 after a full accept).

    Returns proposals (target ids), when sampling their draft distributions q (g, V_target), and (greedy,
    candidates > 1) the draft's next candidates - 1 best tokens at the first position (siblings of d_1).
    The last proposal is never fed back, so the draft cache ends holding pending + d_1..d_{g-1}.
    """
    tokens, qs, inp, siblings = [], [], pending, []
    t0 = time.perf_counter()
    for _ in range(gamma):
        logits = draft.forward(vocab.to_draft(inp), cache, 1)[-1]  # (V_draft,)
        if sampling.greedy:
            if candidates > 1 and not tokens:
                top = logits.topk(min(candidates, logits.shape[-1])).indices.tolist()
                siblings = [vocab.to_target(i) for i in top[1:]]
            j = int(logits.argmax())
            conf = float(torch.softmax(logits.float(), -1)[j]) if confidence else 1.0
        else:
            q = logits_to_probs(logits, sampling)
            j = sample(q, generator)
            conf = float(q[j])
            qs.append(vocab.expand(q))
        tokens.append(vocab.to_target(j))
        inp = tokens[-1:]
        if conf < confidence:  # dynamic schedule: a doubtful token ends the proposal
            break
    _sync(draft.device)
    stats.draft_seconds += time.perf_counter() - t0
    stats.draft_forwards += len(tokens)
    return tokens, (torch.stack(qs) if qs else None), siblings


def verify(target, cache, last: int, proposals: list[int], stats: Stats, siblings: list[int] = ()) -> torch.Tensor:
    """One target forward over [last, d_1..d_g] (+ siblings of d_1): logits (g+1 (+s), V) predicting d_1..d_g
    and the token after (then, per sibling, the token after it)."""
    t0 = time.perf_counter()
    ids = [last] + proposals + list(siblings)
    logits = (target.forward(ids, cache, len(ids), siblings=len(siblings)) if siblings
              else target.forward(ids, cache, len(ids)))
    _sync(target.device)
    stats.target_seconds += time.perf_counter() - t0
    stats.target_forwards += 1
    return logits


def accept_greedy(proposals: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """(g,) proposals, (g+1, V) logits -> (n accepted, next token): exact match with the target's argmax."""
    best = target_logits.argmax(-1).tolist()
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
    if sampling.greedy:
        return accept_greedy(proposals, target_logits)
    return accept_sampled(proposals, q, logits_to_probs(target_logits, sampling), generator)


class Schedule:
    """How many tokens to draft next round. constant: γ. heuristic: +2 after a full accept, -1 otherwise
    (as transformers does). dynamic: up to γ, but propose() stops at the first token below `confidence`."""

    def __init__(self, kind: str, gamma: int, confidence: float = DEFAULT_CONFIDENCE):
        if kind not in SCHEDULES:
            raise UserError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
        if gamma < 0:
            raise UserError(f"gamma must be >= 1 (draft tokens per round), got {gamma}")
        self.kind, self.gamma, self.max_gamma = kind, gamma, max(gamma, 4 * gamma)
        self.confidence = confidence if kind == "dynamic" else 0.0

    def update(self, proposed: int, accepted: int) -> None:
        if self.kind == "heuristic" and proposed:
            self.gamma = min(self.gamma + 2, self.max_gamma) if accepted == proposed else max(1, self.gamma - 1)


@torch.inference_mode()
def generate(target, draft, prompt_ids: list[int], max_new_tokens: int, gamma: int = 4,
             schedule: str = "constant", sampling: SamplingParams = GREEDY,
             eos_token_ids: tuple[int, ...] = (), stop_strings: tuple[str, ...] = (), tokenizer=None,
             vocab_map: torch.Tensor | None = None, confidence: float = DEFAULT_CONFIDENCE,
             generator: torch.Generator | None = None, lookup: int = 0,
             lookup_tokens: int = 0, candidates: int = 1, draft_weights: str = "float32") -> tuple[list[int], Stats]:
    """Generate up to max_new_tokens after prompt_ids. gamma=0, or draft=None without lookup, runs the target alone.

    lookup: propose from the context when its last `lookup` (or more) tokens occurred before (0 = off);
    with draft=None that is prompt-lookup decoding on its own. lookup_tokens: how many tokens a lookup proposes
    (0 = γ); they cost no draft forward, so more than γ usually pays.
    candidates: the draft's top-K tokens at the first drafted position are all verified (K - 1 siblings of d_1
    in the same target forward; greedy only, and the target must run on FastLlama; 1 = a plain chain).
    draft_weights: float16 or int8 runs a llama-family draft with weights stored so on a CPU (decode.smallgemm):
    about a half or a third of the draft step, slightly different draft numerics (acceptance may move; the output
    stays the target's).

    target/draft: HF causal LMs or runners (decode.runners); llama-family models run on the lean FastLlama path.
    Returns the new token ids (ending with EOS if one was produced) and the call's Stats.
    """
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if stop_strings and tokenizer is None:
        raise UserError("stop_strings need the tokenizer to decode text")
    if lookup < 0:
        raise UserError(f"lookup must be >= 0 (n-gram length matched in the context; 0 = off), got {lookup}")
    if candidates < 1:
        raise UserError(f"candidates must be >= 1 (the draft's top-K verified at the first position), got {candidates}")
    if draft_weights not in WEIGHTS:
        raise UserError(f"draft_weights must be one of {', '.join(WEIGHTS)}, got {draft_weights!r}")
    if candidates > 1 and not sampling.greedy:
        raise UserError("candidates > 1 is for greedy decoding (temperature 0); sampled verification of several "
                        "candidates is not implemented: use candidates=1")
    if draft is None and not lookup:
        gamma = 0
    sched = Schedule(schedule, gamma, confidence)
    target = runner_for(target)
    if candidates > 1 and not target.tree:
        raise UserError(f"candidates > 1 needs the lean FastLlama target runner ({', '.join(FAST_MODEL_TYPES)} models "
                        "without sliding windows); this target runs on HFRunner: use candidates=1")
    # room for the longest verification: γ drafts and K - 1 siblings past the last kept token
    max_len = len(prompt_ids) + max_new_tokens + sched.max_gamma + candidates + 2
    stats = Stats()
    start = time.perf_counter()
    eos = set(eos_token_ids)

    # --- prefill: the target caches the prompt and picks the first token
    t_cache = target.new_cache(max_len)
    t0 = time.perf_counter()
    logits = target.forward(prompt_ids, t_cache, 1)  # (1, V)
    _sync(target.device)
    stats.target_seconds += time.perf_counter() - t0
    stats.target_forwards += 1
    out = [accept([], logits, sampling, None, generator)[1]]

    vocab = DraftVocab(vocab_map, logits.shape[-1])
    if gamma and draft is not None:
        draft = runner_for(draft, weights=draft_weights)
        d_cache = draft.new_cache(max_len)
        t0 = time.perf_counter()
        draft.forward(vocab.to_draft(prompt_ids), d_cache, 1)
        _sync(draft.device)
        stats.draft_seconds += time.perf_counter() - t0
        stats.draft_forwards += 1
        pending = out[-1:]  # target ids the draft has not seen yet

    done = _stop_at(out, 0, eos, stop_strings, tokenizer, max_new_tokens)
    while not done:
        # --- propose (never past max_new_tokens: the round's own next token is the +1)
        g = min(sched.gamma, max_new_tokens - len(out) - 1) if gamma else 0
        proposals, q, looked, siblings = [], None, False, []
        if g > 0 and lookup:
            proposals = continuation(prompt_ids + out, lookup, min(max(lookup_tokens, g), max_new_tokens - len(out) - 1))
            looked = bool(proposals)
            if looked and not sampling.greedy:  # a deterministic proposal: q is one-hot, (g, V)
                q = torch.zeros(len(proposals), logits.shape[-1], device=logits.device)
                q[torch.arange(len(proposals)), torch.tensor(proposals)] = 1.0
        if g > 0 and not looked and draft is not None:
            proposals, q, siblings = propose(draft, d_cache, pending, g, sampling, vocab, sched.confidence, generator,
                                             stats, candidates)
        g = len(proposals)
        # --- verify + accept
        logits = verify(target, t_cache, out[-1], proposals, stats, siblings)
        n, nxt = accept(proposals, logits[:g + 1], sampling, q, generator)
        sib = None
        if siblings and n == 0 and nxt in siblings:  # the target's token is a sibling of d_1: accept it too
            j = siblings.index(nxt)
            sib, nxt = nxt, int(logits[g + 1 + j].argmax())
            t_cache.move(t_cache.length - len(siblings) + j, t_cache.length - g - len(siblings))
        # --- roll back the rejected tail: the target cache now holds everything but `nxt`
        drop = g - n + len(siblings) - (sib is not None)
        if drop:
            t_cache.crop(-drop)
        if gamma and draft is not None:
            if g == 0 or looked:  # the draft did not run: everything emitted is new to it
                pending = pending + proposals[:n] + [nxt]
            elif n == g:  # all accepted: the draft never saw its own last proposal
                pending = [proposals[-1], nxt]
            else:
                if g - 1 - n:
                    d_cache.crop(-(g - 1 - n))
                pending = [nxt] if sib is None else [sib, nxt]
        if sib is not None:  # from here on the round reads as d_1 = sib accepted (n = 1)
            proposals, n = [sib], 1
            stats.sibling_accepted += 1
        # --- bookkeeping and stop conditions
        stats.rounds += 1
        stats.proposed += g
        stats.accepted += n
        if len(stats.accept_histogram) <= n:
            stats.accept_histogram.extend([0] * (n + 1 - len(stats.accept_histogram)))
        stats.accept_histogram[n] += 1
        full = int(g > 0 and n == g)
        stats.full_rounds += full
        if looked:
            stats.lookup_rounds += 1
            stats.lookup_proposed += g
            stats.lookup_accepted += n
            stats.lookup_full += full
        sched.update(g, n)
        first_new = len(out)
        out.extend(proposals[:n])
        out.append(nxt)
        done = _stop_at(out, first_new, eos, stop_strings, tokenizer, max_new_tokens)

    stats.new_tokens = len(out)
    stats.seconds = time.perf_counter() - start
    return out, stats


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
