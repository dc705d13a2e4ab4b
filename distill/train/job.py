"""Distill: build a shallow-but-wide draft from a design and train it on collected target outputs.

    accelerate launch -q --config_file configs/accelerate/zero2.yaml distill/train.py \
        --config configs/train/default.yaml [--key value ...]
    python distill/train.py --data runs/collect-default --output runs/train-default     # one CPU process

Rerunning the same command resumes from the newest complete checkpoint in --output and continues exactly
(same data order, optimizer state and RNG), so the loss curve matches an uninterrupted run.

train() reads top to bottom: setup, data, model, batches, optimizer and engine, resume, loop (its steps in loop.py).
The data and examples are in data.py, evaluation in proxy.py, the HF folder written with each checkpoint in export.py.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig

from decode import cli, latency
from decode.draft_folder import VocabMap
from decode.errors import UserError
from decode.layer_cut import config_dtype
from decode.options import DecodeOptions
from decode.targets import load_target, load_tokenizer, resolve
from distill.tracking import Tracker
from distill.train import batches, checkpoints, copy_circuit, flops, head, loop, losses, proxy
from distill.train.data import AUTO_BATCH_TOKENS, Data, batch_order, data_workers, load_data, make_examples
from distill.train.designs import (
    DraftDesign,
    apply_freeze,
    build_draft_from_files,
    circuit_sample,
    describe,
    frequent_tokens,
)
from distill.train.engine import make_engine


@dataclass
class TrainConfig:
    target: str = field(default="default", metadata={"help": "target the data was collected from"})
    data: str | list = field(default="runs/collect-default",
                             metadata={"help": "collected dataset (distill.collect --output), or a list of them (e.g. + on-policy rows)"})
    eval_data: str | None = field(default=None, metadata={"help": "collected held-out dataset (default: 5%% of --data by id)"})
    data_tokens: int = field(default=0, metadata={"help": "train on the first N response tokens of --data (0 = all): "
                             "first answers before sampled ones (--samples), each in a fixed order, so smaller N are "
                             "subsets of larger ones (a data-scaling curve)"})
    output: str = field(default="runs/train-default", metadata={"help": "run dir: checkpoints, metrics.jsonl, W&B"})
    # --- draft design (distill/train/designs.py; feature heads: distill/train/head.py)
    design: str = field(default="standalone", metadata={"help": "standalone (a small causal LM) | feature_head "
                        "(EAGLE-3 style: one layer reading the target's hidden states)"})
    feature_layers: list | None = field(default=None, metadata={"help": "feature_head: target layers whose input "
                                        "hidden states it reads; None = (2, L/2, L-3) as vLLM"})
    features: str = field(default="stored", metadata={"help": "feature_head: stored (extracted once into RUN/features) "
                          "| online (the target runs in every step; nothing stored)"})
    feature_dtype: str = field(default="auto", metadata={"help": "feature_head: stored features as float16 | bfloat16 "
                               "(float16 ends at 65,504; Llama-class targets' massive activations reach thousands). "
                               "auto = bfloat16 for a bf16 target (its weights, or run in bf16), float16 otherwise"})
    ttt_steps: int = field(default=3, metadata={"help": "feature_head: training-time test steps (the head unrolled "
                           "on its own outputs)"})
    ttt_decay: float = field(default=0.8, metadata={"help": "feature_head: loss weight of TTT step k is decay^k"})
    layers: int | list = field(default=2, metadata={"help": "draft depth, or target layer indices e.g. [0, 29]"})
    hidden_size: int | None = field(default=None, metadata={"help": "draft width (prune init); None = target's"})
    intermediate_size: int | None = field(default=None, metadata={"help": "FFN width; None = target's"})
    num_attention_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    num_key_value_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    init: str = field(default="target_layers", metadata={"help": "target_layers | prune | random | pretrained:PATH"})
    vocab: int | str = field(default="full", metadata={"help": "'full' or N most frequent target tokens"})
    freeze: list = field(default_factory=lambda: ["embed"], metadata={"help": "parts kept frozen: embed, head, norm"})
    copy_circuit: bool = field(default=False, metadata={"help": "widen the draft with a hand-built induction (copy) circuit"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank for init=pretrained (0 = full fine-tune)"})
    # --- objective and optimisation
    loss: dict = field(default_factory=lambda: {"fkl": 1.0}, metadata={"help": "weights over fkl, rkl, jsd, tvd, ce, top1 (distill/train/losses.py)"})
    jsd_beta: float = field(default=0.5, metadata={"help": "beta of the jsd term"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate at width --lr-width (see there)"})
    lr_width: int = field(default=576, metadata={"help": "the draft width --lr is tuned for (the default target's "
                          "576); a wider draft trains at lr x lr_width / width (Adam moves every weight ~lr a step, so "
                          "a width-n layer's output ~n lr: muP's 1/width), a narrower one at --lr. 0 = --lr at any width"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: int = field(default=20, metadata={"help": "linear warm-up steps, then cosine decay"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "the cosine decays to this fraction of --lr at --max-steps"})
    max_steps: int = field(default=300, metadata={"help": "optimizer steps"})
    batch_size: int = field(default=8, metadata={"help": "sequences per micro-batch per process"})
    batch_tokens: int = field(default=-1, metadata={"help": "padded tokens per micro-batch per process, similar "
                              "lengths together (replaces --batch-size in training; --batch-size still sizes evaluation "
                              "batches). 0 = off (--batch-size sequences a micro-batch); -1 = auto: "
                              f"{AUTO_BATCH_TOKENS} with a CUDA device, off on CPU"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    max_seq_len: int | None = field(default=None, metadata={"help": "prompt + response tokens; the prompt is cut from "
                                    "the left beyond this. None = the longest response the collection can hold "
                                    "(its max_new_tokens) + 512, so no response is cut"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm"})
    max_nonfinite_steps: int = field(default=20, metadata={"help": "a step with a non-finite loss or gradient is "
                                     "skipped before any weight changes; the run stops after this many in a row"})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32"})
    loss_chunk_mb: int = field(default=256, metadata={"help": "the head and the loss run over chunks of positions "
                               "of this many MiB of float32 logits (peak memory is a few such chunks)"})
    data_workers: int = field(default=-1, metadata={"help": "processes collating batches ahead of the loop; 0 = one "
                              "background thread; -1 = 2 processes on GPU, a thread on CPU"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for activation memory"})
    compile: str | bool = field(default="auto", metadata={"help": "torch.compile the draft's layers: on | off | "
                                "auto (on with a CUDA device, except under ZeRO-3; off on CPU, where it measured "
                                "slower). YAML's on/off/true/false are taken as on/off"})
    seed: int = field(default=0, metadata={"help": "data order and init seed"})
    # --- checkpoints, evaluation, tracking
    save_every: int = field(default=0, metadata={"help": "checkpoint every N steps (and at the end, and on a stop "
                            "signal); 0 = auto: at multiples of 100 steps, once the time since the last save is 19x "
                            "what it took (saves ~5%% of the run at most, however large the draft or fast the device)"})
    keep_last: int = field(default=3, metadata={"help": "checkpoints kept (0 = all)"})
    eval_every: int = field(default=50, metadata={"help": "held-out acceptance proxy every N steps"})
    eval_rows: int = field(default=128, metadata={"help": "held-out rows for the proxy (0 = all)"})
    spec_eval_prompts: int = field(default=0, metadata={"help": "held-out prompts decoded for real at each eval (0 = off)"})
    spec_eval_gamma: int = field(default=DecodeOptions.gamma, metadata={"help": "gamma of that real decode"})
    log_every: int = field(default=10, metadata={"help": "train/* metrics every N steps (the loss is read from the "
                                                            "device only then, and at evals and saves)"})
    signal_every: int = field(default=10, metadata={"help": "check for a stop signal (SIGTERM/SIGUSR1) every N steps"})
    report_to: str = field(default="wandb", metadata={"help": "wandb | none (metrics.jsonl is always written)"})
    wandb_project: str = field(default="specdistill", metadata={"help": "W&B project"})

    def __post_init__(self):
        if self.report_to not in ("wandb", "none"):
            raise UserError(f"--report-to must be 'wandb' or 'none', got {self.report_to!r}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise UserError(f"--precision must be auto, bf16 or fp32, got {self.precision!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise UserError(f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")
        check_bounds(self)
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise UserError(f"--max-seq-len must be >= 2 (one token of context and one to train), got {self.max_seq_len}")
        if self.data_workers < -1:
            raise UserError(f"--data-workers must be -1 (auto), 0 (a thread) or a number of processes, got {self.data_workers}")
        if self.copy_circuit and self.lora_r:
            raise UserError("--lora-r with --copy-circuit: LoRA's dense low-rank updates would write into the circuit's "
                            "private dims; use one or the other")
        if isinstance(self.compile, bool):  # YAML reads `compile: off` (and --compile off) as false
            self.compile = "on" if self.compile else "off"
        if self.compile not in COMPILE:
            raise UserError(f"--compile must be one of {', '.join(COMPILE)}, got {self.compile!r}")
        if self.design not in ("standalone", "feature_head"):
            raise UserError(f"--design must be standalone or feature_head, got {self.design!r}")
        if self.feature_dtype not in ("auto", *head.FEATURE_DTYPES):
            raise UserError(f"--feature-dtype must be auto, {' or '.join(head.FEATURE_DTYPES)}, got {self.feature_dtype!r}")
        if self.features not in head.FEATURE_SOURCES:
            raise UserError(f"--features must be one of {', '.join(head.FEATURE_SOURCES)}, got {self.features!r}")
        if self.design == "feature_head" and (self.copy_circuit or self.lora_r or isinstance(self.layers, list)
                                              or self.init not in ("target_layers", "random")):
            raise UserError("--design feature_head is one decoder layer with --init target_layers or random; "
                            "--copy-circuit, --lora-r and a list of --layers are for standalone drafts")
        if not 0 < self.ttt_decay <= 1:
            raise UserError(f"--ttt-decay must be in (0, 1], got {self.ttt_decay}")
        bad = set(self.loss) - set(losses.LOSS_NAMES)
        weights = list(self.loss.values())
        if bad or not all(isinstance(v, (int, float)) and v >= 0 for v in weights) or not any(v > 0 for v in weights):
            raise UserError(f"--loss {self.loss}: give weights >= 0 (one of them > 0) over {list(losses.LOSS_NAMES)}")

    def draft_design(self) -> DraftDesign:
        keys = ("layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "init", "vocab", "freeze",
                "copy_circuit")
        return DraftDesign(**{k: getattr(self, k) for k in keys})


COMPILE = ("auto", "on", "off")


# the numbers a run cannot use below a bound (a typo such as --lr -1e-3 would otherwise train backwards)
AT_LEAST = {-1: ("batch_tokens",),
            1: ("max_steps", "max_nonfinite_steps", "ttt_steps", "batch_size", "grad_accum", "eval_every", "log_every", "signal_every", "loss_chunk_mb",
                "spec_eval_gamma", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"),
            0: ("save_every", "lr_width", "warmup_steps", "keep_last", "eval_rows", "data_tokens", "spec_eval_prompts", "lora_r", "seed", "weight_decay")}


def check_bounds(cfg: TrainConfig) -> None:
    """Each number in range, named by its flag: lr and grad_clip > 0, jsd_beta in (0, 1), AT_LEAST's minimums."""
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    for name in ("lr", "grad_clip"):
        v = getattr(cfg, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise UserError(f"{flag(name)} must be a number > 0, got {v}")
    if not 0 < cfg.jsd_beta < 1:
        raise UserError(f"--jsd-beta must be between 0 and 1 (exclusive), got {cfg.jsd_beta}")
    for low, names in AT_LEAST.items():
        for name in names:
            v = getattr(cfg, name)
            if v is not None and not v >= low:  # `not >=` also catches nan
                raise UserError(f"{flag(name)} must be >= {low}, got {v}")


def peak_lr(cfg: TrainConfig, width: int) -> float:
    """The peak learning rate for a draft `width` wide: --lr x lr_width / width when wider than --lr-width (the
    576-wide default's 3e-3 is 4.2e-4 at Llama-8B's 4096, where 3e-3 sent the feature head to NaN at step 21),
    --lr itself otherwise and with --lr-width 0."""
    return cfg.lr * cfg.lr_width / width if cfg.lr_width and width > cfg.lr_width else cfg.lr


def lr_at(cfg: TrainConfig, step: int, peak: float | None = None) -> float:
    """The learning rate of optimizer step `step` (0-based): linear warm-up to `peak` (None: --lr), then cosine to
    min_lr_ratio x peak."""
    peak = cfg.lr if peak is None else peak
    if step < cfg.warmup_steps:
        return peak * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    floor = cfg.min_lr_ratio
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def main(argv: list[str] | None = None) -> None:
    cli.run_job(TrainConfig, train, argv, __doc__)


def train(cfg: TrainConfig, argv: list[str], command: str | None = None) -> Path:
    """Train (resumable). `command`: the command line to record, when another job (pipeline, sweep) runs this stage."""
    from accelerate.utils import set_seed

    # --- setup: one process per device, bf16 autocast on GPU unless --precision fp32. The seed is set before the
    # draft is built, so its init repeats (random init, the copy circuit, a LoRA adapter); resumes restore the RNG
    quiet_third_party()
    accelerator = make_accelerator(cfg)
    main_proc, world = accelerator.is_main_process, accelerator.num_processes
    log = print if main_proc else _quiet
    set_seed(cfg.seed)
    prepare_zero3(cfg, accelerator)

    # --- data: rows collected from this target with its tokenizer (prompt_ids, response_ids, top-k per response
    # token); a fixed held-out split for the acceptance proxy
    tok = load_tokenizer(cfg.target)  # the target's weights: only what build_model and the spec eval need
    data = load_data(cfg, tok)

    # --- model: the draft from its design (designs.py), then LoRA-wrapped, or partly frozen with the copy
    # circuit's structural zeros kept by gradient masks
    draft = build_model(cfg, tok, data, accelerator)
    log(draft_line(draft.card, accelerator.device))
    peak = peak_lr(cfg, draft.width)
    log(f"lr: peak {peak:.3g}" + (f" (--lr {cfg.lr:g} x --lr-width {cfg.lr_width} / width {draft.width})" if peak != cfg.lr else ""))
    # only the main process's real-decode eval runs the whole target (in fp32, like the draft's weights)
    spec_target = (load_target(cfg.target, "float32", str(accelerator.device))[0]
                   if cfg.spec_eval_prompts > 0 and main_proc else None)

    # --- batches: examples cut to --max-seq-len; a step's micro-batches are a function of (seed, step), so a
    # resumed run sees the same data without saving a sampler
    train_ex, eval_ex = make_examples(cfg, data)
    order = batch_order(cfg, train_ex)
    online = head_features(cfg, accelerator, draft, train_ex, eval_ex, log) if cfg.design == "feature_head" else None

    # --- optimizer and engine: accelerate wraps the Student (DDP, or a DeepSpeed engine with its own optimizer)
    student, optimizer, params = make_engine(cfg, accelerator, draft.model)

    # --- resume: weights, optimizer, RNG and the step (= data position) from the newest checkpoint that loads
    run_dir = Path(cfg.output)
    state, tracker = resume(cfg, accelerator, run_dir, log)
    step = state["step"] if state else 0
    command = command or launch_command(argv)
    run = loop.Run(cfg, accelerator, student, optimizer, params, draft, tok, data, command, run_dir, tracker, online,
                   peak, (state or {}).get("skipped", 0))
    fit = train_ex.subset(range(min(FIT_EXAMPLES, len(train_ex))))  # positions 0..: the stored features line up
    fit.features = train_ex.features
    held = proxy.HeldOut(eval_ex, cfg.batch_size, draft.vocab, draft.calib_seqs, spec_target, tok,
                         cfg.spec_eval_prompts, cfg.spec_eval_gamma, online, fit)

    # --- loop: one optimizer step (grad_accum micro-batches) per iteration; train/* metrics every log_every steps,
    # eval/* every eval_every, a checkpoint every save_every or on a preemption signal, each also at the last step
    last_eval: dict = state.get("metrics", {}) if state else {}
    if step == 0:
        last_eval = loop.report_eval(run, held, 0, log)
    # the logging window is saved with each checkpoint, so a resumed run logs the same averages
    window = list(state.get("window", [])) if state else []
    stop = loop.StopSignal()
    # a step's micro-batches are collated ahead, off the main thread, from this step on (batches.feed)
    step_batches = batches.StepBatches(train_ex, order, draft.vocab, step, cfg.max_steps, cfg.grad_accum, world,
                                       accelerator.process_index, map_inputs=cfg.design == "standalone")
    feed = batches.feed(step_batches, data_workers(cfg))
    pending = loop.Pending()  # steps' loss rows still on the device: read at logging, evaluation and saving steps
    speed = throughput(cfg, accelerator, draft.model)
    cadence = loop.SaveCadence(cfg.save_every)  # which steps save (--save-every; 0: by the time saves take)
    try:
        while step < cfg.max_steps:
            for g in optimizer.param_groups:
                g["lr"] = lr_at(cfg, step, peak)
            row, names, tokens = loop.train_step(run, feed, step)  # row on the device: no host read
            step = step + 1
            speed.add(tokens)
            pending.add(step, row, names)
            logging = step % cfg.log_every == 0 or step == cfg.max_steps
            evaluating = step % cfg.eval_every == 0 or step == cfg.max_steps
            stopping = step % cfg.signal_every == 0 and stop.agreed(accelerator)
            saving = cadence.due(step, accelerator) or step == cfg.max_steps or stopping  # due(): on every rank
            if logging or evaluating or saving:  # the rows since the last read, checked in step order
                for at, r in pending.flush(accelerator):
                    loop.check_finite(run, r, at, log)
                    window.append(r)
            if logging:
                trained_per_s, more = speed.read()
                metrics = loop.train_metrics(window, lr_at(cfg, step - 1, peak), trained_per_s, run.skipped, more)
                window = []
                tracker.log(metrics, step=step)
                rate = f"{metrics['train/tokens_per_s']} tok/s" if "train/tokens_per_s" in metrics else "(warm-up)"
                log(f"step {step}: loss {metrics['train/loss']:.4f} lr {metrics['train/lr']:.2e} {rate}")
            if evaluating:
                with speed.pause():
                    last_eval = loop.report_eval(run, held, step, log)
            if saving:
                with speed.pause(), cadence.timing():
                    loop.save_checkpoint(run, step, last_eval, window)
            if stopping:
                log(f"stopped by signal at step {step}; rerun the same command to resume")
                break
    finally:  # stops the collating thread or processes, also when a step raises
        feed.close()
    tracker.finish()
    return run_dir


# --- setup ---------------------------------------------------------------------------------------------------


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


def _quiet(*args, **kwargs) -> None:
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


def make_accelerator(cfg: TrainConfig):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    cuda = torch.cuda.is_available()
    multi_cpu = not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1
    precision = ("bf16" if cuda else "fp32") if cfg.precision == "auto" else cfg.precision
    # gloo on CPU: without it, multi-process CPU runs each believe they are rank 0 (checked on this project's CPU box)
    return Accelerator(mixed_precision="bf16" if precision == "bf16" else "no", step_scheduler_with_optimizer=False,
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


# --- model ---------------------------------------------------------------------------------------------------


@dataclass
class Draft:
    """The draft as built, with what evaluation and the export need to know about it."""
    model: torch.nn.Module        # HF causal LM (a PeftModel with --lora-r) on the accelerator's device
    design: DraftDesign
    layers: list[int]             # the target layers it was built from
    vocab_map: list[int] | None   # (V_draft,) target id of each draft id; None = the target's whole vocabulary
    vocab: VocabMap | None        # the same map both ways, for collate and the proxy
    calib_seqs: list | None       # copy circuit only: draft-id sequences its output gain is measured on
    card: dict                    # describe(): params, trainable params, width, measured ms/token
    width: int = 0                # the width its learning rate is scaled by (the target's; a circuit's private dims not)


def build_model(cfg: TrainConfig, tok, data: Data, accelerator) -> Draft:
    """The draft from the target's folder: target_layers reads only the kept layers' tensors, prune loads the
    whole target for its activations and drops it (designs.build_draft_from_files)."""
    seqs = batches.TokenRows(data.train)  # token ids per row, read from disk as the build needs them
    if cfg.design == "feature_head":
        return build_feature_head(cfg, tok, seqs, accelerator)
    design = cfg.draft_design()
    folder = resolve(cfg.target)
    tc = AutoConfig.from_pretrained(folder)
    model, vocab_map = build_draft_from_files(design, folder, tok, seqs, cfg.seed, str(accelerator.device))
    model.float()  # fp32 weights to train (a bf16 target gives a bf16 cut); autocast runs bf16 on GPU
    layers = design.layer_indices(tc.num_hidden_layers)
    circuit = getattr(model.config, "copy_circuit", None)  # built now, or in the pretrained draft's folder
    if cfg.lora_r:
        if not cfg.init.startswith("pretrained:"):
            raise UserError("--lora-r adapts an existing model: use it with --init pretrained:PATH")
        if circuit:  # dense adapters would write into the circuit's structural zeros (copy_circuit.mask_gradients)
            raise UserError(f"--lora-r: {cfg.init.split(':', 1)[1]} has a copy circuit, which LoRA adapters would "
                            "overwrite; continue it with a full fine-tune (--lora-r 0)")
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, target_modules="all-linear"))
    else:
        apply_freeze(model, design.freeze)
        copy_circuit.mask_gradients(model)
    # evaluation and export resize the copy circuit's output to the grown residual, measured on these sequences
    calib_seqs = circuit_sample(seqs, vocab_map, tc.vocab_size) if circuit else None
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    ds_plugin = accelerator.state.deepspeed_plugin
    if ds_plugin is not None and ds_plugin.zero_stage == 3:
        ds_plugin.set_deepspeed_weakref()  # give transformers back the ZeRO-3 config prepare_zero3() unset
    card = describe(model)  # leaves the model in eval mode
    model.train()
    vocab = VocabMap(vocab_map, tc.vocab_size) if vocab_map is not None else None
    width = circuit["private"] if circuit else model.config.hidden_size  # the copied layers' width
    return Draft(model, design, layers, vocab_map, vocab, calib_seqs, card, width)


def build_feature_head(cfg: TrainConfig, tok, seqs, accelerator) -> Draft:
    """A feature head (head.py): the target's embedding and head rows frozen, fc + one layer trained."""
    folder = resolve(cfg.target)
    tc = AutoConfig.from_pretrained(folder)
    vocab_map = (frequent_tokens(seqs, int(cfg.vocab), [tok.eos_token_id, tok.pad_token_id])
                 if cfg.vocab != "full" else None)
    model = head.build_head(cfg, folder, vocab_map, cfg.seed).to(accelerator.device)
    head.freeze_head(model, cfg.freeze)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    card = {"kind": "feature_head", "feature_layers": model.feature_layers, "head_layers": 1, "layers": 1,
            "hidden_size": tc.hidden_size, "vocab_size": model.draft_vocab_size, "params": total,
            "trainable_params": trainable, "features": cfg.features, "ttt_steps": cfg.ttt_steps,
            "step_ms": round(latency.step_latency(model.eval(), context=128, n_tokens=1) * 1e3, 3)}
    model.train()
    vocab = VocabMap(vocab_map, tc.vocab_size) if vocab_map is not None else None
    design = cfg.draft_design()
    return Draft(model, design, model.feature_layers, vocab_map, vocab, None, card, tc.hidden_size)


FIT_EXAMPLES = 64  # training examples the train-set agreement is measured on at each evaluation
EXTRACT_TOKENS = 4096  # padded tokens a feature-extraction forward (examples of similar length together)


def head_features(cfg: TrainConfig, accelerator, draft: Draft, train_ex, eval_ex, log):
    """stored: the main process extracts every example's features into RUN/features once (resumable), every
    rank reads them with its batches -> None. online: the target on this rank, run inside each step."""
    dtype = torch.bfloat16 if accelerator.device.type == "cuda" and cfg.precision != "fp32" else torch.float32
    if cfg.features == "online":
        return head.OnlineFeatures(load_target(cfg.target, dtype, str(accelerator.device))[0], draft.layers)
    folder = Path(cfg.output) / "features"
    store = head.store_dtype(cfg.feature_dtype, dtype, config_dtype(AutoConfig.from_pretrained(resolve(cfg.target))))
    if accelerator.is_main_process:
        folder.mkdir(parents=True, exist_ok=True)
        target = load_target(cfg.target, dtype, str(accelerator.device))[0]
        t0 = time.perf_counter()
        stores = [head.extract(target, ex, draft.layers, folder / f"{name}.{head.SUFFIX[store]}", EXTRACT_TOKENS, log,
                               store) for name, ex in (("train", train_ex), ("heldout", eval_ex))]
        tokens = int(sum(s.offsets[-1] for s in stores))
        head.write_info(Path(cfg.output), {"layers": draft.layers, "tokens": tokens, "bytes_per_token": stores[0].bytes_per_token,
                                           "bytes": tokens * stores[0].bytes_per_token, "dtype": store,
                                           "seconds_this_start": round(time.perf_counter() - t0, 1)})
        del target
    accelerator.wait_for_everyone()
    width = len(draft.layers) * draft.model.config.hidden_size
    train_ex.features = head.FeatureStore(folder / f"train.{head.SUFFIX[store]}", train_ex.lengths, width, store)
    eval_ex.features = head.FeatureStore(folder / f"heldout.{head.SUFFIX[store]}", eval_ex.lengths, width, store)
    return None


def draft_line(card: dict, device) -> str:
    """The "draft: ..." line: its shape, size and measured single-token latency."""
    return (f"draft: {card['layers']} layers x {card['hidden_size']} wide, vocab {card['vocab_size']}, "
            f"{card['params'] / 1e6:.1f}M params ({card['trainable_params'] / 1e6:.1f}M trainable), "
            f"{card['step_ms']} ms/token on {device}")


# --- resume -----------------------------------------------------------------------------------------------


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
