"""The unfamiliar long-prompt set (distill/data/long_ood, issue 65): the committed JSONL file is what `--prompts
long-ood` and evaluate's long check read, so it is checked as it is (fields, lengths in tokens of the default
target, buckets), against its sources (none of them in the bundled long set) and, where this machine has the source
files, against the build from manifest.yaml."""

from collections import Counter
from pathlib import Path

import pytest
import yaml

from decode.errors import UserError
from decode.prompts import read_prompts
from distill.prompts import load_prompts
from tests.script_module import loaded

DATA = Path(__file__).resolve().parents[1] / "distill" / "data"


@pytest.fixture(scope="module")
def blo():
    # a script next to the data file: loaded by path, as `python distill/data/long_ood/build_long_ood.py`
    with loaded(DATA / "long_ood" / "build_long_ood.py") as module:
        yield module


@pytest.fixture(scope="module")
def rows():
    return read_prompts(DATA / "long_ood" / "long_ood.jsonl")  # parses and validates every line


def test_the_set_is_loadable_by_name_and_long_enough(blo, rows):
    assert load_prompts("long-ood") == rows
    counts = blo.token_counts([dict(r) for r in rows])
    assert blo.validate([dict(r) for r in rows], counts) == []  # 2,048-7,000 tokens, none at 4,000-4,095
    assert len(rows) >= 16 and set(Counter(r["category"] for r in rows)) == set(blo.CATEGORIES)
    buckets = Counter("4K-7K" if n >= 4096 else "2K-4K" for n in counts.values())
    assert min(buckets.values()) >= 8, buckets


def test_no_source_is_one_the_bundled_sets_quote(blo):
    sources, items = blo.load_manifest()
    bundled = yaml.safe_load((DATA / "long" / "manifest.yaml").read_text())["sources"]
    assert not set(sources) & set(bundled)
    assert not {m["package"] for m in sources.values()} & {m["package"] for m in bundled.values()}
    assert {it["source"] for it in items} == set(sources)  # every source is used, and by one item
    assert len({it["source"] for it in items}) == len(items)


def test_the_committed_file_is_the_build(blo, rows):
    try:
        built = blo.build()
    except UserError as e:  # another machine: the sources are not installed (or another version)
        pytest.skip(str(e).splitlines()[0])
    assert built == [dict(r) for r in rows]
