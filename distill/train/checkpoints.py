"""Training checkpoints: atomic, resumable, pruned to keep_last, each with an HF export beside it.

    RUN/checkpoint-000200/            accelerate state (model, optimizer, RNG; DeepSpeed shards under ZeRO)
    RUN/checkpoint-000200/trainer_state.json   step (= data position), metrics, written last
    RUN/checkpoint-000200/hf/         the draft as a plain HF folder (docs/architecture.md, "Draft checkpoint folder"; written by decode.models.draft_folder)

Dtypes: the accelerate state holds the weights the optimizer steps, as they are, so a resume is exact: fp32 under
--precision fp32 and under accelerate's bf16 autocast (there the parameters are the fp32 master weights), 16-bit
module weights plus DeepSpeed's fp32 master partitions in its optimizer state under a bf16 DeepSpeed engine; Adam's
moments in fp32. hf/ is written in the training dtype (export.train_dtype: bf16 for a bf16 run), which its
config.json and specdistill.json name. How often a run saves: loop.SaveCadence.

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


class Refused(UserError):
    """A state file holds an object a checkpoint never holds: crafted or foreign, so it is never loaded."""


def _safe_globals() -> list:
    """What torch's weights-only unpickler may build beside tensors and plain containers: numpy arrays and the
    RNG states' byte strings (accelerate's own list) and, under DeepSpeed, the three classes its ZeRO-2/3 optimizer
    states hold (listed from real ZeRO-2/3 checkpoints, bf16 and fp32)."""
    from accelerate.utils.other import TORCH_SAFE_GLOBALS

    extra = []
    if "deepspeed" in sys.modules:  # only a DeepSpeed run writes (and reads) these
        from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils.tensor_fragment import fragment_address

        extra = [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]
    return [*TORCH_SAFE_GLOBALS, *extra]


def load_pickled(f: Path, ckpt: Path):
    """A .bin/.pt/.pkl state file of checkpoint `ckpt` read without running code: torch's weights-only unpickler,
    which refuses any global not allowed (Refused), so a crafted file cannot call os.system or import anything."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL [\w.]+", str(e))  # torch names the refused callable: "GLOBAL posix.system"
        what = found.group(0) if found else _reason(e)
        raise Refused(f"{f} holds an object a checkpoint never holds ({what}), so it was not loaded: the file was "
                      f"crafted or comes from another program. Delete {ckpt} (to resume from the previous "
                      "checkpoint) or the run dir (to start over)") from None


def unreadable(ckpt: Path, world: int = 1) -> tuple[Path, str] | None:
    """(the first state file in `ckpt` that does not load, why) or None; pickled files only as load_pickled reads
    them (a crafted one raises Refused). Each of the `world` processes' RNG files must be there and hold the RNG
    states, since accelerate's load_state silently resumes without them otherwise. Every rank checks every file,
    so all ranks take the same decision."""
    from safetensors import safe_open

    for rng in (ckpt / f"random_states_{i}.pkl" for i in range(world)):
        if not rng.is_file():  # torn copy, or a run saved by fewer processes than resume it
            return rng, "missing" if world == 1 else f"missing; resume with the processes it was saved by, not {world}"
    for f in sorted(p for p in ckpt.rglob("*") if p.is_file() and p.relative_to(ckpt).parts[0] != "hf"):
        try:
            if f.suffix == ".safetensors":
                with safe_open(str(f), "pt") as g:
                    for k in g.keys():
                        g.get_tensor(k)
            elif f.suffix == ".json":
                json.loads(f.read_text())
            elif f.suffix in (".bin", ".pt", ".pkl"):
                obj = load_pickled(f, ckpt)
                if f.name.startswith("random_states_") and not (isinstance(obj, dict) and RNG_KEYS <= set(obj)):
                    return f, f"not the RNG states accelerate saves (no {sorted(RNG_KEYS)})"
        except Refused:
            raise
        except Exception as e:  # whatever a torn file raises, it is the culprit
            return f, _reason(e)
    return None


def _reason(e: Exception) -> str:
    """An exception's first sentence: torch and safetensors follow it with paragraphs of advice."""
    return str(e).splitlines()[0].split(". ")[0][:200] if str(e).strip() else type(e).__name__


RNG_KEYS = {"random_state", "numpy_random_seed", "torch_manual_seed"}


def resume(accelerator, run_dir: Path) -> dict | None:
    """Load the newest checkpoint that loads; a torn one is reported (which file) and skipped, a crafted one
    (Refused) stops the run. Every state file is checked before accelerate (and DeepSpeed, which unpickles with
    weights_only=False) reads any of them."""
    first = None  # the newest checkpoint's problem, named again if none loads
    for ckpt in complete(run_dir):
        bad = unreadable(ckpt, accelerator.num_processes)
        try:
            if bad is None:
                state = json.loads((ckpt / STATE_FILE).read_text())
                accelerator.load_state(str(ckpt))
                return {**state, "path": str(ckpt)}
        except Exception as e:  # e.g. a checkpoint of another design: its tensors do not fit this draft
            bad = (getattr(e, "filename", None), _reason(e))
        what = f"{bad[0]} is unreadable ({bad[1]})" if bad[0] else f"it does not load ({bad[1]})"
        first = first or what
        print(f"warning: checkpoint {ckpt} skipped: {what}; falling back to the previous one", file=sys.stderr)
    if complete(run_dir) or any(run_dir.glob("checkpoint-*")):
        raise UserError(f"no checkpoint in {run_dir} loads ({first or 'none is complete'}); delete the broken "
                        "ones (or the run dir) to start over")
    return None
