"""The default target's forward of 1, 3, 5 and 7 tokens after a 128-token context, each layer's RoPE, cache write and
attention in the kernel module's one call (decode/runners/csrc/attention.cpp) against torch's ops, interleaved in one
process, median of R rounds after 3 of warm-up (docs/results.md, issue 40). Prints each path's ms, its v (n tokens
against its own one token) and the fused path's time against torch's at each n.

    python scripts/bench_rows_attention.py 19
    SPECDISTILL_SMALLGEMM_ISA=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 \\
        python scripts/bench_rows_attention.py 19          # an AVX2 box, as near as an AVX-512 one gets
"""
import sys
import time

import torch

from decode.models.targets import load_model
from decode.runners.choice import runner_for

R = int(sys.argv[1]) if len(sys.argv) > 1 else 19
ROWS = (1, 3, 5, 7)
model = load_model("default", "float32")
model = model[0] if isinstance(model, tuple) else model
runner = runner_for(model)
if runner.rows_attention is None:
    sys.exit("no kernel module here (SPECDISTILL_SMALLGEMM=0, or it did not build): nothing to compare")
print(f"matmul paths: one token {runner.one_row}, verification {runner.verify}; prefetch {runner.prefetch} bytes")
vocab, fused = runner.config.vocab_size, runner.rows_attention
cache = runner.new_cache(128 + max(ROWS) + 1)
runner.forward(torch.randint(0, vocab, (128,)).tolist(), cache, 1)
times = {}
for rep in range(R + 3):
    for path in ("torch", "fused"):
        runner.rows_attention = fused if path == "fused" else None
        for n in ROWS:
            ids = torch.randint(0, vocab, (n,)).tolist()
            t0 = time.perf_counter()
            runner.forward(ids, cache, n)
            if rep >= 3:
                times.setdefault((path, n), []).append(time.perf_counter() - t0)
            cache.crop(-n)
runner.rows_attention = fused
med = {key: sorted(v)[len(v) // 2] * 1e3 for key, v in times.items()}
for path in ("torch", "fused"):
    print(f"{path:6}", "  ".join(f"{n}: {med[(path, n)]:.2f} ms (v {med[(path, n)] / med[(path, 1)]:.3f})" for n in ROWS))
print("fused / torch", "  ".join(f"{n}: {med[('fused', n)] / med[('torch', n)]:.3f}" for n in ROWS))
