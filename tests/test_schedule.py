"""The adaptive schedule (decode/drafting/schedule.py) in a simulated world whose costs and acceptance are known:
it must end near the best constant γ's rate where drafting pays, and near the target alone's where it does not.
Time is the simulation's own clock, so nothing here depends on the machine's speed."""

from __future__ import annotations

import random

import pytest

from decode.drafting.schedule import EXPLORE, Schedule, tau


class World:
    """A round of g drafts costs t1 (g c + v(g)) seconds, v(g) = 1 + slope g (v(0) = 1: the target alone); each
    draft token is accepted with probability alpha until the first rejection."""

    def __init__(self, alpha: float, c: float, slope: float, seed: int = 0):
        self.alpha, self.c, self.slope, self.now = alpha, c, slope, 0.0
        self.rng = random.Random(seed)

    def clock(self) -> float:
        return self.now

    def run(self, g: int) -> tuple[int, int]:
        self.now += g * self.c + 1 + self.slope * g
        n = 0
        while n < g and self.rng.random() < self.alpha:
            n += 1
        return n, n + 1

    def rate(self, g: int) -> float:
        return tau(self.alpha, g) / (g * self.c + 1 + self.slope * g)


def simulate(world: World, kind: str, gamma: int, rounds: int = 4000) -> float:
    """Tokens a second over `rounds` rounds of the schedule in the world."""
    sched = Schedule(kind, gamma, clock=world.clock)
    sched.start()
    tokens = 0
    for _ in range(rounds):
        g = sched.gamma
        n, emitted = world.run(g)
        tokens += emitted
        sched.update(g, n)
    return tokens / world.now


@pytest.mark.parametrize("alpha,c,slope", [(0.8, 0.05, 0.05), (0.6, 0.03, 0.1), (0.9, 0.1, 0.02), (0.4, 0.05, 0.05)])
def test_adaptive_ends_near_the_best_constant_gamma_where_drafting_pays(alpha, c, slope):
    world = World(alpha, c, slope)
    best = max(world.rate(g) for g in range(0, 9))
    assert best > world.rate(0) * 1.05  # drafting pays here
    got = simulate(world, "adaptive", 8)
    assert got >= 0.97 * best, (got, best)


@pytest.mark.parametrize("alpha,c", [(0.0, 0.05), (0.05, 0.1), (0.2, 0.3)])
def test_adaptive_is_never_much_slower_than_the_target_alone(alpha, c):
    world = World(alpha, c, 0.05)
    assert max(world.rate(g) for g in range(1, 9)) < world.rate(0)  # drafting never pays here
    got = simulate(world, "adaptive", 4)
    assert got >= 0.98 * world.rate(0), got
    assert simulate(World(alpha, c, 0.05), "constant", 4) < 0.9 * world.rate(0)  # what a fixed γ would cost


def test_adaptive_follows_a_draft_that_stops_paying_and_starts_again():
    world = World(0.85, 0.05, 0.05)
    sched = Schedule("adaptive", 6, clock=world.clock)
    sched.start()
    chosen = []
    for phase_alpha in (0.85, 0.0, 0.85):
        world.alpha = phase_alpha
        phase = []
        for _ in range(600):
            g = sched.gamma
            n, _ = world.run(g)
            sched.update(g, n)
            phase.append(g)
        chosen.append(phase[-200:])
    assert min(chosen[0]) >= 0 and sum(chosen[0]) / 200 > 2  # drafting
    assert sum(g == 0 for g in chosen[1]) > 200 * (1 - 2 / EXPLORE)  # the target alone but for the probes
    assert sum(chosen[2]) / 200 > 2  # drafting again after a probe


def test_the_other_schedules_are_unchanged():
    s = Schedule("heuristic", 4)
    s.update(4, 4)
    assert s.gamma == 6 and s.max_gamma == 16
    s.update(6, 1)
    assert s.gamma == 5
    assert Schedule("constant", 4).gamma == 4 and Schedule("dynamic", 4, 0.3).confidence == 0.3
    assert Schedule("adaptive", 0).gamma == 0  # no draft: the target alone


def test_a_tree_arm_is_rated_by_what_it_emits():
    now = [0.0]
    sched = Schedule("adaptive", 5, tree=True, clock=lambda: now[0])
    sched.start()
    for _ in range(200):
        g = sched.gamma
        assert g in (0, 5)
        now[0] += 1.3 if g else 1.0
        sched.update(g, 2 if g else 0, 3 if g else 1)  # the tree emits 3 a round at 1.3x the cost
    assert sched.adaptive.best == 5


def _decode_on_a_clock(monkeypatch, target, draft, prompt, options, per_draft: float, stats_out: list | None = None):
    """generate() with the adaptive schedule on a clock where a round of γ drafts costs 1 + per_draft γ seconds and
    the draft's reads of the prompt cost nothing (the schedule sees no wall-clock time at all, so a loaded machine
    cannot move its choices) -> (output, the γ asked before each round); the call's Stats appended to stats_out."""
    from decode import generate
    from decode.drafting import prompt_read, schedule

    now, asked = [0.0], []
    real_next, real_init = schedule.Adaptive._choose, schedule.Adaptive.__init__

    def clock():  # each call ends the round just run
        now[0] += 1.0 + per_draft * (asked[-1] if asked else 0)
        return now[0]

    def recording(self):
        real_next(self)
        asked.append(self.asked)

    def on_clock(self, gamma, tree=False, clock_=None):
        real_init(self, gamma, tree, clock)

    with monkeypatch.context() as m:
        m.setattr(schedule.Adaptive, "_choose", recording)
        m.setattr(schedule.Adaptive, "__init__", on_clock)
        m.setattr(prompt_read, "read_prior", lambda *a: 0.0)
        real_drain = prompt_read.Deferred.drain
        m.setattr(prompt_read.Deferred, "drain", lambda self: (real_drain(self)[0], 0.0))
        out, stats = generate(target, draft, prompt, 120, options)
    if stats_out is not None:
        stats_out.append(stats)
    return out, asked


@pytest.mark.parametrize("tree_nodes", [0, 4])
def test_the_decoder_under_the_adaptive_schedule_keeps_the_targets_output(tiny_llama, noisy_copy, monkeypatch,
                                                                           tree_nodes):
    """γ is chosen before each round, so any choice keeps the greedy output the target's own. Clocks stand in for
    the machine: where drafted rounds cost little the schedule drafts, where they cost much it settles on γ = 0
    (the target alone) but for its probes, and the output holds either way."""
    import torch

    from decode import DecodeOptions, generate

    target = tiny_llama(31, layers=2, hidden=64)
    draft = noisy_copy(target, 3, scale=0.02)
    prompt = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(31)).tolist()
    alone, _ = generate(target, None, prompt, 120)
    options = DecodeOptions(gamma=4, schedule="adaptive", tree_nodes=tree_nodes)
    for per_draft, drafting in ((0.05, True), (2.0, False)):
        out, asked = _decode_on_a_clock(monkeypatch, target, draft, prompt, options, per_draft)
        assert out == alone, per_draft
        zeros = asked[-12:].count(0)
        assert (zeros <= 2) if drafting else (zeros >= 10), (per_draft, asked)


def test_a_generation_resumes_from_the_last_ones_estimates(tiny_llama, noisy_copy, monkeypatch):
    """The second generation with the same target, draft and options starts from the first's estimates: it does not
    time the target alone again before its first probe; another draft, or other options, start afresh."""
    import torch

    from decode import DecodeOptions

    target = tiny_llama(32, layers=2, hidden=64)
    draft, other = noisy_copy(target, 3, scale=0.02), noisy_copy(target, 4, scale=0.02)
    prompt = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(32)).tolist()
    options = DecodeOptions(gamma=4, schedule="adaptive")
    _, first = _decode_on_a_clock(monkeypatch, target, draft, prompt, options, 0.05)
    _, again = _decode_on_a_clock(monkeypatch, target, draft, prompt, options, 0.05)
    _, fresh = _decode_on_a_clock(monkeypatch, target, other, prompt, options, 0.05)
    _, changed = _decode_on_a_clock(monkeypatch, target, draft, prompt, DecodeOptions(gamma=3, schedule="adaptive"),
                                    0.05)
    assert first[0] == 0 and fresh[0] == 0 and changed[0] == 0  # the target alone timed first: nothing carried
    assert 0 not in again[:EXPLORE - 1] and again[0] == first[-1]  # the last generation's best arm, at once


def test_a_generation_whose_schedule_never_drafts_runs_no_draft_forward(tiny_llama, noisy_copy, monkeypatch):
    """Where drafting costs far more than it saves, the first generation tries it (nothing is known yet) and drops
    it; the next starts from that, never drafts, and so never runs the draft at all: not even its read of the
    prompt, which waits for the first drafted round (decode.drafting.prompt_read.Deferred)."""
    import torch

    from decode import DecodeOptions, generate

    target = tiny_llama(33, layers=2, hidden=64)
    draft = noisy_copy(target, 3, scale=0.02)
    prompt = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(33)).tolist()
    alone, _ = generate(target, None, prompt, 120)
    options, stats = DecodeOptions(gamma=4, schedule="adaptive"), []
    _, first = _decode_on_a_clock(monkeypatch, target, draft, prompt, options, 50.0, stats)
    out, second = _decode_on_a_clock(monkeypatch, target, draft, prompt, options, 50.0, stats)
    assert any(first) and stats[0].draft_forwards > 0  # tried once, then dropped
    assert out == alone and set(second) == {0}
    assert stats[1].draft_forwards == 0 and stats[1].draft_seconds == 0 and stats[1].draft_prompt_seconds == 0


def test_drafting_starts_only_where_it_wins_back_the_drafts_read_of_the_prompt():
    """A draft that pays 1.3x a round but has not read its prompt yet (S seconds): it starts when the tokens left
    save more than S at the gain's lower bound, and stays with the target alone when they do not."""

    def schedule(remaining: float, read_cost: float):
        now = [0.0]
        sched = Schedule("adaptive", 2, clock=lambda: now[0])
        sched.start()
        for _ in range(60):  # learn: γ 2 emits about 2.2 tokens a round for 1.7x a round of the target alone
            g = sched.gamma
            now[0] += 1.7 if g else 1.0
            sched.update(g, [0, 1, 1, 2, 2][sched.adaptive.rounds % 5] if g else 0)
        a = sched.adaptive
        a.drafting, a.rho = False, read_cost / 1000
        a.record(0, 0, 1, remaining=remaining, unread=1000)
        return a.drafting

    assert schedule(remaining=500, read_cost=5.0)  # saves ~0.2 s a token over 500 tokens: 100 s >> 5 s
    assert not schedule(remaining=10, read_cost=5.0)  # ~2 s over 10 tokens does not pay 5 s
    assert schedule(remaining=10, read_cost=0.0)  # a read already made: nothing to win back


def test_probes_cost_at_most_their_share_of_the_time():
    """Generations of 64 tokens where drafting never pays and the draft must read 1,000 prompt tokens (10 rounds'
    time) before it drafts: after the first generation (which tries drafting: nothing is known yet), the reads
    and lost rounds of its probes stay within about PROBE_SHARE of the time, and it does still probe."""
    from decode.drafting.schedule import PROBE_SHARE

    world, carried, lost, start_time = World(0.05, 0.3, 0.05), None, 0.0, None
    for generation in range(80):
        sched = Schedule("adaptive", 4, clock=world.clock, carried=carried)
        unread = 1000
        sched.start(64, unread)
        if generation == 1:
            start_time = world.now
        for left in range(63, -1, -1):
            g, read = sched.gamma, (0, 0.0)
            if g and unread:
                world.now += 10.0  # the read, once a generation
                read, unread = (unread, 10.0), 0
                lost += 10.0 if generation else 0.0
            before = world.now
            n, _ = world.run(g)
            lost += (world.now - before - 1.0) if g and generation else 0.0  # a probe round's time beyond t_0's
            unread += 0 if g or unread >= 1000 else 1  # a round without the draft: one more token to catch up on
            sched.update(g, n, read=read, remaining=left, unread=unread)
        carried = sched.adaptive
    assert 0 < lost <= 1.5 * PROBE_SHARE * (world.now - start_time), (lost, world.now - start_time)


def test_the_drafts_first_read_and_its_short_catch_ups_do_not_price_the_next_prompts_read():
    """The draft's first read carries its set-up (0.25 s for 51 tokens), catch-ups of a few tokens cost a forward
    each: neither may make a 50-token prompt's read look dear once warm reads cost ~3 ms, or drafting never starts."""
    a = Schedule("adaptive", 2, clock=lambda: 0.0).adaptive
    a.record(2, 1, 2, read=(51, 0.25))  # cold
    for _ in range(20):
        a.record(2, 1, 2, read=(3, 0.003))  # a catch-up of 3 tokens: one forward
        a.record(2, 1, 2, read=(50, 0.003))  # a warm prompt read
    a.unread = 50
    assert a.read_cost() < 0.006, a.read_cost()
