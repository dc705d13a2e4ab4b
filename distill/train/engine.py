"""The optimizer and the engine: the Student (or HeadStudent) compiled as --compile says, AdamW, and accelerate's
prepare(), which wraps it in DDP or a DeepSpeed engine (with the DeepSpeed settings below)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from distill.train import head, parallel
from distill.train.student import Student

if TYPE_CHECKING:
    from distill.train.config import TrainConfig


def use_compile(cfg: TrainConfig, accelerator) -> bool:
    """--compile resolved: auto = on with CUDA, off on CPU (the default recipe on 2 CPU cores ran slower compiled:
    docs/results.md, issue 38) and off under ZeRO-3 (it gathers each layer's parameters in hooks around its forward,
    which break the graph; --compile on still compiles). ZeRO-2 keeps whole parameters and only reduces gradients in
    hooks as they arrive: compiled under it (one CPU process, the tiny shape, 5 steps) the loss matched the eager
    run's to all 7 digits printed (docs/training-speed.md)."""
    if cfg.compile != "auto":
        return cfg.compile == "on"
    ds_plugin = accelerator.state.deepspeed_plugin
    return accelerator.device.type == "cuda" and (ds_plugin is None or ds_plugin.zero_stage < 3)


def make_engine(cfg: TrainConfig, accelerator, model) -> tuple[torch.nn.Module, torch.optim.Optimizer, list]:
    """(student, optimizer) as prepared by accelerate, and the trainable parameters (DeepSpeed takes grad
    accumulation, micro-batch size and clipping from us)."""
    ds_plugin = accelerator.state.deepspeed_plugin
    if cfg.design == "feature_head":
        student = head.HeadStudent(model, cfg.loss, cfg.jsd_beta, cfg.loss_chunk_mb * 2**20, cfg.ttt_steps, cfg.ttt_decay)
    elif cfg.parallel:  # packed mask levels (distill/train/parallel.py)
        student = parallel.ParallelStudent(model, cfg.parallel, cfg.loss, cfg.jsd_beta, cfg.loss_chunk_mb * 2**20,
                                           cfg.parallel_weight)
    else:
        student = Student(model, cfg.loss, cfg.jsd_beta, cfg.loss_chunk_mb * 2**20)
    if use_compile(cfg, accelerator):
        student.compile_layers()
    params = [p for p in student.parameters() if p.requires_grad]
    # fused: one kernel over every parameter (52 -> 11 ms a step for the default draft's 9.9M trainable parameters
    # on 2 CPU cores). Under DeepSpeed the ZeRO optimizer hands it its flat fp32 partition, one tensor a group:
    # the fused kernel makes one pass over it where the default makes one per arithmetic step
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95), fused=True)
    if ds_plugin is not None:
        deepspeed_settings(ds_plugin.deepspeed_config, cfg, accelerator.mixed_precision)
    student, optimizer = accelerator.prepare(student, optimizer)
    return student, optimizer, params


# DeepSpeed settings the accelerate YAML cannot hold inline (its deepspeed_config takes only accelerate's own keys);
# a --deepspeed_config_file that sets them wins. Why each:
DEEPSPEED = {
    # ZeRO's default throughput timer waits for the device at every forward and every step (2 host syncs a step)
    # to time itself; training times itself at logging steps (loop.Throughput)
    "timers": {"throughput": {"enabled": False}},
    # gradients reduced in ~100 MB buckets (bf16) while backward still runs, not in one 1 GB bucket after it: a
    # 0.44B-parameter draft's whole gradient fits the default 5e8-element bucket, so nothing would overlap.
    # With one process the reduction is a copy either way
    "zero_optimization": {"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 50_000_000,
                          "allgather_bucket_size": 50_000_000},
}


def deepspeed_settings(ds: dict, cfg: TrainConfig, mixed_precision: str = "no") -> None:
    """Fill the DeepSpeed config accelerate built, in place: grad accumulation, micro-batch size and clipping from
    this config (so they live in one place), and DEEPSPEED where the config does not set them.

    bf16 under ZeRO-1/2: DeepSpeed's torch_autocast, not its bf16 mode. The weights and the optimizer stay float32
    and the forward runs under bf16 autocast, as the plain (DDP or one-process) run computes, so a ZeRO-2 run and
    a plain one train the same numbers and their speeds compare like with like (DeepSpeed's bf16 mode would make
    the module pure bf16 with float32 masters in the optimizer). ZeRO-3 keeps the bf16 mode (its partitioned
    parameters are gathered every forward: half the bytes). A config that sets torch_autocast itself wins."""
    ds["gradient_accumulation_steps"] = cfg.grad_accum
    ds["train_micro_batch_size_per_gpu"] = cfg.batch_size
    ds["gradient_clipping"] = cfg.grad_clip
    for key, value in DEEPSPEED.items():
        ds[key] = {**value, **(ds.get(key) or {})}
    stage = int((ds.get("zero_optimization") or {}).get("stage", 0))
    if mixed_precision == "bf16" and stage < 3 and "torch_autocast" not in ds:
        ds["bf16"] = {"enabled": False}
        ds["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
