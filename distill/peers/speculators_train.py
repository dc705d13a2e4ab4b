"""One speculators recipe trained on our data and written where distill.evaluate and vLLM take it.

    available(python)   None when `python` can run speculators' trainer, else the one line saying how to install it
    flags(...)          the recipe's command line: speculators' own flags, our head's steps, tokens and feature layers;
                        on a CPU the attention, dtype and loss speculators offers for one (sdpa, float32, its eager
                        loss: the fused one is a Triton kernel, GPU only) and one loader worker (its default of 12
                        spawned workers is sized for GPU nodes)
    plan(...)           a --total-seq-len whose packed batches carry our head's tokens a step, and its epochs
    train(...)          speculators' trainer (distill.peers.speculators_cpu, speculators' own main) -> wall seconds
    export(...)         its last checkpoint (config.json + model.safetensors: the eagle3 format) + the target's tokenizer
                        + specdistill.json, a draft folder decode.models.targets.load_draft reads as a feature head
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import torch

from decode.errors import UserError
from decode.models import draft_folder
from distill.peers.config import INSTALL, RECIPES
from distill.peers.speculators_data import run_logged

VERSION = "0.9.0"  # the speculators release these recipes and the CPU wrapper were written against
CPU_FLAGS = ["--draft-attn-impl", "sdpa", "--hidden-states-dtype", "float32", "--loss-implementation", "eager",
             "--num-workers", "1"]


def available(python: str) -> str | None:
    probe = "import importlib.metadata as m; print(m.version('speculators'))"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no python at {python} ({e}); install speculators: {INSTALL}"
    if done.returncode != 0:
        return f"speculators is not installed for {python}; install it: {INSTALL}"
    if done.stdout.strip() != VERSION:
        return f"{python} has speculators {done.stdout.strip()}; this comparison runs {VERSION}: {INSTALL}"
    return None


def plan(python: str, data: Path, tokens_per_step: float, ratio: float, seed: int, steps: int, log: Path) -> dict:
    """{"total_seq_len", "epochs", "steps", "tokens"}: speculators' packing of `steps` batches carrying our tokens a
    step (distill.peers.speculators_cpu.plan, in the peer's interpreter)."""
    cmd = [python, "-m", "distill.peers.speculators_cpu", "plan", str(data), str(tokens_per_step), str(ratio),
           str(seed), str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + done.stdout + done.stderr)
    if done.returncode != 0:
        raise UserError(f"speculators' packing plan failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}; see {log}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def flags(recipe: str, target_dir: str, data: Path, save: Path, layers: list[int], vocab: int, packing: dict,
          ratio: float, seed: int) -> list[str]:
    """speculators' train flags for `recipe` (config.RECIPES) on our data (see the module docstring)."""
    base = ["--speculator-type", "eagle3", "--verifier-name-or-path", target_dir, "--data-path", str(data),
            "--save-path", str(save / "checkpoints"), "--log-dir", str(save / "logs"),
            "--target-layer-ids", *map(str, layers), "--total-seq-len", str(packing["total_seq_len"]),
            "--max-steps", str(packing["steps"]), "--epochs", str(packing["epochs"]), "--train-data-ratio", str(ratio),
            "--on-missing", "raise", "--seed", str(seed)]
    device = CPU_FLAGS if not torch.cuda.is_available() else []
    return base + device + [x.format(vocab=vocab) for x in RECIPES[recipe]]


def train(python: str, args: list[str], log: Path) -> float:
    """speculators' trainer on `args` (it resumes from its own checkpoints when rerun) -> wall seconds."""
    t0 = time.perf_counter()
    run_logged([python, "-m", "distill.peers.speculators_cpu", *args], log, "speculators' trainer",
               env={"TOKENIZERS_PARALLELISM": "false"})
    return time.perf_counter() - t0


def last_checkpoint(save: Path) -> Path | None:
    """speculators' newest epoch folder (checkpoints/<epoch>/ with model.safetensors)."""
    root = save / "checkpoints"
    found = [p for p in root.iterdir() if p.name.isdigit() and (p / "model.safetensors").is_file()] if root.is_dir() else []
    return max(found, key=lambda p: int(p.name)) if found else None


def export(save: Path, dest: Path, tok, meta: dict) -> Path:
    """The last checkpoint as a draft folder (see the module docstring)."""
    ckpt = last_checkpoint(save)
    if ckpt is None:
        raise UserError(f"speculators wrote no checkpoint under {save / 'checkpoints'}; see {save / 'train.log'}")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(ckpt / name, tmp / name)
    tok.save_pretrained(tmp)
    (tmp / draft_folder.META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
