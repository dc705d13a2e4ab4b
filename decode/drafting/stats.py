"""What generate() counts and times (Stats: one call's, or many merged with +=) and the rates read from them."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from decode.drafting.proposers import Clock


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
    target_prompt_seconds: float = 0.0  # of target_seconds: the target's forward over the prompt, once a call
    draft_seconds: float = 0.0
    draft_prompt_seconds: float = 0.0  # of draft_seconds: the draft's read of the prompt, at its first drafted round
    draft_catchup_seconds: float = 0.0  # of draft_seconds: its reads of tokens emitted in rounds it did not draft
    seconds: float = 0.0
    generations: int = 0  # generate() calls merged here
    prefill_seconds: float = 0.0  # of `seconds`: the call to its first token (both prompt forwards, the draft's too)
    accept_histogram: list[int] = field(default_factory=list)  # [k] = rounds that accepted exactly k drafts
    full_rounds: int = 0  # rounds that accepted every proposal
    lookup_rounds: int = 0  # of `rounds`: proposals from context lookup (no draft forward)
    lookup_proposed: int = 0
    lookup_accepted: int = 0
    lookup_full: int = 0
    tree_rounds: int = 0  # of `rounds`: rounds that verified a token tree
    tree_nodes: int = 0  # nodes those rounds verified
    tree_levels: int = 0  # draft forwards those rounds ran (level 0 and each expanded level)
    draft_tokens: int = 0  # draft steps behind the proposals of a draft with its own tokenizer (decode.drafting.translate)
    # "depth.rank" -> [accepted, offered]: how often the target took the draft's rank-r child at each depth
    tree_ranks: dict = field(default_factory=dict)
    # where the draft's window of the prompt came from (decode.drafting.prompt_read): source -> [calls, fewest and most
    # prompt tokens it read]
    draft_window: dict = field(default_factory=dict)
    # times the phases: the wall clock unless generate() gives one for its device (CUDA events on a GPU)
    clock: Clock = field(default_factory=lambda: Clock(torch.device("cpu")), repr=False, compare=False)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tau(self) -> float:
        """Tokens emitted per verification forward (accepted + 1)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    def record(self, g: int, n: int, looked: bool) -> None:
        """Count one round that proposed g tokens (by context lookup when `looked`) and accepted n."""
        self.rounds += 1
        self.proposed += g
        self.accepted += n
        if len(self.accept_histogram) <= n:
            self.accept_histogram.extend([0] * (n + 1 - len(self.accept_histogram)))
        self.accept_histogram[n] += 1
        full = int(g > 0 and n == g)
        self.full_rounds += full
        if looked:
            self.lookup_rounds += 1
            self.lookup_proposed += g
            self.lookup_accepted += n
            self.lookup_full += full

    def note_window(self, source: str, tokens: int) -> None:
        """A call whose draft reads (at most) `tokens` of the prompt, its window from `source`."""
        n, lo, hi = self.draft_window.get(source, (0, tokens, tokens))
        self.draft_window[source] = [n + 1, min(lo, tokens), max(hi, tokens)]

    def __iadd__(self, other: Stats) -> Stats:
        for name in ("new_tokens", "rounds", "proposed", "accepted", "target_forwards", "draft_forwards",
                     "target_seconds", "target_prompt_seconds", "draft_seconds", "draft_prompt_seconds",
                     "draft_catchup_seconds", "seconds",
                     "generations", "prefill_seconds", "full_rounds", "lookup_rounds", "lookup_proposed",
                     "lookup_accepted", "lookup_full", "tree_rounds", "tree_nodes", "tree_levels", "draft_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for source, (n, lo, hi) in other.draft_window.items():
            mine = self.draft_window.get(source)
            self.draft_window[source] = [n, lo, hi] if mine is None else [mine[0] + n, min(mine[1], lo), max(mine[2], hi)]
        for key, (hit, offered) in other.tree_ranks.items():
            mine = self.tree_ranks.setdefault(key, [0, 0])
            mine[0], mine[1] = mine[0] + hit, mine[1] + offered
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
            # after the first token: the decoding rate at the prompt's length, without its forward (TTFT's share)
            "prefill_seconds": round(self.prefill_seconds, 4),
            "decode_tokens_per_s": decode_rate(self.new_tokens, self.generations, self.seconds, self.prefill_seconds),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "tau": round(self.tau, 4),
            "proposed": self.proposed,
            "accepted": self.accepted,
            "rounds": self.rounds,
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "target_seconds": round(self.target_seconds, 4),
            "target_prompt_seconds": round(self.target_prompt_seconds, 4),
            "draft_seconds": round(self.draft_seconds, 4),
            "draft_prompt_seconds": round(self.draft_prompt_seconds, 4),
            "draft_catchup_seconds": round(self.draft_catchup_seconds, 4),
            "accept_histogram": list(self.accept_histogram),
            "full_rounds": self.full_rounds,
            "draft_tokens": self.draft_tokens,
            # the draft's window of the prompt: source (stored | cost model | option | none) -> calls, tokens read
            "draft_window": {k: {"calls": n, "tokens": [lo, hi]} for k, (n, lo, hi) in self.draft_window.items()},
            "tree": {"rounds": self.tree_rounds, "nodes": self.tree_nodes, "levels": self.tree_levels, "ranks": dict(self.tree_ranks),
                     "nodes_per_pass": round(self.tree_nodes / self.tree_rounds, 3) if self.tree_rounds else 0.0},
            "lookup": {"rounds": self.lookup_rounds, "proposed": self.lookup_proposed,
                       "accepted": self.lookup_accepted, "full_rounds": self.lookup_full},
        }


def decode_rate(tokens: int, calls: int, seconds: float, first_seconds: float) -> float:
    """Tokens a second after each call's first token: (tokens - calls) over (seconds - first_seconds); 0 when
    nothing came after a first token."""
    rest = seconds - first_seconds
    return round((tokens - calls) / rest, 3) if rest > 0 and tokens > calls else 0.0
