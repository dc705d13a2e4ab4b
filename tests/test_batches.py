"""Training examples from collected rows: labels and the teacher's top-k rows stay aligned position by position."""

from __future__ import annotations

import warnings

import pytest

from distill.train import batches


def _row(prompt: list[int], response: list[int]) -> dict:
    # teacher row t starts with response token t, so alignment is checkable position by position
    return {"prompt_ids": prompt, "response_ids": response,
            "topk_ids": [[t, 7] for t in response], "topk_logprobs": [[-0.1, -2.5] for _ in response]}


def _aligned(ex: dict) -> bool:
    return len(ex["labels"]) == len(ex["topk_ids"]) and all(top[0] == y for y, top in zip(ex["labels"], ex["topk_ids"]))


def test_a_response_longer_than_max_seq_len_keeps_its_first_tokens_and_their_teacher_rows():
    response = list(range(1000, 2000))  # 1000 tokens, max_seq_len 512
    with pytest.warns(UserWarning, match=r"1 of 1 responses .* cut to their first 511 tokens.*--max-seq-len"):
        (ex,) = batches.make_examples([_row([1, 2, 3], response)], max_seq_len=512)
    assert ex["labels"] == response[:511] and _aligned(ex)
    assert len(ex["input_ids"]) == 511 and ex["input_ids"][: ex["start"] + 1] == [3]  # prompt + response = 512


def test_a_row_without_prompt_reads_its_first_response_token_as_context():
    response = list(range(50, 80))
    (ex,) = batches.make_examples([_row([], response)], max_seq_len=512)
    assert ex["input_ids"][0] == 50 and ex["labels"] == response[1:] and _aligned(ex)
    response = list(range(50, 650))  # and cut: the labels after the first token, their rows with them
    with pytest.warns(UserWarning):
        (ex,) = batches.make_examples([_row([], response)], max_seq_len=512)
    assert ex["labels"] == response[1:511] and _aligned(ex)


def test_responses_that_fit_are_untouched_and_do_not_warn():
    rows = [_row([1, 2, 3, 4], list(range(10, 20))), _row([5] * 600, list(range(30, 60)))]  # a long prompt is cut
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = batches.make_examples(rows, max_seq_len=64)
    assert first["labels"] == list(range(10, 20)) and _aligned(first) and first["input_ids"][:4] == [1, 2, 3, 4]
    assert second["labels"] == list(range(30, 60)) and _aligned(second) and len(second["input_ids"]) == 63
