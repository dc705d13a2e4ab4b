"""Merge the per-task evaluation reports of an eval.slurm array into one report.json / report.md / plots.

    python slurm/merge_reports.py --output EVAL_DIR PART_DIR [PART_DIR ...]

Each PART_DIR is a `python -m distill.evaluate --output PART_DIR` result. When a part has no report.json yet
(another array task is still running), it says so and exits 0 without writing: the last task to finish merges.
Entries measured twice (the untrained layer-cut anchor that every part adds) are kept once; the first part's
anchors and settings stand for all. The merged report.json is written last and atomically.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from decode import cli
from decode.errors import UserError
from distill.evaluate import report


def merge(parts: list[dict], commands: list[str]) -> dict:
    first = parts[0]
    seen, entries, errors = set(), [], []
    for p in parts:
        for e in p["entries"]:
            key = (e["draft"], e["gamma"])
            if key not in seen:
                seen.add(key)
                entries.append(e)
        errors += p.get("errors", [])
    entries.sort(key=lambda e: (not e.get("trained", True), e.get("step") is None, e.get("step") or 0, e["label"], e["gamma"]))
    anchors = next((p["anchors"] for p in parts if p.get("anchors")), {})
    return {"target": first["target"], "prompts": first["prompts"], "prompt_set": first["prompt_set"],
            "config": first["config"], "command": f"slurm/eval.slurm, {len(parts)} parts merged: " + " ; ".join(commands), "entries": entries, "anchors": anchors,
            "errors": errors, "best": report.best(entries), "parts": len(parts)}


@dataclass
class MergeConfig:
    parts: list[str] = field(default_factory=list, metadata={"positional": True, "help": "per-task evaluation folders"})
    output: str = field(default="", metadata={"help": "EVAL_DIR for the merged report.json / report.md (required)"})

    def __post_init__(self):
        if not self.output:
            raise UserError("give --output EVAL_DIR for the merged report")


def main(argv: list[str] | None = None) -> int:
    try:
        args = cli.parse(MergeConfig, argv, __doc__)
    except UserError as e:
        sys.exit(f"error: {e}")
    missing = [d for d in args.parts if not (Path(d) / "report.json").is_file()]
    if missing:
        print(f"merge: {len(args.parts) - len(missing)}/{len(args.parts)} parts done; waiting for {missing} "
              "(the task that finishes last merges)")
        return 0
    parts = [json.loads((Path(d) / "report.json").read_text()) for d in args.parts]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    result = merge(parts, [p["command"] for p in parts])
    report.write(result, out)
    tmp = out / f".report.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out / "report.json")
    result["output"] = str(out)
    print(report.headline(result))
    print(f"merge: {len(parts)} parts, {len(result['entries'])} entries -> {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
