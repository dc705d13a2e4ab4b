"""The sweep checks every setting before its first stage: a typo fails at once, an impossible design is named up
front (and skipped later while the others run)."""

from __future__ import annotations

import pytest

from distill import sweep


def _config(tmp_path, target: str, text: str) -> str:
    p = tmp_path / "sweep.yaml"
    p.write_text(f"target: {target}\noutput: {tmp_path / 'sweep'}\n" + text)
    return str(p)


@pytest.mark.parametrize("text, message", [
    ("designs: [{name: one, layers: 1}, {name: two, layrs: 2}]\n", "sweep design 'two': unknown option(s) ['layrs']"),
    ("designs: [{name: one, layers: one}]\n", "sweep design 'one': layers must be"),
    ("train: {max_steps: 2}\nevaluate: {gamma: two}\ngrid: {layers: [1]}\n", "sweep `evaluate` section: gamma must be"),
    ("heldout: {categories: [poetry]}\ngrid: {layers: [1]}\n", "unknown category ['poetry']"),
    ("grid: {layers: [1, 2], vocab: []}\n", "`grid` option(s) ['vocab'] list no values"),
])
def test_a_mistake_fails_before_the_first_collection(tiny_collected, tmp_path, text, message):
    """Before, a design's typo or a mistyped evaluate option failed only when that design's turn came, after the
    collection (and the designs before it) ran; an empty grid axis silently gave no designs."""
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--config", _config(tmp_path, tiny_collected.target, text)])
    assert str(exc.value.code).startswith("error: ") and message in str(exc.value.code), exc.value.code
    assert not (tmp_path / "sweep" / "collect").exists()


def test_an_impossible_design_is_named_before_the_first_stage(tiny_collected, tmp_path, capsys):
    cfg = sweep.SweepConfig(target=tiny_collected.target, output=str(tmp_path / "sweep"),
                            designs=[{"name": "fits", "layers": 1}, {"name": "too-deep", "layers": 9}])
    impossible = sweep.check_designs(cfg, tmp_path / "sweep", cfg.all_designs())
    assert list(impossible) == ["too-deep"] and "layers=9" in impossible["too-deep"]
    assert "warning: design too-deep will be skipped: " in capsys.readouterr().err
