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
t_g is the wall time of a round that proposed g tokens (the draft's steps at this context, the verification, the
bookkeeping: what t_1 (g c + v(g)) stands for), an exponential moving average per g; a round ends in a host read of
the accepted tokens, so on a GPU its wall time is its device time too. α̂ is the per-token acceptance, shared by
every g: accepted tokens over accepted tokens + rejections, both moving averages. A token tree has no τ(α, g): its
arm's rate is its own emitted tokens a round over t_g.

The draft's one-off reads are not in t_g: its forward over the prompt's window, deferred to the first round that
drafts (decode.drafting.prompt_read), and its catch-up over tokens emitted in rounds it did not draft. They cost
S = ρ · (tokens it has not read), ρ its measured seconds a read token (reads of READ_SAMPLE tokens or more, weighted
by their tokens, the draft's first read left out as set-up; before any: a prior from the target's own prompt forward,
decode.drafting.prompt_read.read_prior), and are paid once, so drafting must win them back
over the tokens left to generate (R):
    start drafting   when   R (t_0 - t_g / τ) > S   with the gain's lower bound (one standard error)
    keep drafting    while  rate(g) / rate(0) is not below 1 by more than one standard error
The standard error comes from α̂'s counts and the round times' spread, so a draft that is barely even with the
target alone is not started on a hunch, and one that pays is not dropped on one slow round. Until α̂ rests on
EVIDENCE counts drafting is tried, which is how a first generation learns anything.

Probes keep every estimate current as the context grows: a neighbour of the best arm (g - 1, g + 1, or 0 while
drafting; the best drafting arm while not), each charged its expected loss against the best arm (and S, when it
makes the draft read). They are paid from a budget of PROBE_SHARE of the time spent, so probing costs at most
that share.

A generation starts from the estimates the previous one left for the same target, draft, options and prompt length
(Memory; lengths in LENGTHS buckets, since t_g, α̂ and S all move with the context); a length met for the first time
starts from the nearest one's α̂ (at INHERIT weight) and its arms' times relative to t_0, scaled by this length's
t_0 once its first round (the target alone) has timed it.
"""

from __future__ import annotations

import math
import time
import weakref

from decode.options import DEFAULT_CONFIDENCE, check_schedule

EXPLORE = 16  # rounds between two probes at most (adaptive; the budget usually spaces them further)
PROBE_SHARE = 0.01  # of the time spent, what probes may cost (adaptive)
DECAY = 0.9  # weight of the past in a γ's round time (adaptive): about its last 10 rounds
ALPHA_DECAY = 0.97  # weight of the past in α̂'s sums (adaptive): about the last 30 rounds, so α̂ is not noise
MARGIN = 1.02  # a new best γ must beat the current one by 2% (adaptive): noise does not flip the choice
Z = 1.0  # standard errors of the gain that starting (or stopping) drafting must clear (adaptive)
EVIDENCE = 8.0  # α̂'s (decayed) counts below which drafting is tried whatever the estimate says (adaptive)
INHERIT = 0.5  # weight of another length's α̂ counts for a length met for the first time (adaptive)
LENGTHS = (512, 2048, 4096, 8192)  # prompt-length buckets the estimates are kept by (tokens)
READ_SAMPLE = 16  # reads of fewer tokens do not time ρ: a read's fixed cost (one draft forward) dominates them


def tau(alpha: float, g: int) -> float:
    """Expected tokens a round that proposes g tokens emits, per-token acceptance alpha (i.i.d.)."""
    if g <= 0:
        return 1.0
    if alpha >= 1.0:
        return g + 1.0
    return (1 - alpha ** (g + 1)) / (1 - alpha)


def length_bucket(n: int) -> int:
    """The bucket of a prompt of n tokens: 0 below 512, 1 to 2K, 2 to 4K, 3 to 8K, 4 beyond."""
    return sum(n >= b for b in LENGTHS)


class Schedule:
    """generate()'s schedule (module docstring): .gamma before a round, update(proposed, accepted, emitted) after.
    max_gamma bounds every round's length (the caches are sized by it)."""

    def __init__(self, kind: str, gamma: int, confidence: float = DEFAULT_CONFIDENCE, tree: bool = False,
                 clock=None, carried: Adaptive | None = None, nearest: Adaptive | None = None):
        check_schedule(kind)
        self.kind, self.max_gamma = kind, (4 * gamma if kind == "heuristic" else gamma)
        self._gamma = gamma
        self.confidence = confidence if kind == "dynamic" else 0.0
        self.adaptive = None
        if kind == "adaptive" and gamma > 0:
            self.adaptive = Adaptive(gamma, tree, clock)
            if carried is not None and carried.arms == self.adaptive.arms:
                self.adaptive.resume(carried)
            elif nearest is not None and nearest.arms == self.adaptive.arms:
                self.adaptive.inherit(nearest)

    @property
    def gamma(self) -> int:
        """The next round's γ (the adaptive choice is made when the previous round is recorded)."""
        return self.adaptive.asked if self.adaptive is not None else self._gamma

    def start(self, remaining: float = math.inf, unread: int = 0, read_prior: float | None = None) -> None:
        """The first round starts now (after the prompt's forward); remaining: tokens still to generate, unread:
        tokens the draft must read before it drafts, read_prior: seconds a read token before any is timed."""
        if self.adaptive is not None:
            self.adaptive.start(remaining, unread, read_prior)

    def update(self, proposed: int, accepted: int, emitted: int | None = None, *, read: tuple[int, float] = (0, 0.0),
               remaining: float = math.inf, unread: int = 0) -> None:
        """A round proposed `proposed` tokens, accepted `accepted` and emitted `emitted` (accepted + 1 by default);
        read: (tokens, seconds) of the draft's one-off reads in it; remaining and unread as in start()."""
        if self.adaptive is not None:
            self.adaptive.record(proposed, accepted, accepted + 1 if emitted is None else emitted, read, remaining,
                                 unread)
        elif self.kind == "heuristic" and proposed:
            self._gamma = min(self._gamma + 2, self.max_gamma) if accepted == proposed else max(1, self._gamma - 1)


class Arm:
    """One γ's round time: a moving average and the moving average of its squared relative deviation."""

    def __init__(self, seconds: float):
        self.seconds, self.spread, self.count = seconds, 0.0, 1

    def add(self, seconds: float) -> None:
        dev = (seconds - self.seconds) / self.seconds
        self.seconds = DECAY * self.seconds + (1 - DECAY) * seconds
        self.spread = DECAY * self.spread + (1 - DECAY) * dev * dev
        self.count += 1

    def rel_se(self) -> float:
        """Relative standard error of the average: its spread over its effective count (at most 1 / (1 - DECAY))."""
        return math.sqrt(self.spread / min(self.count, 1 / (1 - DECAY)))

    def scaled(self, factor: float) -> Arm:
        arm = Arm(self.seconds * factor)
        arm.spread, arm.count = self.spread, self.count
        return arm


class Adaptive:
    """The adaptive schedule's estimates and choice (module docstring). Arms: 0 and the lengths 1..gamma a chain
    proposes (a tree: 0 and gamma, its one shape)."""

    def __init__(self, gamma: int, tree: bool = False, clock=None):
        self.arms = [0, gamma] if tree else list(range(gamma + 1))
        self.tree, self.clock = tree, clock or time.perf_counter  # clock: seconds, a float (tests give their own)
        self.times: dict[int, Arm] = {}  # arm -> its round time
        self.emitted: dict[int, float] = {}  # arm -> moving average of the tokens a round emits (trees)
        self.accepted, self.rejected = 1.0, 1.0  # moving sums behind α̂ (a prior of α̂ = 0.5)
        self.best, self.drafting, self.asked = gamma, True, gamma
        self.rounds, self.turn, self.last_probe = 0, 0, 0
        self.budget = 0.0  # seconds probes may still cost
        self.rho: float | None = None  # seconds a token of the draft's reads (prompt, catch-up): read_s / read_n
        self.read_s = self.read_n = 0.0  # decayed sums of the timed reads' seconds and tokens
        self.warm = False  # whether the draft's first read (its set-up: allocation, kernels) has passed untimed
        self.ratios: dict[int, Arm] | None = None  # inherited arm times over t_0, until t_0 is timed here
        self.remaining, self.unread, self.rho_prior, self.mark = math.inf, 0, None, None

    # --- estimates

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    @property
    def seconds(self) -> dict[int, float]:
        """Each measured arm's round time (seconds)."""
        return {g: arm.seconds for g, arm in self.times.items()}

    def start(self, remaining: float = math.inf, unread: int = 0, read_prior: float | None = None) -> None:
        self.remaining, self.unread, self.rho_prior = remaining, unread, read_prior
        self.rounds, self.last_probe = 0, 0
        self._choose()
        self.mark = self.clock()

    def resume(self, last: Adaptive) -> None:
        """Start from another generation's estimates at this length: its round times, α̂ sums, best arm and state,
        probe budget and read cost (its clock mark, round count and pending choice stay this generation's)."""
        self.times = {g: arm.scaled(1.0) for g, arm in last.times.items()}
        self.emitted = dict(last.emitted)
        self.accepted, self.rejected = last.accepted, last.rejected
        self.best, self.drafting, self.budget = last.best, last.drafting, last.budget
        self._take_reads(last)
        self.asked = self.best if self.drafting else 0

    def inherit(self, other: Adaptive) -> None:
        """Start from another length's estimates: its α̂ at INHERIT weight, read cost and best arm, and its arms'
        times relative to its t_0 (made seconds once this length's t_0 is timed: the first round is the target
        alone's)."""
        self.accepted, self.rejected = INHERIT * other.accepted, INHERIT * other.rejected
        self.emitted, self.best, self.drafting = dict(other.emitted), other.best, other.drafting
        self._take_reads(other)
        t0 = other.times.get(0)
        if t0 is not None:
            self.ratios = {g: arm.scaled(1 / t0.seconds) for g, arm in other.times.items() if g}

    def _take_reads(self, other: Adaptive) -> None:
        """The read cost another generation measured with this draft (ρ, its sums, whether the set-up read passed)."""
        self.rho, self.read_s, self.read_n, self.warm = other.rho, other.read_s, other.read_n, other.warm

    def rate(self, g: int) -> float | None:
        """Expected tokens a second of arm g: from its own round time, or for a chain arm not run yet from the line
        through the two nearest arms that have (a round's cost is about linear in its length: g c + v(g)); None
        while fewer than two arms have run (a tree's arm: only once it has run)."""
        seconds = self._seconds(g)
        if seconds is None or seconds <= 0:
            return None
        tokens = self.emitted.get(g, 1.0) if (self.tree and g) else tau(self.alpha, g)
        return tokens / seconds

    def _seconds(self, g: int) -> float | None:
        if g in self.times:
            return self.times[g].seconds
        if self.tree or len(self.times) < 2:
            return None
        (a, ta), (b, tb) = sorted(self.seconds.items(), key=lambda kv: abs(kv[0] - g))[:2]
        return ta + (g - a) * (tb - ta) / (b - a)

    def gain(self, g: int) -> tuple[float, float] | None:
        """rate(g) / rate(0) and its relative standard error (α̂'s counts through τ, and both arms' round times);
        None while either rate is unknown."""
        r, r0 = self.rate(g), self.rate(0)
        if r is None or r0 is None:
            return None
        n = self.accepted + self.rejected
        a = min(self.alpha, 0.999)
        if self.tree:
            rel_tau = math.sqrt(a * (1 - a) / n)  # a tree's tokens a round: its α̂'s spread, not the chain's τ
        else:
            dtau = sum(k * a ** (k - 1) for k in range(1, g + 1))  # dτ/dα
            rel_tau = dtau * math.sqrt(a * (1 - a) / n) / tau(a, g)
        rel_t = [self.times[k].rel_se() for k in (g, 0) if k in self.times]
        return r / r0, math.sqrt(rel_tau ** 2 + sum(x * x for x in rel_t))

    def read_cost(self) -> float:
        """S: seconds the draft's reads before its next proposal would cost (0 for a round's usual 1-2 tokens)."""
        rho = self.rho if self.rho is not None else self.rho_prior
        return (rho or 0.0) * self.unread if self.unread > 2 else 0.0

    # --- the choice

    def record(self, proposed: int, accepted: int, emitted: int, read: tuple[int, float] = (0, 0.0),
               remaining: float = math.inf, unread: int = 0) -> None:
        now = self.clock()
        wall, self.mark = (now - self.mark if self.mark is not None else None), now
        read_tokens, read_seconds = read
        if read_tokens >= READ_SAMPLE and read_seconds > 0:
            self._time_read(read_tokens, read_seconds)
        g = self.asked if self.tree else proposed  # a chain cut short by `room` or the dynamic stop counts as such
        if wall is not None and wall > 0:
            self.budget += PROBE_SHARE * wall
            seconds = wall - read_seconds if wall > read_seconds else wall
            if g in self.times:
                self.times[g].add(seconds)
            else:
                self.times[g] = Arm(seconds)
            if self.tree and g:
                old = self.emitted.get(g, float(emitted))
                self.emitted[g] = DECAY * old + (1 - DECAY) * emitted
        if proposed:
            self.accepted = ALPHA_DECAY * self.accepted + accepted
            self.rejected = ALPHA_DECAY * self.rejected + (accepted < proposed)
        if self.ratios is not None and 0 in self.times:  # this length's t_0 is timed: the inherited arms in seconds
            for arm, ratio in self.ratios.items():
                self.times.setdefault(arm, ratio.scaled(self.times[0].seconds))
            self.ratios = None
        self.remaining, self.unread = remaining, unread
        self.rounds += 1
        self._choose()

    def _time_read(self, tokens: int, seconds: float) -> None:
        """ρ from the reads timed so far, weighted by their tokens (the prompt's read dominates the catch-ups). The
        draft's first read is left out: it carries one-off set-up that priced every later prompt's read 50-100x too
        dear (0.25 s for 51 tokens, against ~3 ms a prompt once warm), and a read it stops drafting for is never
        timed again."""
        if not self.warm:
            self.warm = True
            return
        self.read_s = DECAY * self.read_s + seconds
        self.read_n = DECAY * self.read_n + tokens
        self.rho = self.read_s / self.read_n

    def _choose(self) -> None:
        """self.asked for the next round: the target alone until its time anchors the others, else the best arm
        (best drafting arm, or 0 while drafting does not pay), or a probe the budget affords."""
        self.best = self._best_drafting()
        if 0 not in self.times:
            self.asked = 0
            return
        self.drafting = self._pays(self.best)
        choice = self.best if self.drafting else 0
        self.asked = self._probe(choice) if self.rounds - self.last_probe >= EXPLORE else choice

    def _best_drafting(self) -> int:
        """The drafting arm with the highest rate; a challenger must beat the current best by MARGIN."""
        best, current = self.best, self.rate(self.best)
        for g in self.arms[1:]:
            r = self.rate(g)
            if r is not None and (current is None or r > current * MARGIN):
                best, current = g, r
        return best

    def _pays(self, g: int) -> bool:
        """Whether drafting at g beats the target alone by the rules of the module docstring."""
        gain = self.gain(g)
        if self.accepted + self.rejected < EVIDENCE or gain is None:
            return True  # nothing known yet: drafting is how it is learnt
        ratio, se = gain
        cost = self.read_cost()
        if cost or not self.drafting:  # to start, the gain's lower bound must win back the reads over what is left
            t0 = self.times[0].seconds
            saved = self.remaining * t0 * (1 - 1 / max(ratio * (1 - Z * se), 1e-9))
            return saved > cost
        return ratio * (1 + Z * se) >= 1

    def _probe(self, choice: int) -> int:
        """A neighbour of `choice` in turn, if the budget affords its expected loss against `choice`; else choice."""
        near = [choice - 1, choice + 1, 0] if choice else [self.best]
        near = [g for g in dict.fromkeys(near) if g in self.arms and g != choice]
        if not near:
            return choice
        self.turn += 1
        g = near[self.turn % len(near)]
        cost = self._loss(g, choice) + (self.read_cost() if g and not choice else 0.0)
        if cost > self.budget:
            return choice
        self.budget -= cost
        self.last_probe = self.rounds
        return g

    def _loss(self, g: int, choice: int) -> float:
        """Expected seconds a round at g loses against `choice` for the tokens it emits (one round's time where g's
        rate is unknown)."""
        rg, rc = self.rate(g), self.rate(choice)
        tg = self._seconds(g)
        if rg is None or rc is None or tg is None:
            return self.times[0].seconds
        return max(0.0, tg * (1 - rg / rc))


class Memory:
    """The adaptive estimates a generation leaves for the next one with the same target runner, draft, options and
    prompt-length bucket (one process serving many prompts). Keyed by the draft object's identity (held weakly, so
    a new draft that reuses a freed one's id starts afresh) and the options that change a round's cost or
    acceptance."""

    def __init__(self):
        self._by_draft: dict[int, tuple] = {}  # id(draft) -> (weakref to it, {(options key, bucket): Adaptive})
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

    def get(self, draft, key: tuple, bucket: int = 0) -> tuple[Adaptive | None, Adaptive | None]:
        """(the estimates at this length, else None; the nearest other length's, else None)."""
        slot = self._slot(draft)
        if (key, bucket) in slot:
            return slot[key, bucket], None
        others = sorted((abs(b - bucket), b) for k, b in slot if k == key)
        return None, (slot[key, others[0][1]] if others else None)

    def put(self, draft, key: tuple, schedule: Schedule, bucket: int = 0) -> None:
        if schedule.adaptive is not None:
            self._slot(draft)[key, bucket] = schedule.adaptive
