"""What the pipeline ships: the draft with the highest measured speedup, copied to RUN/draft (what publish takes) when
its output was proven lossless, and the line that says so."""

from __future__ import annotations

import shutil
from pathlib import Path


def ship(out: Path, result: dict) -> dict | None:
    """Copy the draft with the highest measured speedup to RUN/draft (what publish takes) when its greedy output was
    lossless by decode.drafting.lossless's rule for the target's dtype: token for token in float32; in bf16/fp16 up to
    near-ties of the target's logits within the calibrated ε (counted in `excused_divergences`). A divergence
    outside ε, or a run not checked (sampling), ships nothing, and says why.

    A best draft slower than the target alone (speedup < 1) still ships, so it can be inspected and published,
    but flagged: `slower: true` in pipeline.json and a line that says so (ship_line), never as a result."""
    b = result.get("best")
    if not b or not Path(b["draft"]).is_dir():
        return None
    if b.get("lossless") is not True:
        why = ("its output differed from the target alone beyond the lossless rule" if b.get("lossless") is False
               else "losslessness was not checked (sampled decoding)")
        print(f"pipeline: ships no draft: the best one, {b['draft']}, is not proven lossless ({why}); see the report")
        return None
    dest = out / "draft"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(b["draft"], dest)
    return {"kind": b.get("kind"), "from": b["draft"], "folder": str(dest), "speedup": b["speedup"],
            "acceptance_rate": b["acceptance_rate"], "tau": b["tau"], "gamma": b["gamma"],
            "tree_nodes": b.get("tree_nodes", 0),  # measured with a token tree of this many nodes (0: a chain)
            "lossless_rule": b.get("lossless_rule", "exact"), "excused_divergences": b.get("excused_divergences", 0),
            "slower": b["speedup"] < 1.0}


def ship_line(shipped: dict) -> str:
    """The pipeline's last line about what it shipped; a slowdown is named as one (publish's card warns alike)."""
    if shipped["slower"]:
        return (f"pipeline: no draft beat the target alone: best {shipped['speedup']:.4f}x ({shipped['kind']}, "
                f"α {shipped['acceptance_rate']}, γ {shipped['gamma']}); shipped flagged SLOWER -> {shipped['folder']}: "
                "decode with the target alone here")
    return (f"pipeline: ships the {shipped['kind']} draft ({shipped['speedup']}x, α {shipped['acceptance_rate']}) "
            f"-> {shipped['folder']}")
