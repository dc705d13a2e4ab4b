"""TrainConfig: every training setting with its default, help text and checks (defined once, read by data, the
loop, the engine and the job), and the learning-rate schedule that follows from it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from decode.errors import UserError
from decode.models.feature_head import VARIANTS
from decode.options import DecodeOptions
from distill.train import head, losses, parallel
from distill.train.designs import (
    DraftDesign,
)

# --batch-tokens auto with a CUDA device: 16,384 padded tokens a micro-batch. A GPU step has fixed costs (the
# optimizer's pass over every weight and moment, kernel launches, the loss's chunks) that a few hundred tokens
# (8 sequences) leave dominant; at 16k an 8B-wide 2-layer draft computes ~4.5e13 FLOPs a step (flops.train_flops;
# ~60 ms at 75% of an H100's 989 TFLOP/s), and its saved activations (~0.2 MB a token a layer in bf16: ~7 GB) fit
# beside the weights and Adam state on a 24 GB card. configs/train/gpu-8b.yaml uses the same. Off on CPU, where the
# default recipe's numbers were measured with --batch-size 8 sequences.
AUTO_BATCH_TOKENS = 16384


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
    head_variant: list = field(default_factory=list, metadata={"help": "feature_head: speculators' eagle3 switches "
                               "to turn on: norm_before_residual, norm_before_fc, fc_norm, norm_output "
                               "(decode/models/feature_head.py; speculators' trainer turns the first, second and "
                               "fourth on)"})
    layers: int | list = field(default=2, metadata={"help": "draft depth, or target layer indices e.g. [0, 29]"})
    hidden_size: int | None = field(default=None, metadata={"help": "draft width (prune init); None = target's"})
    intermediate_size: int | None = field(default=None, metadata={"help": "FFN width; None = target's"})
    num_attention_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    num_key_value_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    init: str = field(default="target_layers", metadata={"help": "target_layers | prune | random | pretrained:PATH | "
                      "other_tokenizer:PATH (a model with another tokenizer, rows mapped onto the target's vocabulary)"})
    vocab: int | str = field(default="full", metadata={"help": "'full' or N most frequent target tokens"})
    freeze: list = field(default_factory=lambda: ["embed"], metadata={"help": "parts kept frozen: embed, head, norm"})
    copy_circuit: bool = field(default=False, metadata={"help": "widen the draft with a hand-built induction (copy) circuit"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank for init=pretrained (0 = full fine-tune)"})
    # --- parallel drafting (PARD style, distill/train/parallel.py): one forward proposes K tokens from mask tokens
    parallel: int = field(default=0, metadata={"help": "K >= 2: also train a mask token, mask k after an anchor "
                          "predicting the (k+1)-th next token, so one forward proposes K (0 = a chain draft)"})
    parallel_keep: float = field(default=0.5, metadata={"help": "conditional drop: each mask level keeps this share of "
                                 "the level below's anchors (an example packs <= T + n (keep + ... + keep^(K-1)) + K tokens)"})
    parallel_weight: str = field(default="uniform", metadata={"help": "uniform | accepted: weigh a mask row by the "
                                 "draft's chance of being accepted up to it (PARD-2's aim: accepted length)"})
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
    precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | native (bf16 where "
                           "the hardware computes it: a GPU, or a CPU with AVX512-BF16 or AMX; fp32 elsewhere) | "
                           "bf16 | fp32"})
    loss_chunk_mb: int = field(default=256, metadata={"help": "the head and the loss run over chunks of positions "
                               "of this many MiB of float32 logits (peak memory is a few such chunks)"})
    memory_gb: float = field(default=0.0, metadata={"help": "memory one training process may use (GiB): a step on "
                             "the longest micro-batch, as distill/train/memory_fit.py estimates it, is checked against it "
                             "before the draft is built. 0 = what the device has available at the start"})
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
        if self.precision not in ("auto", "native", "bf16", "fp32"):
            raise UserError(f"--precision must be auto, native, bf16 or fp32, got {self.precision!r}")
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
        parallel.check(self)
        unknown = [v for v in self.head_variant if v not in VARIANTS]
        if unknown:
            raise UserError(f"--head-variant {unknown}: choose among {', '.join(VARIANTS)}")
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
            0: ("save_every", "lr_width", "warmup_steps", "keep_last", "eval_rows", "data_tokens", "spec_eval_prompts", "lora_r", "seed", "weight_decay",
                "memory_gb")}


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


def batch_tokens(cfg: TrainConfig) -> int:
    """--batch-tokens resolved: -1 (auto) = AUTO_BATCH_TOKENS with a CUDA device, 0 (off: --batch-size sequences)
    on CPU; any other value as given."""
    if cfg.batch_tokens >= 0:
        return cfg.batch_tokens
    return AUTO_BATCH_TOKENS if torch.cuda.is_available() else 0


def data_workers(cfg: TrainConfig) -> int:
    """--data-workers resolved: -1 = 2 collating processes on GPU (cores to spare), one thread on CPU."""
    if cfg.data_workers >= 0:
        return cfg.data_workers
    return 2 if torch.cuda.is_available() else 0
