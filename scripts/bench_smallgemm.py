"""decode.runners.smallgemm's builds against torch's matmul on the default target's 121 float32 matmuls (docs/results.md,
issue 40): one thread (a busy 2-core box preempts a 2-thread pass mid-way; one thread gives the steadier ratio),
M = 1..5 rows (ROWS), every path interleaved in one process, median of R passes, each path's ratio to its own first row count (one row).
Each build runs twice: without software prefetch and with it (`+pf`: smallgemm.PREFETCH_BYTES ahead), the two
choices decode.runners times at a runner's build. THREADS (default 1) sets torch's threads, ROWS (default 1,2,3,4,5)
the row counts.

    python scripts/bench_smallgemm.py avx512,avx2,portable 7     # ISAs this CPU lacks cannot be listed
    MKL_ENABLE_INSTRUCTIONS=AVX2 THREADS=2 python scripts/bench_smallgemm.py avx2 7   # an AVX2 box, as near as one gets
"""
import os
import sys
import time

import torch

from decode.models.targets import load_model
from decode.runners import smallgemm

threads = int(os.environ.get("THREADS", "1"))
torch.set_num_threads(threads)
isas = sys.argv[1].split(",")
R = int(sys.argv[2])
model = load_model("default", "float32")
model = model[0] if isinstance(model, tuple) else model
ws = []
for layer in model.model.layers:
    a, m = layer.self_attn, layer.mlp
    for group in ((a.q_proj, a.k_proj, a.v_proj), (a.o_proj,), (m.gate_proj, m.up_proj), (m.down_proj,)):
        ws.append(torch.cat([lin.weight for lin in group], 0).t().contiguous())
ws.append(model.lm_head.weight.t().contiguous())
nbytes = sum(w.numel() for w in ws) * 4
packed = {isa: [smallgemm.Packed(w, isa=isa) for w in ws] for isa in isas}
paths = ["torch", *[f"{isa}{pf}" for isa in isas for pf in ("", "+pf")]]
rows = [int(m) for m in os.environ.get("ROWS", "1,2,3,4,5").split(",")]
xs = {m: [torch.randn(m, w.shape[0]) for w in ws] for m in rows}
times = {(p, m): [] for p in paths for m in rows}
buf = torch.ones(nbytes // 4)
st = []
for rep in range(R + 1):  # the first pass of each path is a warm-up
    t0 = time.perf_counter()
    buf.sum()
    s = time.perf_counter() - t0
    if rep:
        st.append(s)
    for m in rows:
        for p in paths:
            t0 = time.perf_counter()
            if p == "torch":
                for w, x in zip(ws, xs[m]):
                    x @ w
            else:
                isa = p.removesuffix("+pf")
                for pk, x in zip(packed[isa], xs[m]):
                    pk.prefetch = smallgemm.PREFETCH_BYTES if p.endswith("+pf") else 0
                    pk(x, None)
            if rep:
                times[(p, m)].append(time.perf_counter() - t0)
med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
print(f"{len(ws)} matmuls, {nbytes / 1e6:.0f} MB, {threads} thread(s); a read of the same bytes (sum): {sorted(st)[len(st) // 2] * 1e3:.1f} ms")
for p in paths:
    one = med[(p, rows[0])]
    print(f"{p:11s} " + "  ".join(f"M={m}: {med[(p, m)]:6.1f} ms ({med[(p, m)] / one:.2f})" for m in rows))
