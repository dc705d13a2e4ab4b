"""The bundled out-of-distribution prompt set (distill/data/ood, issue 53): the committed ood.jsonl is what
`--prompts ood` reads, so it is checked as it is (parses, validates, categories and counts), against its source
(source.yaml builds exactly it) and against the training prompts (no near-duplicate of any train / held-out prompt)."""

from collections import Counter
from pathlib import Path

import pytest

from decode.prompts import read_prompts
from distill.prompts import load_prompts
from tests.script_module import loaded

OOD = Path(__file__).resolve().parents[1] / "distill" / "data" / "ood"


@pytest.fixture(scope="module")
def bo():
    # build_ood.py is a script next to the data file: loaded by path, as `python distill/data/ood/build_ood.py`
    with loaded(OOD / "build_ood.py") as module:
        yield module


@pytest.fixture(scope="module")
def rows():
    return read_prompts(OOD / "ood.jsonl")  # parses and validates every line


def test_the_committed_file_is_the_build_and_validates(bo, rows):
    built, langs = bo.build()
    assert [dict(r) for r in rows] == built
    assert bo.validate(built, langs) == []


def test_categories_and_counts(bo, rows):
    count = Counter(r["category"] for r in rows)
    assert list(count) == bo.CATEGORIES and 100 <= len(rows) <= 120 and min(count.values()) >= 10, count
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        turns = [m["role"] for m in r["messages"] if m["role"] != "system"]
        assert turns[-1] == "user" and turns == ["assistant" if j % 2 else "user" for j in range(len(turns))], r["id"]
        if r["category"] == "multi_turn":
            assert 3 <= len(turns) <= 7, r["id"]
        if r["category"] == "roleplay":
            assert r["messages"][0]["role"] == "system", r["id"]
    _, langs = bo.build()
    assert set(langs) == {r["id"] for r in rows if r["category"] == "other_language"}
    assert len(set(langs.values())) >= 15 and "en" not in langs.values()


def test_no_prompt_is_a_near_duplicate_of_the_training_prompts(bo, rows):
    near = bo.nearest_bundled([dict(r) for r in rows])
    assert set(near) == {r["id"] for r in rows}
    assert max(j for j, _ in near.values()) < bo.NEAR_TRAIN == 0.5


def test_validation_names_what_is_wrong(bo):
    built, langs = bo.build()
    train_row = bo.read_jsonl(bo.BUNDLED[0])[5]
    bad = [
        {**built[0], "messages": built[0]["messages"][:-1]},  # ends with the assistant
        {**built[1], "id": built[0]["id"]},  # repeated id
        {**built[2], "messages": train_row["messages"]},  # a training prompt
        {**built[3], "messages": built[3]["messages"][:1]},  # a one-turn multi_turn item
    ]
    problems = "\n".join(bo.validate(bad, langs))
    assert "ending with user" in problems and "repeated" in problems
    assert f"near-duplicate of the bundled prompt {train_row['id']}" in problems
    assert "multi_turn has 1 turns" in problems


def test_the_bundled_name_resolves(rows):
    assert load_prompts("ood") == rows
    two = load_prompts("ood", categories=["other_language", "roleplay"], limit=4, spread=True)
    assert [r["id"] for r in two] == ["other_language-0001", "roleplay-0001", "other_language-0002", "roleplay-0002"]
