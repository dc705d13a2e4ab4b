"""`python -m distill.train.memory_bench train` at a tiny scale: it writes collected sets, trains on each in a
subprocess and reports peak RSS per run and their ratio (no threshold asserted: the box is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from distill.collect.shards import collect_info, load_collected

REPO = Path(__file__).resolve().parents[1]


def test_memory_bench_train_reports_peak_rss_per_size(tmp_path):
    cmd = [sys.executable, "-m", "distill.train.memory_bench", "train", "--tokens", "1000", "3000", "--steps", "1",
           "--response-len", "50", "--prompt-len", "8", "--topk", "4", "--hidden", "32", "--layers", "1",
           "--workdir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    runs, summary = lines[:-1], lines[-1]
    assert [r["response_tokens"] for r in runs] == [1000, 3000]
    assert all(100 < r["peak_rss_mib"] < 20000 for r in runs)
    assert summary["summary"] and summary["ratio"] >= 1.0 and set(summary["peak_rss_mib"]) == {"1000", "3000"}
    # the synthetic set is a real collection: training's loader reads it
    ds = load_collected(tmp_path / "data-3000")
    assert len(ds) == 60 and len(ds[0]["topk_ids"][0]) == 4 and collect_info(tmp_path / "data-3000")["k"] == 4
