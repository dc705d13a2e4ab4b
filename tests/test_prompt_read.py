"""What the draft reads of the prompt and when (decode/drafting/prompt_read.py): its window (the option, the one
stored with the draft, or the cost model's), its read deferred to the first drafted round, and its catch-up after
rounds it did not draft, apart from its steps. The output is the target's whatever it read, and whenever."""

from __future__ import annotations

import json

import pytest
import torch

from decode import DecodeOptions, generate
from decode.drafting import prompt_read, schedule
from decode.errors import UserError
from decode.models import draft_folder

KW = dict(layers=2, hidden=64, num_attention_heads=4, num_key_value_heads=2)


def _scripted(monkeypatch, script: list[int]) -> None:
    """The adaptive schedule asks script[round] (in turn) instead of choosing."""
    monkeypatch.setattr(schedule.Adaptive, "_choose",
                        lambda self: setattr(self, "asked", script[self.rounds % len(script)]))


@pytest.mark.parametrize("kind", ["chain", "parallel", "tree"])
def test_reads_after_rounds_without_the_draft_keep_the_targets_output(tiny_llama, noisy_copy, monkeypatch, kind):
    """Rounds of the target alone between drafted ones: the draft reads what they emitted in one forward of its
    own (timed as a catch-up), and the output is the target's; the window and the catch-ups are the draft's only
    multi-token forwards."""
    target = tiny_llama(41, **KW)
    draft = noisy_copy(target, 41, scale=0.01)
    if kind == "parallel":
        draft.config.mask_token_id = target.config.vocab_size - 1
    prompt = torch.randint(0, 97, (30,), generator=torch.Generator().manual_seed(41)).tolist()
    want, _ = generate(target, None, prompt, 40)
    _scripted(monkeypatch, [0, 0, 0, 3, 3, 0, 0, 0, 0, 2, 0, 3])
    from decode.runners.fast import FastLlama

    runner, fed = FastLlama(draft), []
    forward = runner.forward
    runner.forward = lambda ids, cache, n, **kw: fed.append(len(ids)) or forward(ids, cache, n, **kw)
    options = DecodeOptions(gamma=3, schedule="adaptive", tree_nodes=4 if kind == "tree" else 0)
    out, stats = generate(target, runner, prompt, 40, options)
    assert out == want
    assert fed[0] == 30 and stats.draft_prompt_seconds > 0  # the read, at the first drafted round (4th)
    assert stats.draft_catchup_seconds > 0 and 4 in fed[1:]  # 4 rounds of the target alone, read together
    assert stats.accepted > 0


def test_the_window_comes_from_the_option_the_draft_folder_or_the_cost_model(tiny_llama, tmp_path):
    """--draft-context N, else the window evaluate stored in the draft's specdistill.json (measured on long prompts:
    applied above MIN_WINDOW tokens), else the cost model's; a prompt no longer than the window is read whole."""
    target, draft = tiny_llama(42, **KW), tiny_llama(43, layers=1, hidden=64, num_attention_heads=4,
                                                        num_key_value_heads=2)
    folder = tmp_path / "draft"
    draft.save_pretrained(folder)
    (folder / draft_folder.META_FILE).write_text(json.dumps({"design": {}}))
    saved = type(draft).from_pretrained(folder)
    assert prompt_read.choose(DecodeOptions(), saved, target.config, 6000).source == "cost model"
    assert draft_folder.store_window(folder, {"window": 768, "chosen_by": "test"})
    assert prompt_read.choose(DecodeOptions(), saved, target.config, 6000) == prompt_read.Window(768, "stored")
    assert draft_folder.store_window(folder, {"window": 128, "chosen_by": "test"})
    assert prompt_read.choose(DecodeOptions(), saved, target.config, 600).tokens == 128
    assert prompt_read.choose(DecodeOptions(), saved, target.config, 300).tokens == 300  # short prompts: read whole
    assert prompt_read.choose(DecodeOptions(draft_context=100), saved, target.config, 300).tokens == 100
    assert prompt_read.choose(DecodeOptions(draft_context=100), saved, target.config, 6000).tokens == 100
    assert json.loads((folder / draft_folder.META_FILE).read_text())["design"] == {}  # the rest kept
    assert not draft_folder.store_window(tmp_path, {"window": 1})  # no specdistill.json: nothing of ours to add to

    # the cost model: the largest power of two (from MIN_WINDOW) whose read costs at most READ_SHARE of the
    # target's prompt forward; a draft of 1 layer of 30 at a 6,000-token prompt reads more than a 2-layer one
    big = tiny_llama(44, layers=30, hidden=64, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=8192)
    w1 = prompt_read.model_window(draft, big.config, 6000)
    w2 = prompt_read.model_window(tiny_llama(45, **KW), big.config, 6000)
    assert w1 >= w2 >= prompt_read.MIN_WINDOW and w1 & (w1 - 1) == 0
    assert prompt_read.model_window(draft, big.config, 300) == prompt_read.MIN_WINDOW  # short prompts: read whole


def test_a_window_beyond_what_the_draft_was_trained_on_is_refused(tiny_llama, tmp_path):
    target = tiny_llama(46, **KW)
    draft = tiny_llama(47, max_position_embeddings=256, **KW)
    with pytest.raises(UserError, match=r"--draft-context 300: this draft was trained on at most 256 tokens \(its "
                                        r"config's max_position_embeddings\); give 1..256, or 0 for the window"):
        generate(target, draft, [1, 2, 3], 4, DecodeOptions(draft_context=300))
    folder = tmp_path / "d"
    draft.save_pretrained(folder)
    (folder / draft_folder.META_FILE).write_text(json.dumps({"train_config": {"max_seq_len": 128}}))
    with pytest.raises(UserError, match="trained on at most 128 tokens .its training's max_seq_len."):
        generate(target, type(draft).from_pretrained(folder), [1, 2, 3], 4, DecodeOptions(draft_context=200))
    with pytest.raises(UserError, match="--draft-context must be 0 .the window chosen by cost. or 1..the draft's"):
        DecodeOptions(draft_context=-1)


def test_the_result_says_where_the_window_came_from(tiny_llama, noisy_copy):
    target = tiny_llama(48, **KW)
    _, stats = generate(target, noisy_copy(target, 48), list(range(1, 21)), 8, DecodeOptions(schedule="constant"))
    assert stats.as_dict()["draft_window"] == {"cost model": {"calls": 1, "tokens": [20, 20]}}
    stats += stats
    assert stats.as_dict()["draft_window"]["cost model"]["calls"] == 2
