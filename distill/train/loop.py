"""The training loop's helpers: one optimizer step, the train/* window, evaluation, checkpoints, preemption.

job.train() runs the loop itself; these are its steps, sharing the run's fixed parts through Run.
"""

from __future__ import annotations

import functools
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from decode.errors import UserError
from distill.tracking import Tracker
from distill.train import checkpoints, export, proxy

if TYPE_CHECKING:
    from distill.train.data import Data
    from distill.train.job import Draft, TrainConfig


@dataclass
class Run:
    """What the loop's helpers share once train() has set it up."""
    cfg: TrainConfig
    accelerator: Any
    student: torch.nn.Module        # Student as prepared: itself, DDP-wrapped, or a DeepSpeed engine
    optimizer: torch.optim.Optimizer
    params: list                    # the trainable parameters (clipped here, off DeepSpeed)
    draft: Draft
    tok: Any
    data: Data
    command: str                    # this stage's command line, recorded in specdistill.json
    run_dir: Path
    tracker: Tracker
    online: Any = None              # a feature head's online features (head.OnlineFeatures); None otherwise


def train_step(run: Run, feed, step: int) -> tuple[dict, int]:
    """Optimizer step `step` over grad_accum micro-batches, the next ones of `feed` (batches.feed, which starts at
    the run's first step): ({"loss": mean, part: mean, ...} over ranks, trained positions on this rank).
    A non-finite loss stops the run before anything is saved."""
    cfg, accelerator, student, optimizer = run.cfg, run.accelerator, run.student, run.optimizer
    deepspeed = accelerator.state.deepspeed_plugin is not None
    step_loss, parts_sum, tokens = torch.zeros((), device=accelerator.device), {}, 0
    for _ in range(cfg.grad_accum):
        b = {k: v.to(accelerator.device, non_blocking=True) for k, v in next(feed).items()}
        if run.online is not None:  # a feature head's features, from the target now
            b["features"] = run.online(b)
        with accelerator.accumulate(student):
            # the head and the loss run inside the Student's forward, over chunks of the N trained positions
            loss, parts = student(b["input_ids"], b["attention_mask"], b["sel"], targets=b)
            accelerator.backward(loss)
            if accelerator.sync_gradients and not deepspeed:
                accelerator.clip_grad_norm_(run.params, cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad()
        step_loss += loss.detach() / cfg.grad_accum
        for k, v in parts.items():
            parts_sum[k] = parts_sum.get(k, 0.0) + float(v) / cfg.grad_accum
        tokens += len(b["sel"])
    # the loss and its parts, averaged over ranks (one collective for all of them): (1 + parts,)
    names = list(parts_sum)
    reduced = accelerator.reduce(torch.stack([step_loss, *(torch.tensor(float(parts_sum[k]), device=step_loss.device)
                                                           for k in names)]), "mean")
    if not torch.isfinite(reduced[0]):
        last = checkpoints.complete(run.run_dir)
        raise UserError(f"loss is {reduced[0].item()} at step {step + 1}; stopped without saving. The last good "
                        f"checkpoint is {last[0] if last else 'none (no checkpoint yet)'}; lower --lr or check the data")
    return dict(zip(["loss", *names], reduced.tolist())), tokens


def train_metrics(window: list[dict], lr: float, tokens_per_s: float) -> dict:
    """train/* over the logging window: each step's loss and parts averaged, the step's lr, throughput."""
    mean = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
    return {"train/loss": round(mean.pop("loss"), 5), "train/lr": lr, "train/tokens_per_s": round(tokens_per_s, 1),
            **{f"train/loss_{k}": round(v, 5) for k, v in mean.items()}}


def report_eval(run: Run, held: proxy.HeldOut, step: int, log) -> dict:
    metrics = proxy.evaluate(run.accelerator, run.student, held)
    run.tracker.log(metrics, step=step)
    log(f"step {step}: {metrics}")
    return metrics


class StopSignal:
    """SIGTERM/SIGUSR1 (SLURM sends one before the time limit) only mark the run; the loop saves and stops at
    the end of the step, once every rank has agreed."""

    def __init__(self):
        self.caught = False
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.caught = True

    def agreed(self, accelerator) -> bool:
        """Whether any rank caught a signal (a collective: every rank calls it at the same step)."""
        return accelerator.reduce(torch.tensor(float(self.caught), device=accelerator.device), "sum").item() > 0


def save_checkpoint(run: Run, step: int, last_eval: dict, window: list[dict]) -> None:
    """checkpoint-N on every rank; the main process writes its hf/ folder (export.py) and prunes old ones."""
    state = {"metrics": last_eval, "window": window, "wandb_run_id": (run.tracker.run_info or {}).get("run_id")}
    main = run.accelerator.is_main_process  # the only one that writes hf/ (and the one W&B runs on)
    meta = export.record(run.cfg, run.draft, run.data, run.command, step, last_eval, run.tracker.run_info) if main else None
    model = run.accelerator.unwrap_model(run.student).model
    write_hf = functools.partial(export.write, model=model, tok=run.tok, vocab_map=run.draft.vocab_map,
                                 calib_seqs=run.draft.calib_seqs, meta=meta)
    path = checkpoints.save(run.accelerator, run.student, run.run_dir, step, state, write_hf)
    if main:
        checkpoints.prune(run.run_dir, run.cfg.keep_last)
        print(f"saved {path}")
