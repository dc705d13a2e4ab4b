"""distill.pipeline.ship: a best draft slower than the target alone ships flagged, never as a result (unit level:
a crafted evaluation result, no pipeline run)."""

import json

from distill import pipeline


def _result(tmp_path, speedup: float) -> dict:
    draft = tmp_path / "eval-draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    return {"best": {"draft": str(draft), "kind": "feature_head", "gamma": 2, "speedup": speedup,
                     "acceptance_rate": 0.2233, "tau": 1.29, "lossless": True, "lossless_rule": "exact"}}


def test_only_slowdowns_ship_flagged_slower(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shipped = pipeline.ship(out, _result(tmp_path, 0.7174))
    assert shipped["slower"] is True
    assert (out / "draft" / "config.json").is_file()  # kept, so it can still be inspected and published
    line = pipeline.ship_line(shipped)
    assert line.startswith("pipeline: no draft beat the target alone: best 0.7174x (feature_head")
    assert "SLOWER" in line and "ships the" not in line
    assert json.loads(json.dumps(shipped))["slower"] is True  # what pipeline.json carries


def test_a_speedup_ships_as_one(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shipped = pipeline.ship(out, _result(tmp_path, 1.0675))
    assert shipped["slower"] is False
    assert pipeline.ship_line(shipped) == f"pipeline: ships the feature_head draft (1.0675x, α 0.2233) -> {out / 'draft'}"
