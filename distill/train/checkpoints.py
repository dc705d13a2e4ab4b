"""Training checkpoints: atomic, resumable, pruned to keep_last, each with an HF export beside it.

    RUN/checkpoint-000200/            accelerate state (model, optimizer, RNG; DeepSpeed shards under ZeRO)
    RUN/checkpoint-000200/trainer_state.json   step (= data position), metrics, written last
    RUN/checkpoint-000200/hf/         the draft as a plain HF folder (docs/architecture.md, "Draft checkpoint folder"; written by decode.draft_folder)

Everything is written under RUN/.tmp-checkpoint-000200 and renamed into place by the main process after
every rank has finished, so a crash mid-save leaves the previous checkpoint as the newest complete one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from decode.errors import UserError

STATE_FILE = "trainer_state.json"


def name(step: int) -> str:
    return f"checkpoint-{step:06d}"


def complete(run_dir: Path) -> list[Path]:
    """Complete checkpoints, newest first."""
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.iterdir() if re.fullmatch(r"checkpoint-\d+", p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True)


def save(accelerator, wrapper, run_dir: Path, step: int, state: dict, export) -> Path:
    """Save on all ranks; `export(state_dict, hf_dir)` writes the HF folder on the main process."""
    tmp = run_dir / f".tmp-{name(step)}"
    final = run_dir / name(step)
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    state_dict = accelerator.get_state_dict(wrapper)  # gathers ZeRO-3 shards; every rank must call it
    accelerator.wait_for_everyone()  # every rank's files (e.g. random_states_1.pkl) are in before the rename
    if accelerator.is_main_process:
        export(state_dict, tmp / "hf")
        (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step}, indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    accelerator.wait_for_everyone()
    return final


def prune(run_dir: Path, keep_last: int) -> None:
    """Keep the newest keep_last complete checkpoints (0 = all); drop temp folders left by a crash mid-save.

    Called by the main process after save() returned on every rank, so no temp folder is still being written.
    """
    if keep_last > 0:
        for old in complete(run_dir)[keep_last:]:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in run_dir.glob(".tmp-checkpoint-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def unreadable(ckpt: Path) -> Path | None:
    """The first state file in `ckpt` that does not deserialize (to name it when a checkpoint fails to load)."""
    import torch
    from safetensors import safe_open

    for f in sorted(p for p in ckpt.rglob("*") if p.is_file() and p.relative_to(ckpt).parts[0] != "hf"):
        try:
            if f.suffix == ".safetensors":
                with safe_open(str(f), "pt") as g:
                    for k in g.keys():
                        g.get_tensor(k)
            elif f.suffix == ".json":
                json.loads(f.read_text())
            elif f.suffix in (".bin", ".pt", ".pkl"):
                torch.load(f, map_location="cpu", weights_only=False)
        except Exception:  # whatever a torn file raises, it is the culprit
            return f
    return None


def resume(accelerator, run_dir: Path) -> dict | None:
    """Load the newest checkpoint that loads; a corrupt one is reported (which file) and skipped."""
    for ckpt in complete(run_dir):
        try:
            state = json.loads((ckpt / STATE_FILE).read_text())
            accelerator.load_state(str(ckpt))
            return {**state, "path": str(ckpt)}
        except Exception as e:  # a torn or corrupt file raises many types; name it and fall back
            reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            culprit = getattr(e, "filename", None) or unreadable(ckpt)
            what = f"{culprit} is unreadable ({reason})" if culprit else f"it does not load ({reason})"
            print(f"warning: checkpoint {ckpt} skipped: {what}; falling back to the previous one", file=sys.stderr)
    if complete(run_dir) or any(run_dir.glob("checkpoint-*")):
        raise UserError(f"no checkpoint in {run_dir} loads; delete the broken ones (or the run dir) to start over")
    return None
