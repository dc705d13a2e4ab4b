"""Stop conditions: EOS (output ends at it), max_new_tokens (exactly), stop strings; the same with and without a draft."""

import pytest
import torch

from decode import DecodeOptions, generate
from decode.errors import UserError

pytestmark = pytest.mark.usefixtures("torch_single_thread")

PROMPT = [11, 22, 33, 44]


class StubTokenizer:
    """Only what generate() needs: decode(ids) -> text. Token i decodes to '<i>'."""

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


@pytest.fixture(scope="module")
def setup(tiny_llama, noisy_copy):
    target = tiny_llama(5)
    draft = noisy_copy(target, 5)  # agrees partly: a stop can fall inside a run of accepted proposals
    ref, _ = generate(target, None, PROMPT, 40)
    return target, draft, ref


@pytest.mark.parametrize("gamma", [0, 1, 3, 5])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 25])
def test_max_new_tokens_is_exact(setup, gamma, n):
    target, draft, ref = setup
    out, stats = generate(target, draft if gamma else None, PROMPT, n, DecodeOptions(gamma=max(gamma, 1), schedule="constant"))
    assert out == ref[:n]
    assert len(out) == n == stats.new_tokens


@pytest.mark.parametrize("gamma", [0, 2, 5])
@pytest.mark.parametrize("schedule", ["constant", "heuristic", "dynamic"])
def test_eos_ends_the_output(setup, gamma, schedule):
    target, draft, ref = setup
    for pos in (0, 3, 9, 17):
        eos = ref[pos]
        first = ref.index(eos)  # the first occurrence ends generation
        out, stats = generate(
            target, draft if gamma else None, PROMPT, 40, DecodeOptions(gamma=max(gamma, 1), schedule=schedule),
            eos_token_ids=(eos,),
        )
        assert out == ref[: first + 1]
        assert out[-1] == eos and eos not in out[:-1]
        assert stats.new_tokens == len(out)


def test_several_eos_ids_first_one_wins(setup):
    target, draft, ref = setup
    a, b = ref[12], ref[6]
    cut = min(ref.index(a), ref.index(b))
    out, _ = generate(target, draft, PROMPT, 40, DecodeOptions(gamma=4, schedule="constant"), eos_token_ids=(a, b))
    assert out == ref[: cut + 1]


@pytest.mark.parametrize("gamma", [0, 1, 4])
def test_stop_string_truncates_after_the_completing_token(setup, gamma):
    target, draft, ref = setup
    tok = StubTokenizer()
    for pos in (0, 5, 13):
        stop = f"<{ref[pos]}>" if pos == 0 else f"{ref[pos - 1]}><{ref[pos]}"  # spans two tokens except at 0
        # the first position where the decoded output contains the stop string
        end = next(i for i in range(len(ref)) if stop in tok.decode(ref[: i + 1]))
        out, _ = generate(
            target, draft if gamma else None, PROMPT, 40, DecodeOptions(gamma=max(gamma, 1), schedule="constant"), stop_strings=(stop,),
            tokenizer=tok,
        )
        assert out == ref[: end + 1], (stop, out, ref)


def test_eos_and_max_new_tokens_whichever_first(setup):
    target, draft, ref = setup
    eos = ref[10]
    first = ref.index(eos)
    out, _ = generate(target, draft, PROMPT, first, DecodeOptions(gamma=4, schedule="constant"), eos_token_ids=(eos,))
    assert out == ref[:first]  # the limit came first
    out, _ = generate(target, draft, PROMPT, first + 1, DecodeOptions(gamma=4, schedule="constant"), eos_token_ids=(eos,))
    assert out == ref[: first + 1] and out[-1] == eos


def test_stop_strings_need_a_tokenizer(setup):
    target, draft, _ = setup
    with pytest.raises(UserError, match="stop_strings need the tokenizer"):
        generate(target, draft, PROMPT, 5, stop_strings=("x",))


@pytest.mark.parametrize("n", [0, -1])
def test_max_new_tokens_below_one_is_a_user_error(setup, n):
    target, draft, _ = setup
    with pytest.raises(UserError, match=f"max_new_tokens must be >= 1, got {n}"):
        generate(target, draft, PROMPT, n)


def test_target_alone_stats_are_consistent(setup):
    target, _, ref = setup
    out, stats = generate(target, None, PROMPT, 10)
    assert out == ref[:10]
    assert (stats.rounds, stats.proposed, stats.draft_forwards, stats.target_forwards) == (9, 0, 0, 10)
    assert stats.tau == 1.0


def test_sampled_generation_is_reproducible_with_a_seeded_generator(setup):
    target, draft, _ = setup
    sp = DecodeOptions(gamma=3, temperature=1.0, top_k=10, schedule="constant")
    a, _ = generate(target, draft, PROMPT, 20, sp, generator=torch.Generator().manual_seed(7))
    b, _ = generate(target, draft, PROMPT, 20, sp, generator=torch.Generator().manual_seed(7))
    assert a == b and len(a) == 20
