"""The cost model on another device: an evaluation's measured acceptance, another device's c and v (issue 52's H100
prediction). A prediction, never a measurement: the acceptance is this run's, the costs are the ones given.

    python scripts/predict_device.py RUN/eval/report.json --c 0.1 --v 1.0

For each chain or parallel entry without context lookup or a tree, τ comes from the entry's own acceptance by
position (decode.bench.costmodel.depth_acceptance: no i.i.d. assumption), and a round costs
    a chain:     γ draft forwards and one verification   γ·c + v
    a parallel:  one draft forward of γ tokens and one verification   c_block + v
in target steps, with c_block = c (a small forward on a GPU is launch bound: γ tokens cost what one does; give
--c-block otherwise). v is v(γ) for every γ: on a GPU a verification of a few tokens reads the weights once.
"""

from __future__ import annotations

import argparse
import json
import sys

from decode.bench.costmodel import depth_acceptance


def tau_from_depths(depths: list[float], gamma: int) -> float:
    """Expected tokens a round emits: 1 + Σ_k Π_{d ≤ k} a_d over the first γ depths."""
    total, reach = 1.0, 1.0
    for a in depths[:gamma]:
        reach *= a
        total += reach
    return total


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="an evaluation's report.json (distill.evaluate)")
    p.add_argument("--c", type=float, required=True, help="a draft forward over a target step on that device")
    p.add_argument("--c-block", type=float, default=None, help="a parallel draft's forward of γ tokens (default: --c)")
    p.add_argument("--v", type=float, default=1.0, help="a verification over a target step on that device")
    a = p.parse_args(argv)
    entries = [e for e in json.load(open(a.report))["entries"]
               if not e.get("lookup") and not e.get("tree_nodes") and e.get("kind") in ("standalone", "parallel")]
    if not entries:
        sys.exit(f"error: {a.report} has no chain or parallel entry without lookup or a tree; evaluate with "
                 "--lookup 0 --tree-nodes 0")
    c_block = a.c if a.c_block is None else a.c_block
    print(f"prediction at c = {a.c}, c_block = {c_block}, v = {a.v} (acceptance measured in {a.report})")
    print("| draft | kind | γ | acceptance by position | τ | round cost | predicted speedup |")
    print("|---|---|---|---|---|---|---|")
    for e in entries:
        g = e["gamma"]
        depths = depth_acceptance(e["speculative"]["accept_histogram"])
        cost = (c_block if e["kind"] == "parallel" else g * a.c) + a.v
        t = tau_from_depths(depths, g)
        print(f"| {e['label']} | {e['kind']} | {g} | {' '.join(f'{x:.3f}' for x in depths[:g])} | {t:.2f} | "
              f"{cost:.2f} | {t / cost:.2f}x |")


if __name__ == "__main__":
    main()
