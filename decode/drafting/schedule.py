"""How many tokens to draft next round. generate() asks before each round and tells after it; a round's γ is fixed
before the round runs, so the lossless rules (greedy and sampled) are untouched by any schedule.

  constant   γ every round
  heuristic  +2 after a full accept, -1 otherwise, within [1, 4γ] (transformers' rule)
  dynamic    up to γ, the draft stopping at its first token below --confidence
  adaptive   the γ in 0..γ with the most expected tokens a second, down to 0 (the target alone) where drafting
             does not pay, from the cost model fed by this very generation (Adaptive below)

The adaptive choice is the cost model of docs/architecture.md with its inputs measured online, at the context
length the generation is at:
    rate(0) = 1 / t_0                          a round of the target alone: one token in t_0 seconds
    rate(g) = τ(α̂, g) / t_g,  τ(α, g) = (1 - α^(g+1)) / (1 - α)
t_g is the wall time of a round that proposed g tokens (the draft's steps, the verification, the bookkeeping: what
t_1 (g c + v(g)) stands for), an exponential moving average per g; a round ends in a host read of the accepted
tokens, so on a GPU its wall time is its device time too. α̂ is the per-token acceptance, shared by every g:
accepted tokens over accepted tokens + rejections, both moving averages. A token tree has no τ(α, g): its arm's
rate is its own emitted tokens a round over t_g. Each round takes the best arm; every EXPLORE rounds one
neighbour of it (g - 1, g + 1 or 0, in turn) instead, so an arm's time stays current as the context grows and a
draft that stopped paying is tried again now and then (a probe at γ = 1 costs about one round's difference in 16).
A generation starts from the estimates the previous one with the same target, draft and options left (Memory):
a 64-token answer is about 45 rounds, too few to spend on relearning α̂ and every arm's time from the prior.
"""

from __future__ import annotations

import time
import weakref

from decode.options import DEFAULT_CONFIDENCE, check_schedule

EXPLORE = 16  # rounds between two tries of a neighbour of the best γ (adaptive)
DECAY = 0.9  # weight of the past in a γ's round time (adaptive): about its last 10 rounds
ALPHA_DECAY = 0.97  # weight of the past in α̂'s sums (adaptive): about the last 30 rounds, so α̂ is not noise
CLOSE = 0.75  # the target alone is tried often only while its rate is within this share of the best (adaptive)
MARGIN = 1.02  # a new best γ must beat the current one by 2% (adaptive): noise does not flip the choice


def tau(alpha: float, g: int) -> float:
    """Expected tokens a round that proposes g tokens emits, per-token acceptance alpha (i.i.d.)."""
    if g <= 0:
        return 1.0
    if alpha >= 1.0:
        return g + 1.0
    return (1 - alpha ** (g + 1)) / (1 - alpha)


class Schedule:
    """generate()'s schedule (module docstring): .gamma before a round, update(proposed, accepted, emitted) after.
    max_gamma bounds every round's length (the caches are sized by it)."""

    def __init__(self, kind: str, gamma: int, confidence: float = DEFAULT_CONFIDENCE, tree: bool = False,
                 clock=None, carried: Adaptive | None = None):
        check_schedule(kind)
        self.kind, self.max_gamma = kind, (4 * gamma if kind == "heuristic" else gamma)
        self._gamma = gamma
        self.confidence = confidence if kind == "dynamic" else 0.0
        self.adaptive = None
        if kind == "adaptive" and gamma > 0:
            self.adaptive = Adaptive(gamma, tree, clock)
            if carried is not None and carried.arms == self.adaptive.arms:
                self.adaptive.resume(carried)

    @property
    def gamma(self) -> int:
        """The next round's γ (the adaptive choice is made when the previous round is recorded)."""
        return self.adaptive.asked if self.adaptive is not None else self._gamma

    def start(self) -> None:
        """The first round starts now (after the prompt's forward)."""
        if self.adaptive is not None:
            self.adaptive.start()

    def update(self, proposed: int, accepted: int, emitted: int | None = None) -> None:
        """A round proposed `proposed` tokens, accepted `accepted` and emitted `emitted` (accepted + 1 by default)."""
        if self.adaptive is not None:
            self.adaptive.record(proposed, accepted, accepted + 1 if emitted is None else emitted)
        elif self.kind == "heuristic" and proposed:
            self._gamma = min(self._gamma + 2, self.max_gamma) if accepted == proposed else max(1, self._gamma - 1)


class Adaptive:
    """The adaptive schedule's estimates and choice (module docstring). Arms: 0 and the lengths 1..gamma a chain
    proposes (a tree: 0 and gamma, its one shape)."""

    def __init__(self, gamma: int, tree: bool = False, clock=None):
        self.arms = [0, gamma] if tree else list(range(gamma + 1))
        self.tree, self.clock = tree, clock or time.perf_counter  # clock: seconds, a float (tests give their own)
        self.seconds: dict[int, float] = {}  # arm -> moving average of a round's wall time
        self.emitted: dict[int, float] = {}  # arm -> moving average of the tokens a round emits (trees)
        self.accepted, self.rejected = 1.0, 1.0  # moving sums behind α̂ (a prior of α̂ = 0.5)
        self.best, self.rounds, self.asked, self.turn = gamma, 0, gamma, 0
        self.mark = None

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def start(self) -> None:
        self.mark = self.clock()

    def resume(self, last: Adaptive) -> None:
        """Start from another generation's estimates: its round times, α̂ sums and best arm (its clock mark, round
        count and pending choice stay this generation's)."""
        self.seconds, self.emitted = dict(last.seconds), dict(last.emitted)
        self.accepted, self.rejected = last.accepted, last.rejected
        self.best = self.asked = last.best

    def rate(self, g: int) -> float | None:
        """Expected tokens a second of arm g: from its own round time, or for a chain arm not run yet from the line
        through the two nearest arms that have (a round's cost is about linear in its length: g c + v(g)); None
        while fewer than two arms have run (a tree's arm: only once it has run)."""
        seconds = self.seconds.get(g)
        if seconds is None and not self.tree and len(self.seconds) >= 2:
            (a, ta), (b, tb) = sorted(self.seconds.items(), key=lambda kv: abs(kv[0] - g))[:2]
            seconds = ta + (g - a) * (tb - ta) / (b - a)
        if seconds is None or seconds <= 0:
            return None
        tokens = self.emitted.get(g, 1.0) if (self.tree and g) else tau(self.alpha, g)
        return tokens / seconds

    def _next(self) -> None:
        """The γ of the next round (self.asked): the target alone once early (its time anchors every other
        arm's), then the best arm, or every EXPLORE rounds a neighbour of it: g - 1 and g + 1 in turn, and 0
        every other time while it is within CLOSE of the best (every 8th time when far behind: a probe of the
        target alone costs most where drafting pays most)."""
        self.rounds += 1
        if 0 not in self.seconds:
            self.asked = 0
        elif self.rounds % EXPLORE == 0:
            self.turn += 1
            best, alone = self.rate(self.best), self.rate(0)
            close = best is None or alone is None or alone >= CLOSE * best
            near = [self.best - 1, self.best + 1] + ([0] if self.turn % (2 if close else 8) == 1 else [])
            near = [g for g in dict.fromkeys(near) if g in self.arms and g != self.best]
            self.asked = near[self.turn % len(near)] if near else self.best
        else:
            self.asked = self.best

    def record(self, proposed: int, accepted: int, emitted: int) -> None:
        now = self.clock()
        seconds, self.mark = (now - self.mark if self.mark is not None else None), now
        g = self.asked if self.tree else proposed  # a chain cut short by `room` or the dynamic stop counts as such
        if seconds is not None and seconds > 0:
            self.seconds[g] = seconds if g not in self.seconds else DECAY * self.seconds[g] + (1 - DECAY) * seconds
            if self.tree and g:
                old = self.emitted.get(g, float(emitted))
                self.emitted[g] = DECAY * old + (1 - DECAY) * emitted
        if proposed:
            self.accepted = ALPHA_DECAY * self.accepted + accepted
            self.rejected = ALPHA_DECAY * self.rejected + (accepted < proposed)
        self._pick()
        self._next()

    def _pick(self) -> None:
        """The best arm among those measured; a challenger must beat the current best by MARGIN."""
        current = self.rate(self.best)
        for g in self.arms:
            r = self.rate(g)
            if r is not None and (current is None or r > current * MARGIN):
                self.best, current = g, r


class Memory:
    """The adaptive estimates a generation leaves for the next one with the same target runner, draft and options
    (one process serving many prompts). Keyed by the draft object's identity (held weakly, so a new draft that
    reuses a freed one's id starts afresh) and the options that change a round's cost or acceptance."""

    def __init__(self):
        self._by_draft: dict[int, tuple] = {}  # id(draft) -> (weakref to it, {options key: Adaptive})
        self._no_draft: dict = {}  # context lookup alone

    @staticmethod
    def of(target) -> Memory:
        """The memory kept on the target object generate() is given (a model or a runner)."""
        memory = target.__dict__.get("_specdistill_schedules")
        if memory is None:
            memory = target.__dict__["_specdistill_schedules"] = Memory()
        return memory

    def _slot(self, draft) -> dict:
        if draft is None:
            return self._no_draft
        ref, slot = self._by_draft.get(id(draft), (None, None))
        if ref is None or ref() is not draft:
            ref, slot = weakref.ref(draft), {}
            self._by_draft[id(draft)] = (ref, slot)
        return slot

    def get(self, draft, key: tuple) -> Adaptive | None:
        return self._slot(draft).get(key)

    def put(self, draft, key: tuple, schedule: Schedule) -> None:
        if schedule.adaptive is not None:
            self._slot(draft)[key] = schedule.adaptive
