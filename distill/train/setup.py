"""A run's setup: the accelerator (one process per device, gloo on CPU), ZeRO-3's plain model builds, quieter
third-party logs, the command line recorded, the resumed state and tracker, and the throughput meter."""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict
from pathlib import Path

import torch

from decode import cli
from decode.errors import UserError
from distill.tracking import Tracker
from distill.train import checkpoints, flops, loop
from distill.train.config import TrainConfig


def throughput(cfg: TrainConfig, accelerator, model) -> loop.Throughput:
    """tokens/s over each logging window in steady state (no warm-up, evals or saves); MFU where the device's bf16
    peak is known, from the FLOPs of the draft's shapes (flops.py)."""
    bf16_cuda = accelerator.device.type == "cuda" and accelerator.mixed_precision == "bf16"
    shape = (flops.head_shape(model, cfg.ttt_steps) if cfg.design == "feature_head" else flops.standalone_shape(model))
    peak = loop.peak_flops(torch.cuda.get_device_name(accelerator.device)) if bf16_cuda else None
    sync = (lambda: torch.cuda.synchronize(accelerator.device)) if accelerator.device.type == "cuda" else (lambda: None)
    return loop.Throughput(accelerator.num_processes, shape, peak, sync=sync)


def launch_command(argv: list[str]) -> str:
    """The command line this training ran as, for specdistill.json: `accelerate launch` sets ACCELERATE_MIXED_PRECISION
    in every process it starts (its simple, multi-GPU and DeepSpeed launchers alike); otherwise it was one plain
    process, which `python distill/train.py` repeats whether it ran as that script or in-process."""
    launcher = "accelerate launch" if "ACCELERATE_MIXED_PRECISION" in os.environ else "python"
    return f"{launcher} distill/train.py {shlex.join(argv)}".rstrip()


def quiet(*args, **kwargs) -> None:
    """print() on every process but the main one."""


def quiet_third_party() -> None:
    """Drop two lines per run that ask nothing of the user: DeepSpeed's "Setting accelerator to CPU" on a box
    without a GPU (it picks the CPU either way; naming it skips the guess), and accelerate's "Removed shared tensor
    {'model.lm_head.weight'}" at every save of a tied-embedding draft (the resume tests reload it exactly)."""
    import logging

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    logger = logging.getLogger("accelerate.utils.other")
    if not any(isinstance(f, _NotSharedTensors) for f in logger.filters):  # once, however many runs in-process
        logger.addFilter(_NotSharedTensors())


class _NotSharedTensors:
    def filter(self, record) -> bool:
        return "Removed shared tensor" not in record.getMessage()


def cpu_computes_bf16() -> bool:
    """Whether this CPU has bf16 matmul instructions (AVX512-BF16 or AMX): there bf16 autocast trains 1.2-1.5x the
    tokens/s of float32 (docs/results.md, issue 63); without them torch emulates bf16 and it is slower."""
    return any(getattr(torch.cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def resolved_precision(cfg: TrainConfig) -> str:
    """--precision as the run computes: bf16 or fp32."""
    if cfg.precision in ("bf16", "fp32"):
        return cfg.precision
    if torch.cuda.is_available():
        return "bf16"
    return "bf16" if cfg.precision == "native" and cpu_computes_bf16() else "fp32"


def _fresh_state_for(mixed_precision: str) -> None:
    """accelerate keeps one process-wide state, and an Accelerator of another mixed precision raises: the pipeline
    runs its stages in one process (a standalone draft in bf16, a head stage in fp32). A single process drops the
    earlier run's state; a launched one (WORLD_SIZE > 1) keeps its process group and the error."""
    from accelerate.state import AcceleratorState

    state = AcceleratorState._shared_state
    if state and int(os.environ.get("WORLD_SIZE", "1")) == 1 and state.get("_mixed_precision", "no") != mixed_precision:
        AcceleratorState._reset_state()


def make_accelerator(cfg: TrainConfig):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    cuda = torch.cuda.is_available()
    multi_cpu = not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1
    mixed = "bf16" if resolved_precision(cfg) == "bf16" else "no"
    _fresh_state_for(mixed)
    # gloo on CPU: without it, multi-process CPU runs each believe they are rank 0 (checked on this project's CPU box)
    return Accelerator(mixed_precision=mixed, step_scheduler_with_optimizer=False,
                       gradient_accumulation_steps=cfg.grad_accum,
                       kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")] if multi_cpu else [])


def prepare_zero3(cfg: TrainConfig, accelerator) -> None:
    """Under ZeRO-3: refuse the copy circuit, and have transformers build plain models.

    accelerate registers its ZeRO-3 config with transformers, which then builds every model partitioned
    (zero.Init) even with zero3_init_flag false; the draft is filled from the target's tensors (and prune's target
    is whole), so both are built as plain models (prepare() partitions the draft) and build_model() restores the
    config after.
    """
    ds_plugin = accelerator.state.deepspeed_plugin
    if ds_plugin is None or ds_plugin.zero_stage != 3:
        return
    if cfg.copy_circuit:
        raise UserError("--copy-circuit keeps its structural zeros with gradient masks, which are not checked under "
                        "ZeRO-3's partitioned parameters; use configs/accelerate/zero2.yaml, ddp.yaml or cpu.yaml")
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()


def resume(cfg: TrainConfig, accelerator, run_dir: Path, log) -> tuple[dict | None, Tracker]:
    """(the newest loadable checkpoint's trainer state, None on a fresh start; the run's tracker, continuing its
    W&B run). Loading restores weights, optimizer and RNG into accelerator; the config is written beside them."""
    run_dir.mkdir(parents=True, exist_ok=True)
    state = checkpoints.resume(accelerator, run_dir)
    if state:
        log(f"resumed from {state['path']} at step {state['step']}")
    tracker = Tracker(run_dir, asdict(cfg), cfg.report_to, cfg.wandb_project, run_dir.name,
                      enabled=accelerator.is_main_process, resume_id=(state or {}).get("wandb_run_id"))
    tracker.truncate(state["step"] if state else -1)  # each step once in metrics.jsonl: drop what comes again
    if accelerator.is_main_process:
        cli.save(cfg, run_dir / "train.config.json")
    return state, tracker
