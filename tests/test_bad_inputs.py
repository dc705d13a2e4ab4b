"""Every bad input in tests/badcases_*.py ends its job with one clear line and a non-zero exit, no traceback, and
the line is the one docs/bad-inputs.md shows (see tests/badinputs.py for the harness and how to regenerate)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import SimpleNamespace

import badinputs
import pytest

pytestmark = pytest.mark.usefixtures("torch_single_thread")

MODULES = sorted(p.stem for p in Path(__file__).parent.glob("badcases_*.py"))
CASES = [c for m in MODULES for c in importlib.import_module(m).CASES]
LINES: dict[str, tuple[str, str, str]] = {}  # case key -> (job, what, normalized line), filled as cases run


@pytest.fixture(scope="session")
def bad_shared(tmp_path_factory):
    return tmp_path_factory.mktemp("bad_inputs_shared")


def test_case_names_are_unique_and_jobs_known():
    keys = [c.key for c in CASES]
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]
    assert all(c.job in badinputs.JOBS for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_a_bad_input_ends_the_job_with_one_clear_line(case, tiny_collected, bad_shared, tmp_path, request):
    env = SimpleNamespace(tmp=tmp_path, shared=bad_shared, base=tiny_collected, request=request)
    got = badinputs.run(case, env)
    assert got.raised is None, f"a raw traceback:\n{got.raised}"
    assert got.failed, f"exit status {got.code!r} (0 means the mistake passed silently):\n{got.output[-3000:]}"
    assert "Traceback" not in got.output, got.output[-3000:]
    assert "\n" not in got.line.strip() and got.line.startswith("error: "), got.line
    assert case.expect in got.line, f"{case.expect!r} not in {got.line!r}"
    LINES[case.key] = (case.job, case.what, badinputs.normalize(got.line, env))


def test_the_docs_table_shows_every_case_with_the_line_it_printed():
    """Runs last in this file: compares what the cases above printed with docs/bad-inputs.md (or rewrites it)."""
    if len(LINES) < len(CASES):
        pytest.skip(f"only {len(LINES)} of {len(CASES)} cases ran (or passed) in this session")
    if os.environ.get("SPECDISTILL_WRITE_BAD_INPUTS"):
        badinputs.TABLE.write_text(badinputs.table(LINES))
    shown = badinputs.read_table()
    want = {k: badinputs.shown(line) for k, (_, _, line) in LINES.items()}
    stale = {k: (shown.get(k), v) for k, v in want.items() if shown.get(k) != v}
    extra = sorted(set(shown) - set(want))
    assert not stale and not extra, (
        f"docs/bad-inputs.md is stale (regenerate: SPECDISTILL_WRITE_BAD_INPUTS=1 python -m pytest -q "
        f"tests/test_bad_inputs.py): differs {stale}, not a case any more {extra}")
    assert len(want) >= 60
