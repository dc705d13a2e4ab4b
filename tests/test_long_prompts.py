"""The bundled long-prompt set (distill/data/long, issue 53): the committed JSONL files are what collection and
evaluation read, so they are checked as they are, without rebuilding: fields, ids, categories, lengths in tokens
of the default target (chat template applied, as the collector encodes), the split rule and the held-out count of
every length bucket. Where this machine has the source files, the build from manifest.yaml must equal them."""

from collections import Counter
from pathlib import Path

import pytest
import yaml

from decode.errors import UserError
from decode.prompts import read_prompts
from distill.prompts import load_prompts
from tests.script_module import loaded

LONG = Path(__file__).resolve().parents[1] / "distill" / "data" / "long"


@pytest.fixture(scope="module")
def bl():
    # build_long.py is a script next to the data files: loaded by path, as `python distill/data/long/build_long.py`
    with loaded(LONG / "build_long.py") as module:
        yield module


@pytest.fixture(scope="module")
def splits():
    return {name: read_prompts(LONG / f"{name}.jsonl") for name in ("train", "heldout")}  # parses and validates


@pytest.fixture(scope="module")
def counts(bl, splits):
    return bl.token_counts([r for rows in splits.values() for r in rows])


def test_ids_and_categories(bl, splits):
    rows = [r for rs in splits.values() for r in rs]
    assert len({r["id"] for r in rows}) == len(rows) == 200
    for name, rs in splits.items():
        assert {r["category"] for r in rs} == set(bl.CATEGORIES), name
    held = Counter(r["category"] for r in splits["heldout"])
    assert all(6 <= held[c] <= 8 for c in bl.CATEGORIES), held  # 1 in 6 of each category's 40


def test_lengths_split_and_sources(bl, splits, counts):
    _, items = bl.load_manifest()
    assert {it["id"] for it in items} == set(counts)
    lo, hi = bl.TOKENS
    assert lo == 1000 and hi == 7000 and all(lo <= n <= hi for n in counts.values()), sorted(counts.values())[::20]
    assert bl.validate(splits, counts, items) == []  # split rule, guard bands, no source in both splits
    source = {it["id"]: it["source"] for it in items}
    docs = {name: {source[r["id"]] for r in rs} for name, rs in splits.items()}
    assert not docs["train"] & docs["heldout"]
    held = Counter(bl.bucket(counts[r["id"]]) for r in splits["heldout"])
    assert [held[name] for name, _, _ in bl.BUCKETS] == [12, 12, 11]


def test_the_readme_names_every_source(bl):
    sources, items = bl.load_manifest()
    readme = (LONG / "README.md").read_text(encoding="utf-8")
    assert [it["id"] for it in items if f"| {it['id']} |" not in readme] == []
    assert [p for p in sources if f"`{p}`" not in readme] == []


def test_bundled_names_resolve(splits):
    assert load_prompts("long") == splits["train"]
    assert [r["id"] for r in load_prompts("long-heldout", categories=["long_qa"])] == [
        f"long_qa-{k:04d}" for k in (1, 7, 13, 19, 25, 31, 37)]
    with pytest.raises(UserError, match="long-heldout"):  # the error lists the bundled names
        load_prompts("long-held")


def test_rebuild_equals_the_committed_files(bl, splits):
    sources, items = bl.load_manifest()
    if not all(Path(p).is_file() for p in sources):
        pytest.skip("the source files of the long set are not installed here; the committed files stand")
    train, heldout = bl.build()
    assert {"train": train, "heldout": heldout} == {k: [dict(r) for r in v] for k, v in splits.items()}


def test_a_changed_source_is_named(bl, tmp_path):
    # a manifest whose hash does not match the file: the build stops, names the file and keeps the committed set
    src = tmp_path / "doc.txt"
    src.write_text("one\ntwo\n", encoding="utf-8")
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "sources": {str(src): {"package": "p", "version": "1", "license": "MIT", "sha256": "0" * 64}},
        "items": [{"id": "long_qa-0001", "source": str(src), "lines": [1, 2], "layout": "before",
                   "instruction": "Why?"}],
    }), encoding="utf-8")
    with pytest.raises(UserError, match=r"(?s)committed train\.jsonl and heldout\.jsonl stay authoritative.*"
                                        r"source file changed: .*doc\.txt"):
        bl.build(manifest)


def test_sets_join_with_a_plus_and_an_id_in_two_parts_is_refused():
    both = load_prompts("train+long")
    assert len(both) == len(load_prompts("train")) + len(load_prompts("long"))
    assert {r["category"] for r in load_prompts("heldout+long-heldout", limit=13, spread=True)} >= {"chat", "long_qa"}
    with pytest.raises(UserError, match="is in both train and train"):
        load_prompts("train+train")
    with pytest.raises(UserError, match="an empty part"):
        load_prompts("train+")
