"""distill.train.copy_probe: the match-length split, and the whole probe on a tiny target that is its own draft."""

import json

import pytest

from decode.errors import UserError
from distill.train import copy_probe

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_match_length():
    assert copy_probe.match_length([1, 2, 3]) == 0
    assert copy_probe.match_length([1, 2, 3, 2]) == 1
    assert copy_probe.match_length([1, 2, 3, 1, 2]) == 2
    assert copy_probe.match_length([5, 1, 2, 3, 9, 5, 1, 2, 3]) == 4  # capped at MAX_NGRAM


def test_summarise_by_hand():
    # (match length, lookup right, draft right)
    recs = [(0, False, True), (1, True, False), (2, True, False), (2, False, True), (3, True, True)]
    s = copy_probe.summarise(recs)
    assert s["positions"] == 5 and s["draft_agreement"] == pytest.approx(3 / 5)
    m1, m2, m3, m4 = (s["by_min_match"][k] for k in (1, 2, 3, 4))
    assert m1["share"] == pytest.approx(4 / 5) and m1["lookup_agreement"] == pytest.approx(3 / 4)
    assert m1["draft_agreement"] == pytest.approx(2 / 4)
    assert m1["lookup_else_draft"] == pytest.approx((1 + 1 + 1 + 0 + 1) / 5)  # the unmatched position keeps the draft
    assert m2["lookup_else_draft"] == pytest.approx((1 + 0 + 1 + 0 + 1) / 5)
    assert m3["share"] == pytest.approx(1 / 5) and m3["lookup_else_draft"] == pytest.approx((1 + 0 + 0 + 1 + 1) / 5)
    assert m4 == {"share": 0.0, "lookup_agreement": None, "draft_agreement": None,
                  "lookup_else_draft": pytest.approx(3 / 5)}
    with pytest.raises(UserError, match="no response positions"):
        copy_probe.summarise([])


def test_probe_on_the_target_as_its_own_draft(tiny_collected, capsys):
    """The target agrees with itself everywhere, on the data and on the random spans."""
    copy_probe.main(["--target", tiny_collected.target, "--draft", tiny_collected.target,
                     "--data", tiny_collected.heldout, "--spans", "4", "--span-len", "8"])
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    assert r["draft_agreement"] == 1.0 and r["positions"] > 0
    assert r["random_span_copy"]["draft"] == r["random_span_copy"]["target"]
    assert "min match" in out


def test_missing_arguments_are_a_clear_error():
    with pytest.raises(SystemExit, match="--draft"):
        copy_probe.main(["--data", "x"])
