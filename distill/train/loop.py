"""The training loop's helpers: one optimizer step, the train/* window, evaluation, checkpoints, preemption.

job.train() runs the loop itself; these are its steps, sharing the run's fixed parts through Run.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from decode.errors import UserError
from distill.sync_debug import hot_loop
from distill.tracking import Tracker
from distill.train import checkpoints, export, flops, proxy

if TYPE_CHECKING:
    from distill.train.build import Draft
    from distill.train.config import TrainConfig
    from distill.train.data import Data


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
    peak_lr: float = 0.0            # --lr at this draft's width (config.peak_lr)
    skipped: int = 0                # non-finite steps skipped so far (saved with each checkpoint)
    skipped_in_row: int = 0         # of them, the latest consecutive ones


def train_step(run: Run, feed, step: int) -> tuple[torch.Tensor, list[str], flops.StepTokens]:
    """Optimizer step `step` over grad_accum micro-batches, the next ones of `feed` (a device_feed.DeviceFeed over
    batches.feed, which starts at the run's first step): (row, names, tokens), tokens this rank's counts (padding
    excluded: flops.StepTokens, read from the host copy of the batch), row the (2 + parts,) device tensor [loss,
    non-finite flag, part, ...] of this rank, means over the micro-batches, names the parts' names. Nothing here
    reads the device (no host sync; off DeepSpeed under distill.sync_debug's check when SPECDISTILL_SYNC_DEBUG is set):
    Pending collects the rows and reads them, averaged over ranks, only where the loop needs them (logging,
    evaluation, saving; job.train), and check_finite acts on the flag there.

    A step whose loss or gradients are not finite changes no weight: the gradient norm (computed for clipping
    anyway) is checked on the device and handed to the fused AdamW as `found_inf`, which then skips the whole
    update (weights, moments, step count) inside its kernel, so no extra host sync. Its row says skipped: 1
    (check_finite counts it and stops after --max-nonfinite-steps in a row). Under DeepSpeed the engine steps inside
    backward, so such a step cannot be skipped: its row flags it, and the next read stops the run (check_finite),
    before any save (a saving step reads the rows first) or evaluation."""
    cfg, accelerator, student, optimizer = run.cfg, run.accelerator, run.student, run.optimizer
    deepspeed = accelerator.state.deepspeed_plugin is not None
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper steps this one
    step_loss, parts_sum = torch.zeros((), device=accelerator.device), {}
    tokens = flops.StepTokens()
    bad = torch.zeros((), device=accelerator.device)
    # DeepSpeed's engine reads its own flags from the device inside step(): the sync check covers the plain runs
    with contextlib.nullcontext() if deepspeed else hot_loop(accelerator.device):
        for _ in range(cfg.grad_accum):
            host, b = next(feed)  # device_feed.DeviceFeed: b copied ahead on a side stream on CUDA
            lengths = host["attention_mask"].numpy().sum(1)  # on the host (numpy): no device read
            tokens.add(flops.StepTokens(int(lengths.sum()), len(lengths), int((lengths ** 2).sum()), len(host["sel"])))
            if run.online is not None:  # a feature head's features, from the target now
                b["features"] = run.online(b)
            with accelerator.accumulate(student):
                # the head and the loss run inside the Student's forward, over chunks of the N trained positions
                loss, parts = student(b["input_ids"], b["attention_mask"], b["sel"], targets=b)
                accelerator.backward(loss)
                bad = torch.maximum(bad, (~torch.isfinite(loss.detach())).float())
                if accelerator.sync_gradients and not deepspeed:
                    norm = accelerator.clip_grad_norm_(run.params, cfg.grad_clip)
                    bad = torch.maximum(bad, (~torch.isfinite(norm)).float())  # NaN or inf in a loss or a gradient
                    inner.found_inf = bad  # read by the fused AdamW kernel: 1 skips the update
                optimizer.step()
                optimizer.zero_grad()
            step_loss += loss.detach() / cfg.grad_accum
            for k, v in parts.items():
                v = torch.as_tensor(v).detach().to(device=step_loss.device, dtype=torch.float32)
                parts_sum[k] = parts_sum.get(k, 0.0) + v / cfg.grad_accum
    names = list(parts_sum)
    return torch.stack([step_loss.float(), bad, *(parts_sum[k] for k in names)]), names, tokens


class Pending:
    """Steps' rows (train_step) still on the device; flush() reads them all at once: one all-reduce (mean over
    ranks) and one host read for the whole run of steps, instead of several a step."""

    def __init__(self):
        self.rows: list[torch.Tensor] = []
        self.steps: list[int] = []
        self.names: list[str] = []

    def add(self, step: int, row: torch.Tensor, names: list[str]) -> None:
        self.rows.append(row)
        self.steps.append(step)
        self.names = names

    def flush(self, accelerator) -> list[tuple[int, dict]]:
        """[(step, {"loss": mean, part: mean, ..., "skipped": 0 or 1} over ranks), ...] of the steps added since
        the last flush, in order (every rank calls it at the same step: a collective)."""
        if not self.rows:
            return []
        values = accelerator.reduce(torch.stack(self.rows), "mean").tolist()
        out = [(s, {"loss": v[0], "skipped": float(v[1] > 0), **dict(zip(self.names, v[2:]))})
               for s, v in zip(self.steps, values)]
        self.rows, self.steps = [], []
        return out


def check_finite(run: Run, row: dict, step: int, log) -> None:
    """Act on a step's non-finite flag, `step` 1-based: count a skipped step, and stop the run, saving nothing, after
    --max-nonfinite-steps of them in a row (one is a spike the next batches recover from; many are a diverged run
    or broken data). Under DeepSpeed the flagged step was not skipped (the engine steps inside backward: its
    weights may hold NaN now), so the first one stops the run."""
    if not row.get("skipped"):
        run.skipped_in_row = 0
        return
    if run.accelerator.state.deepspeed_plugin is not None:
        raise UserError(f"loss is {row['loss']} at step {step} (under DeepSpeed the engine steps inside backward, where "
                        f"this loop cannot skip the step); stopped without saving. The last good checkpoint is "
                        f"{_last_good(run)}; lower --lr or check the data")
    run.skipped, run.skipped_in_row = run.skipped + 1, run.skipped_in_row + 1
    log(f"step {step}: loss {row['loss']}: non-finite loss or gradients, step skipped before any weight changed "
        f"({run.skipped} skipped so far, {run.skipped_in_row} in a row)")
    if run.skipped_in_row >= run.cfg.max_nonfinite_steps:
        raise UserError(f"loss is {row['loss']} at step {step}, {run.skipped_in_row} non-finite step(s) in a row "
                        f"(--max-nonfinite-steps {run.cfg.max_nonfinite_steps}); stopped without saving. The last good "
                        f"checkpoint is {_last_good(run)}; lower --lr or check the data")


def _last_good(run: Run) -> str:
    last = checkpoints.complete(run.run_dir)
    return str(last[0]) if last else "none (no checkpoint yet)"


def train_metrics(window: list[dict], lr: float, tokens_per_s: float | None, skipped: int = 0,
                  speed: dict | None = None) -> dict:
    """train/* over the logging window: each trained (not skipped) step's loss and parts averaged, the step's lr,
    throughput (trained positions a second over the window, all ranks; `speed`: more of it, Throughput.read; none
    during the warm-up), and the non-finite steps skipped so far in the run."""
    ok = [w for w in window if not w.get("skipped")] or window
    mean = {k: sum(w[k] for w in ok) / len(ok) for k in ok[0] if k != "skipped"}
    rate = {} if tokens_per_s is None else {"train/tokens_per_s": round(tokens_per_s, 1), **(speed or {})}
    return {"train/loss": round(mean.pop("loss"), 5), "train/lr": lr, **rate, "train/skipped_steps": skipped,
            **{f"train/loss_{k}": round(v, 5) for k, v in mean.items()}}


# bf16 dense tensor-core peaks (FLOP/s, no sparsity) by CUDA device name; the first entry found in the name wins
PEAK_BF16 = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("GH200", 989e12),
             ("A100", 312e12), ("L40S", 362e12), ("L4", 121e12))


def peak_flops(device_name: str) -> float | None:
    """The bf16 dense peak of a CUDA device by its name (torch.cuda.get_device_name), None when not in PEAK_BF16."""
    return next((f for key, f in PEAK_BF16 if key in device_name), None)


WARMUP_STEPS = 3  # steps after a start or resume left out of tokens/s and MFU: the first compiles (torch.compile on a
# GPU) and makes the optimizer state, the second recompiles for dynamic shapes (token-budget batches vary in length)


class Throughput:
    """Tokens a second over each logging window in steady state: the first `warmup` steps after a start or
    resume, and the time of evaluations and saves (pause() around them), are left out; with a known device peak,
    MFU (model FLOPs utilisation) from flops.train_flops. Read at logging steps, where the loop has just read the
    device (so queued work is done); the warm-up's end waits for the device once (`sync`), so its queued work does
    not spill into the first window."""

    def __init__(self, world: int, shape: flops.DraftShape | None, peak: float | None, warmup: int = WARMUP_STEPS,
                 sync=lambda: None):
        self.world, self.shape, self.peak, self.warmup, self.sync = world, shape, peak, warmup, sync
        self.steps, self.start, self.paused = 0, time.perf_counter(), 0.0
        self.tokens = flops.StepTokens()

    def add(self, tokens: flops.StepTokens) -> None:
        self.steps += 1
        if self.steps <= self.warmup:
            if self.steps == self.warmup:  # the steady state starts now
                self.sync()
                self.start, self.paused = time.perf_counter(), 0.0
            return
        self.tokens.add(tokens)

    @contextlib.contextmanager
    def pause(self):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - t

    def read(self) -> tuple[float | None, dict]:
        """(trained positions a second, {"train/input_tokens_per_s", "train/mfu" with a peak}) over the window since
        the warm-up or the last read, all ranks together (ranks run alike: this rank's rate x world); then a new
        window. (None, {}) while the warm-up lasts or when the window holds no step."""
        t = self.tokens
        if self.steps <= self.warmup or not t.sequences:
            return None, {}
        seconds = max(time.perf_counter() - self.start - self.paused, 1e-9)
        out = {"train/input_tokens_per_s": round(t.inputs * self.world / seconds, 1)}
        if self.peak and self.shape is not None:
            out["train/mfu"] = round(flops.train_flops(self.shape, t)["total"] / seconds / self.peak, 5)
        trained_per_s = t.trained * self.world / seconds
        self.start, self.paused, self.tokens = time.perf_counter(), 0.0, flops.StepTokens()
        return trained_per_s, out


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
        """Whether any rank caught a signal (a collective and a host read: every rank calls it at the same step,
        every --signal-every steps)."""
        return accelerator.reduce(torch.tensor(float(self.caught), device=accelerator.device), "sum").item() > 0


class SaveCadence:
    """Which steps save a checkpoint, besides the last one and a stop signal (which always do). --save-every N:
    every N steps. 0 (auto): at multiples of AUTO_STEPS once the time since the last save ended is at least
    (1 / SHARE - 1) times what that save took, so saves take at most ~SHARE of the run. An 8B-shaped draft on a GPU
    writes ~8 GB (fp32 weights and Adam moments, bf16 export), several seconds against ~0.1 s a step: it saves every
    ~1,000+ steps instead of spending a good part of its time writing. (On 2 busy CPU cores the default recipe's
    save took 16 s, 15 of them calibrating the copy circuit's output gain for the export, against 0.7 s a step; its
    config sets --save-every 100.) Any rank's clock may say due (one all-reduce at each candidate step), so all
    ranks save together."""

    AUTO_STEPS = 100
    SHARE = 0.05

    def __init__(self, every: int, clock=time.perf_counter):
        self.every, self.clock = every, clock
        self.last_end, self.last_seconds = clock(), 0.0

    def due(self, step: int, accelerator) -> bool:
        if self.every:
            return step % self.every == 0
        if step % self.AUTO_STEPS:
            return False
        ready = self.clock() - self.last_end >= self.last_seconds * (1 / self.SHARE - 1)
        return accelerator.reduce(torch.tensor(float(ready), device=accelerator.device), "sum").item() > 0

    @contextlib.contextmanager
    def timing(self):
        """Around a save: its duration sets when the next one is due."""
        t = self.clock()
        try:
            yield
        finally:
            self.last_end = self.clock()
            self.last_seconds = self.last_end - t


def save_checkpoint(run: Run, step: int, last_eval: dict, window: list[dict]) -> None:
    """checkpoint-N on every rank; the main process writes its hf/ folder (export.py) and prunes old ones."""
    state = {"metrics": last_eval, "window": window, "wandb_run_id": (run.tracker.run_info or {}).get("run_id"),
             "skipped": run.skipped}
    main = run.accelerator.is_main_process  # the only one that writes hf/ (and the one W&B runs on)
    meta = export.record(run.cfg, run.draft, run.data, run.command, step, last_eval, run.tracker.run_info) if main else None
    model = run.accelerator.unwrap_model(run.student).model
    write_hf = functools.partial(export.write, model=model, tok=run.tok, vocab_map=run.draft.vocab_map,
                                 calib_seqs=run.draft.calib_seqs, meta=meta, dtype=export.train_dtype(run.accelerator))
    path = checkpoints.save(run.accelerator, run.student, run.run_dir, step, state, write_hf)
    if main:
        checkpoints.prune(run.run_dir, run.cfg.keep_last)
        print(f"saved {path}")
