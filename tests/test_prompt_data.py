"""The bundled prompt set is built from distill/data/source/*.yaml by distill/data/build_prompts.py. The built
train.jsonl / heldout.jsonl are pinned by hash: they are the files every acceptance and speedup number in the
project was measured on, so an edit to a data file or to the builder that changes one byte fails here."""

import hashlib
from pathlib import Path

import pytest

from decode.errors import UserError
from tests.script_module import loaded

DATA = Path(__file__).resolve().parents[1] / "distill" / "data"
# sha256 of the files as they were when the prompt text moved from Python lists into the YAML files (issue 50).
# Appending prompts on purpose changes them: rebuild, check the counts table, then update these two lines.
PINNED = {
    "train.jsonl": "de1838a8bbcee32c307526dd982db412565186c43652d148147757b0629ccd99",
    "heldout.jsonl": "1f45294cf0f0c1b3b21aae245581fbaad38cb1903ff5cdbaf0d8e4faad7ea888",
}


@pytest.fixture(scope="module")
def bp():
    # build_prompts.py is a script next to the data files: loaded by path, as `python distill/data/build_prompts.py` runs it
    with loaded(DATA / "build_prompts.py") as module:
        yield module


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_from_the_data_files_is_byte_identical(bp, tmp_path, capsys):
    assert bp.run(bp.BuildConfig(out=str(tmp_path))) == 0  # validates, writes both files, prints the counts
    assert "| **all** | 612 | 126 | 738 | 69 | 26 |" in capsys.readouterr().out
    for name, digest in PINNED.items():
        assert _sha256(tmp_path / name) == digest, f"{name} built from distill/data/source/ changed"
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), f"committed {name} is not the build"


def test_committed_files_match_the_pinned_hashes():
    for name, digest in PINNED.items():
        assert _sha256(DATA / name) == digest, f"distill/data/{name} was edited or rebuilt from changed data"


def test_a_malformed_item_names_its_place(bp):
    # an unquoted "Note: ..." in YAML loads as a mapping, not text; the builder says where, instead of guessing
    with pytest.raises(UserError, match=r"chat.yaml item 3 .*quoted"):
        bp.to_messages({"Note": "be brief"}, "chat.yaml item 3 (chat-0003)")
    with pytest.raises(UserError, match="passage has 3 words"):
        bp.user_text({"instruction": "Summarize:", "passage": "far too short"}, "summarization.yaml item 91")
    with pytest.raises(UserError, match="layout 'qc'"):
        bp.user_text({"passage": "word " * 80, "question": "Why?", "layout": "qc"}, "context_qa.yaml item 91")
