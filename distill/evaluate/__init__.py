"""evaluate: every checkpoint inside the bundled decoder against the target alone and the anchors.

    job.py      EvalConfig, run(), main(): `python -m distill.evaluate`
    report.py   report.md, the headline, W&B tables; `python -m distill.evaluate.report EVAL_DIR` rewrites report.md
    plots.py    PNG plots of a report, each drawn from a data function (what the tests check)
    timing.py   implausible timings (v < 1, a drifting target step, speedups above τ): report.json "timing_check"
"""

from distill.evaluate.job import EvalConfig, drafts_of_run, main, run

__all__ = ["EvalConfig", "drafts_of_run", "main", "run"]
