"""The decoder's GPU numbers (issue 37) on a config-only target folder (random weights, --load-format dummy):

    python scripts/gpu_decoder.py TARGET OUT.json graphs   # CUDA graphs: target alone, draft = target (γ 4),
                                                           # layers:0,1 (γ 3), transformers' plain generate
    python scripts/gpu_decoder.py TARGET OUT.json eager    # the same two drafts on the eager FastLlama path
    python scripts/gpu_decoder.py TARGET OUT.json static   # transformers' static-cache compiled generate

Each phase is one process (the GPU check runs each under its own timeout); within a phase every path decodes the
same prompts, interleaved prompt by prompt after a warm-up (decode.bench.measure_many). Greedy, batch 1.
Prompts and lengths: SPECDISTILL_GPU_PROMPTS (default 6) held-out prompts x SPECDISTILL_GPU_NEW (default 64) tokens.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from decode.bench import BenchConfig, encode_all, measure_many, summary
from decode.models.targets import load_draft, load_target
from decode.prompts import read_prompts

HELDOUT = Path(__file__).resolve().parents[1] / "distill" / "data" / "heldout.jsonl"


def main(target_dir: str, out: str, phase: str) -> None:
    if phase == "eager":
        os.environ["SPECDISTILL_CUDA_GRAPHS"] = "0"
    n, new = int(os.environ.get("SPECDISTILL_GPU_PROMPTS", 6)), int(os.environ.get("SPECDISTILL_GPU_NEW", 64))
    t0 = time.perf_counter()
    target, tok = load_target(target_dir, "auto", "auto", load_format="dummy")
    print(f"{phase}: target built in {time.perf_counter() - t0:.1f} s on {target.device}", flush=True)
    rows = read_prompts(str(HELDOUT))[:n]
    encoded = encode_all(rows, tok, new, target.config.max_position_embeddings)
    common = dict(target=target_dir, prompts=str(HELDOUT), max_new_tokens=new, hf_assisted=False,
                  hf_static=phase == "static")
    specs = [("default", 4), ("layers:0,1", 3)] if phase != "static" else [("layers:0,1", 3)]
    runs = []
    for spec, gamma in specs:
        draft = load_draft(spec, target, tok, device=str(target.device))
        runs.append((draft, BenchConfig(draft=spec, gamma=gamma, **common), phase != "eager"))
    t0 = time.perf_counter()
    results = measure_many(target, tok, runs, rows, encoded, log=None)
    print(f"{phase}: measured in {time.perf_counter() - t0:.1f} s", flush=True)
    for r in results:
        r["phase"] = phase
        r["cuda_graphs"] = phase != "eager"
        print(f"{phase} {r['draft']}: {summary(r)}; cost model {json.dumps(r['cost_model'])}", flush=True)
    Path(out).write_text(json.dumps(results, indent=1) + "\n")
    if torch.cuda.is_available():
        print(f"{phase}: peak GPU memory {torch.cuda.max_memory_allocated() / 1e9:.1f} GB", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
