"""Context lookup (decode.drafting.lookup): what it proposes, and that decoding with it stays exact.

Lookup proposals are drafts with a one-hot q, so greedy output must equal the target alone token for token
(here with prompts that repeat, so lookups happen and are partly rejected), and the draft's KV cache must stay
in step when rounds alternate between lookup and draft. Sampling with lookup is checked in distribution in
test_decode_distribution.py.
"""

import pytest
import torch

from decode import DecodeOptions, generate
from decode.bench import costmodel
from decode.drafting.lookup import continuation

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_continuation_takes_the_longest_then_latest_match():
    #      0  1  2  3  4  5  6  7  8  9
    ctx = [5, 1, 2, 9, 7, 2, 8, 1, 2]
    # suffix [1, 2] occurred at 1..2 (followed by 9, 7, ...); the later bare [2] at 5 is a shorter match
    assert continuation(ctx, 1, 3) == [9, 7, 2]
    assert continuation(ctx, 2, 2) == [9, 7]
    assert continuation(ctx, 3, 2) == []  # [8, 1, 2] never occurred before
    assert continuation([3, 4, 3, 6, 3], 1, 2) == [6, 3]  # equal length: the latest occurrence wins


def test_continuation_edge_cases():
    assert continuation([], 1, 4) == []
    assert continuation([7], 1, 4) == []
    assert continuation([7, 7], 1, 4) == [7]  # the continuation may run into the suffix itself
    assert continuation([1, 2, 3], 1, 4) == []  # no earlier occurrence
    assert continuation([1, 2, 1], 1, 0) == []
    assert continuation([1, 2, 1], 0, 4) == []  # lookup off


def _repetitive_prompt(seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    chunk = torch.randint(0, 97, (4,), generator=g).tolist()
    return chunk + torch.randint(0, 97, (2,), generator=g).tolist() + chunk + chunk[:2]


@pytest.mark.parametrize("gamma, lookup_tokens", [(1, 0), (2, 4), (3, 2)])
def test_greedy_with_lookup_equals_target_alone(tiny_llama, noisy_copy, gamma, lookup_tokens):
    looked_up = 0
    for seed in range(6):
        target = tiny_llama(seed)
        draft = noisy_copy(target, seed, scale=0.05)
        prompt = _repetitive_prompt(seed)
        want, _ = generate(target, None, prompt, 24)
        for d in (draft, None):  # with the draft, and prompt-lookup decoding on its own
            for n in (1, 2):
                out, st = generate(target, d, prompt, 24, DecodeOptions(gamma=gamma, lookup=n, lookup_tokens=lookup_tokens))
                assert out == want, (seed, d is None, n)
                assert st.lookup_rounds <= st.rounds and st.lookup_accepted <= st.lookup_proposed
                assert st.full_rounds >= st.lookup_full
                if d is None:
                    assert st.draft_forwards == 0 and st.lookup_proposed == st.proposed
                looked_up += st.lookup_rounds
    assert looked_up > 0  # the prompts repeat, so lookup must have proposed something


def test_lookup_rejects_negative_length(tiny_llama):
    from decode.errors import UserError

    with pytest.raises(UserError, match="lookup must be >= 0"):
        generate(tiny_llama(0), None, [1, 2, 3], 4, DecodeOptions(gamma=2, lookup=-1))


def test_cost_model_with_lookup_reduces_to_its_parts():
    v = {1: 1.1, 2: 1.2, 3: 1.3, 4: 1.4}
    assert costmodel.speedup_with_lookup(0.4, 2, 0.1, v, 0.0, 0.9, 3) == pytest.approx(costmodel.speedup(0.4, 2, 0.1, 1.2))
    assert costmodel.speedup_with_lookup(0.4, 2, 0.1, v, 1.0, 0.7, 3) == pytest.approx(costmodel.tau(0.7, 3) / 1.3)
    # halfway: token and time totals are averaged, not the two speedups
    half = costmodel.speedup_with_lookup(0.4, 2, 0.1, v, 0.5, 0.7, 3)
    want = (costmodel.tau(0.7, 3) + costmodel.tau(0.4, 2)) / (1.3 + 2 * 0.1 + 1.2)
    assert half == pytest.approx(want)


def test_draft_cache_stays_in_step_across_lookup_rounds(tiny_llama):
    """With the target as its own draft every draft proposal is right, unless the draft's cache missed the
    tokens emitted in lookup rounds: then draft rounds would start from the wrong context and get rejected.
    A 12-token vocabulary makes the output repeat itself, so lookup rounds and draft rounds alternate."""
    for seed in range(4):
        target = tiny_llama(seed, vocab=12)
        prompt = [1, 2, 3, 1, 2]
        out, st = generate(target, target, prompt, 40, DecodeOptions(gamma=3, lookup=1, lookup_tokens=2))
        assert out == generate(target, None, prompt, 40)[0]
        assert st.lookup_rounds > 0 and st.lookup_rounds < st.rounds
        assert st.accepted - st.lookup_accepted == st.proposed - st.lookup_proposed, seed
