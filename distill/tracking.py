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

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def offline_without_key() -> None:
    """No API key and no WANDB_MODE: run W&B offline (kept on disk, `wandb sync` later) rather than fail."""
    if not os.environ.get("WANDB_API_KEY") and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
