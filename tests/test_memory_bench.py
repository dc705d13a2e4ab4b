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


def test_memory_bench_build_reports_peak_rss_of_each_way_to_build_the_draft(tmp_path):
    cmd = [sys.executable, "-m", "distill.train.memory_bench", "build", "--hidden", "128", "--layers", "3",
           "--workdir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["how"] for r in runs] == ["from_files", "whole_target"]
    # 2 of 3 layers (each 128 x 512 FFN, 32 heads over 8 KV) and the tied embedding: bf16 from the files, fp32
    # from the whole target loaded as the old build did
    layer = 2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 512 + 2 * 128
    draft = (2 * layer + 49152 * 128 + 128) * 2 / 2**20
    assert abs(runs[0]["draft_mib"] - draft) < 0.1 and abs(runs[1]["draft_mib"] - 2 * draft) < 0.1
    assert all(r["peak_rss_mib"] > r["draft_mib"] for r in runs)
    index = json.loads((tmp_path / "big-target" / "model.safetensors.index.json").read_text())
    assert runs[0]["target_params"] * 2 == index["metadata"]["total_size"]
