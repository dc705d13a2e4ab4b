"""One tracker for a run: W&B (offline when no API key is set) plus metrics.jsonl, main process only.

Every other rank gets a no-op, so training code can call `tracker.log(...)` anywhere.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Tracker:
    def __init__(self, run_dir: str | Path, config: dict, report_to: str = "wandb", project: str = "specdistill",
                 name: str | None = None, enabled: bool = True, resume_id: str | None = None):
        self.enabled = enabled
        self.run = None
        self.path = Path(run_dir) / "metrics.jsonl"
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if report_to == "wandb":
            import wandb

            offline_without_key()
            # W&B's own banner and sync hints (~20 lines) would bury the job's output; WANDB_SILENT=false brings
            # them back. Where the offline run is (for `wandb sync`) is in specdistill.json's "wandb" record
            os.environ.setdefault("WANDB_SILENT", "true")
            self.run = wandb.init(project=project, name=name, config=config, dir=str(run_dir),
                                  id=resume_id, resume="allow" if resume_id else None)
        elif report_to != "none":
            raise ValueError(f"report_to must be 'wandb' or 'none', got {report_to!r}")

    @property
    def run_info(self) -> dict | None:
        if self.run is None:
            return None
        return {"project": self.run.project, "run_id": self.run.id, "dir": str(Path(self.run.dir).parents[2])}

    def log(self, metrics: dict, step: int) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "time": round(time.time(), 3), **metrics}) + "\n")
        if self.run is not None:
            self.run.log(metrics, step=step)

    def truncate(self, step: int) -> None:
        """Keep metrics.jsonl's rows up to `step` (the resumed checkpoint's; -1 on a fresh start): a run killed
        after its last checkpoint logged steps past it, which the resumed run logs again. Atomic (rename)."""
        if not self.enabled or not self.path.is_file():
            return
        keep = [line for line in self.path.read_text().splitlines(keepends=True)
                if line.strip() and _step(line) <= step]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(keep))
        os.replace(tmp, self.path)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _step(line: str) -> float:
    """A metrics.jsonl row's step; a torn last line (a kill mid-write) counts as past every step, so it goes."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


def offline_without_key() -> None:
    """No API key and no WANDB_MODE: run W&B offline (kept on disk, `wandb sync` later) rather than fail."""
    if not os.environ.get("WANDB_API_KEY") and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
