"""The data engine's training side (issue 25): nested data subsets for a scaling curve, the sweep's scaling
report, and the pipeline's on-policy round."""

from __future__ import annotations

import datasets
import pytest

from decode.errors import UserError
from distill.train import TrainConfig
from distill.train.data import first_tokens


def _rows(lengths: dict[str, int]) -> datasets.Dataset:
    ids = list(lengths)
    return datasets.Dataset.from_dict({"id": ids, "prompt_ids": [[1, 2]] * len(ids),
                                       "response_ids": [[7] * lengths[i] for i in ids]})


def test_data_tokens_takes_first_answers_first_and_nests():
    ds = _rows({"a": 30, "b~s1": 40, "b": 20, "c": 25, "a~s1": 35, "c~s2": 10, "c~s1": 5})
    taken = {n: set(first_tokens(ds, n)["id"]) for n in (1, 50, 75, 76, 165)}
    assert taken[75] == {"a", "b", "c"}  # every first answer (75 tokens) before any sampled one
    assert all(taken[x] <= taken[y] for x, y in zip((1, 50, 75, 76), (50, 75, 76, 165)))  # nested
    assert taken[76] - taken[75] <= {"a~s1", "b~s1", "c~s1"} and len(taken[76]) == 4  # then second answers
    assert taken[165] == set(ds["id"])
    for n in (1, 50, 76):
        got = sum(len(r) for r in first_tokens(ds, n)["response_ids"])
        assert got >= n and got - n < 40  # rows up to the first that reaches n tokens
    with pytest.raises(UserError, match=r"--data-tokens 166: the training rows hold 165 response tokens"):
        first_tokens(ds, 166)


def test_data_tokens_must_not_be_negative():
    with pytest.raises(UserError, match="--data-tokens must be >= 0"):
        TrainConfig(data_tokens=-5)
