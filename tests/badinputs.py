"""The bad-input harness: each Case is one mistake a user (or an attacker) can make with one job, and the test
runs it and asserts one clear line on stderr, a non-zero exit, and no traceback.

Cases live in tests/badcases_<area>.py (a list CASES each); tests/test_bad_inputs.py runs all of them and checks
docs/bad-inputs.md, the table of every case with the line it printed. Regenerate the table after adding or
changing a case:

    SPECDISTILL_WRITE_BAD_INPUTS=1 python -m pytest -q tests/test_bad_inputs.py

A case runs the job's main() in-process (fast: most mistakes stop before any model loads) unless `process=True`,
where `argv` is a whole command run as a subprocess (launchers, environment variables read at import).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "bad-inputs.md"
JOBS = ("collect", "train", "evaluate", "bench", "pipeline", "sweep", "publish", "copy probe", "report", "peers")


def _main(job: str) -> Callable:
    """The job's main(argv), imported on first use."""
    if job == "collect":
        from distill.collect.job import main
    elif job == "train":
        from distill.train.job import main
    elif job == "evaluate":
        from distill.evaluate.job import main
    elif job == "bench":
        from decode.bench import main
    elif job == "pipeline":
        from distill.pipeline import main
    elif job == "sweep":
        from distill.sweep import main
    elif job == "publish":
        from distill.publish.job import main
    elif job == "copy probe":
        from distill.train.copy_probe import main
    elif job == "report":
        from distill.evaluate.report import main
    elif job == "peers":
        from distill.peers.job import main
    else:
        raise ValueError(f"unknown job {job!r}; one of {JOBS}")
    return main


@dataclass
class Case:
    """job: one of JOBS. what: the bad input in words (the table's second column; unique per job).
    argv(env) -> the job's arguments (or, with process=True, a whole command); it may write files under env.tmp
    first. expect: a fragment the printed line must contain. environ: extra environment variables."""

    job: str
    what: str
    argv: Callable[[SimpleNamespace], list[str]]
    expect: str
    process: bool = False
    environ: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.job}: {self.what}"


@dataclass
class Outcome:
    code: int | str | None  # SystemExit's code (a str is printed by Python as the message, exit status 1)
    line: str  # the one line the user sees last on stderr
    output: str  # everything printed, for the traceback check and the failure message
    raised: str | None = None  # an exception other than SystemExit: a raw traceback

    @property
    def failed(self) -> bool:
        return self.code not in (0, None)


def run(case: Case, env: SimpleNamespace) -> Outcome:
    argv = [str(a) for a in case.argv(env)]
    if case.process:
        proc = subprocess.run(argv, cwd=env.tmp, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO), **case.environ})
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        return Outcome(proc.returncode, lines[-1] if lines else "", proc.stdout + proc.stderr)
    out, err = io.StringIO(), io.StringIO()
    code, raised = None, None
    saved = {k: os.environ.get(k) for k in case.environ}
    os.environ.update(case.environ)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                _main(case.job)(argv)
            except SystemExit as e:
                code = e.code
            except BaseException:  # noqa: BLE001 - a traceback is exactly what the test reports
                raised = traceback.format_exc()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if isinstance(code, str):
        line = code
    else:
        lines = [x for x in err.getvalue().splitlines() if x.strip()]
        line = lines[-1] if lines else ""
    return Outcome(code, line, out.getvalue() + err.getvalue() + (raised or ""), raised)


def normalize(line: str, env: SimpleNamespace) -> str:
    """The line with this run's temporary folders replaced by placeholders, so the table is reproducible."""
    for path, name in ((env.tmp, "TMP"), (env.shared, "SHARED")):
        line = line.replace(str(path), name)
    # a worker's folders (pytest-xdist) sit one level deeper: .../pytest-N/popen-gwK/...
    line = re.sub(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/(popen-gw\d+/)?[^/\s]+", "TMP", line)
    line = re.sub(r"/shards/(r\d+)-\d+", r"/shards/\1-ID", line)  # a shard folder's name holds a unique id
    return line.replace(str(REPO), ".")


def table(rows: dict[str, tuple[str, str, str]]) -> str:
    """rows: case key -> (job, what, line) -> docs/bad-inputs.md."""
    by_job = sorted(rows.values(), key=lambda r: (JOBS.index(r[0]), r[1]))
    head = [
        "# Bad inputs and what each job says",
        "",
        "Generated by `SPECDISTILL_WRITE_BAD_INPUTS=1 python -m pytest -q tests/test_bad_inputs.py` from the cases in",
        "`tests/badcases_*.py`; `tests/test_bad_inputs.py` fails when a job's line differs from this table. Every one",
        "exits non-zero with this single line on stderr, before any long work starts where the input allows it.",
        "`TMP` stands for the folder the case ran in.",
        "",
        f"{len(by_job)} cases.",
        "",
        "| job | bad input | the line it prints |",
        "| --- | --- | --- |",
    ]
    rows_md = [f"| {j} | {_cell(w)} | `{_cell(shown(x))}` |" for j, w, x in by_job]
    return "\n".join(head + rows_md) + "\n"


def shown(line: str) -> str:
    """A line as the table's code span can hold it."""
    return line.replace("`", "'")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def read_table() -> dict[str, str]:
    """docs/bad-inputs.md -> {case key: line as shown}."""
    rows = {}
    if TABLE.exists():
        for row in TABLE.read_text().splitlines():
            m = re.match(r"^\| (.+?) \| (.+?) \| `(.*)` \|$", row)
            if m and m.group(1) in JOBS:
                rows[f"{m.group(1)}: {m.group(2).replace(chr(92) + '|', '|')}"] = m.group(3).replace("\\|", "|")
    return rows
