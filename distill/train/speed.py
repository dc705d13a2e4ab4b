"""Training speed on synthetic data: tokens/s and MFU of the trainer's own step for a target's shape, on this device.

    python -m distill.train.speed --shape 8b --design standalone --steps 20
    python -m distill.train.speed --shape 8b --design head --steps 20 --out runs/speed-head.json
    accelerate launch --config_file configs/accelerate/zero2.yaml --num_processes 1 -m distill.train.speed --shape 8b
    python -m distill.train.speed --shape tiny --design standalone --steps 3      # CPU: seconds

The draft is what configs/train/gpu-8b.yaml trains for a target of that shape (decode/models/shapes.py), built from the
shape's config with random weights on the device (no target weights, no files): standalone = its layers (2) at
full width with its draft vocabulary (8,192) and the embedding and head frozen; head = the feature head, one layer
at the target's width reading 3 feature layers, the same vocabulary, unrolled --ttt-steps. It trains through the
real path: Student / HeadStudent, engine.make_engine (accelerate, DeepSpeed under `accelerate launch`, the recipe's
AdamW and loss), loop.train_step, bf16 autocast on CUDA (under DeepSpeed too: engine.DEEPSPEED's torch_autocast,
fp32 weights, so a ZeRO-2 run and a plain one compare like with like). The data goes through training's own feed
(speed_data.py): a synthetic collection written to a scratch folder, as many sequences of about --prompt-len +
--response-len tokens a micro-batch as the token budget holds, random top-k teacher rows, for the head memory-mapped
bf16 features; read back by StepBatches and batches.feed (DataLoader workers with pinned memory on a GPU machine)
and copied ahead on a side stream (device_feed.py). After --warmup steps (compiling, first kernels, optimizer
state) --steps are timed; MFU counts the draft's FLOPs from its shapes (flops.py).

Prints a line, then the result as JSON (the last line of stdout; also --out); tokens_per_s counts trained positions
a second, as training's train/tokens_per_s does, input_tokens_per_s prompt and response tokens (no padding):
    {"shape", "design", "device", "processes", "deepspeed", "precision", "compile", "steps", "warmup",
     "batch_tokens", "sequences", "feed", "input_tokens_per_s", "tokens_per_s", "mfu", "peak_flops",
     "flops_per_step", "seconds", "params", "trainable_params", "loss"}
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from decode import cli
from decode.errors import UserError
from decode.models.feature_head import FeatureHead, default_layers, layer_config
from decode.models.shapes import SHAPES, shape_config
from distill.collect import CollectConfig
from distill.train import batches, engine, flops, head, loop, setup, speed_data
from distill.train.config import TrainConfig, batch_tokens, data_workers, peak_lr
from distill.train.designs import apply_freeze
from distill.train.device_feed import DeviceFeed

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "gpu-8b.yaml"
DESIGNS = {"standalone": "standalone", "head": "feature_head"}
BATCHES = 4  # distinct synthetic batches, cycled (speed_data.order): written once, before timing


@dataclass
class SpeedConfig:
    shape: str = field(default="8b", metadata={"help": f"the target's shape: {' | '.join(SHAPES)} (decode/models/shapes.py)"})
    design: str = field(default="standalone", metadata={"help": "standalone (the recipe's layers at full width) | "
                        "head (a feature head reading 3 feature layers)"})
    steps: int = field(default=20, metadata={"help": "timed optimizer steps, after the warm-up"})
    warmup: int = field(default=loop.WARMUP_STEPS, metadata={"help": "untimed steps first (compile, first kernels, "
                        "optimizer state), as training leaves them out of its tokens/s"})
    batch_tokens: int = field(default=-1, metadata={"help": "padded tokens a micro-batch; -1 = what training uses "
                              "here (--batch-tokens auto: a token budget on CUDA; on CPU, where training batches "
                              "--batch-size sequences, that many sequences)"})
    prompt_len: int = field(default=128, metadata={"help": "prompt tokens of a synthetic sequence"})
    response_len: int = field(default=384, metadata={"help": "response tokens (trained positions) of a synthetic "
                              "sequence; lengths vary by up to 1/8 below, as length-bucketed batches do"})
    ttt_steps: int = field(default=TrainConfig.ttt_steps, metadata={"help": "head: training-time test steps"})
    compile: str = field(default="auto", metadata={"help": "torch.compile the layers: on | off | auto (as training: "
                         "engine.use_compile)"})
    out: str = field(default="", metadata={"help": "also write the JSON result here"})
    seed: int = field(default=0, metadata={"help": "weights and synthetic data"})

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise UserError(f"--shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")
        if self.design not in DESIGNS:
            raise UserError(f"--design must be one of {', '.join(DESIGNS)}, got {self.design!r}")
        for name, low in (("steps", 1), ("warmup", 0), ("prompt_len", 1), ("response_len", 2), ("ttt_steps", 1),
                          ("batch_tokens", -1)):
            if getattr(self, name) < low:
                raise UserError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}")


def train_config(s: SpeedConfig) -> TrainConfig:
    """The recipe (configs/train/gpu-8b.yaml) with this run's design, batch, compile, and --precision auto (its bf16
    on CUDA; float32 on CPU, where bf16 autocast is not what training uses)."""
    return cli.parse(TrainConfig, ["--config", str(RECIPE), "--design", DESIGNS[s.design], "--precision", "auto",
                                       "--compile", s.compile, "--batch-tokens", str(s.batch_tokens),
                                       "--ttt-steps", str(s.ttt_steps), "--seed", str(s.seed), "--report-to", "none"])


# --- the draft, from the shape


def build(cfg: TrainConfig, shape: str, device: torch.device):
    """(the draft with random float32 weights on `device`, frozen as the recipe says, its flops.DraftShape)."""
    target = shape_config(shape)
    vocab = int(cfg.vocab) if cfg.vocab != "full" else target.vocab_size
    with torch.device(device):
        if cfg.design == "feature_head":
            model = FeatureHead(layer_config(target), default_layers(target.num_hidden_layers), list(range(vocab)))
            head.freeze_head(model, cfg.freeze)
            return model.float(), flops.head_shape(model, cfg.ttt_steps)
        c = copy.deepcopy(target)
        c.num_hidden_layers, c.vocab_size = cfg.layers, vocab
        model = LlamaForCausalLM(c).float()
    apply_freeze(model, cfg.freeze)
    return model, flops.standalone_shape(model)


def batch_shape(cfg: TrainConfig, s: SpeedConfig) -> tuple[int, int]:
    """(token budget a micro-batch, sequences a micro-batch): the budget training resolves here (config.batch_tokens),
    or TrainConfig's --batch-size default of sequences where that is off (CPU)."""
    budget = batch_tokens(cfg)
    length = s.prompt_len + s.response_len - 1
    if budget:
        return budget, max(1, budget // length)
    sequences = TrainConfig.batch_size
    return sequences * length, sequences


# --- the run


def measure(s: SpeedConfig) -> dict:
    cfg = train_config(s)
    setup.quiet_third_party()
    accelerator = setup.make_accelerator(cfg)
    setup.prepare_zero3(cfg, accelerator)
    torch.manual_seed(s.seed)
    model, shape = build(cfg, s.shape, accelerator.device)
    student, optimizer, params = engine.make_engine(cfg, accelerator, model)
    width = model.config.hidden_size
    for g in optimizer.param_groups:
        g["lr"] = peak_lr(cfg, width)
    budget, sequences = batch_shape(cfg, s)
    gen = torch.Generator().manual_seed(s.seed + accelerator.process_index)
    scratch = tempfile.TemporaryDirectory(prefix="speed-data-")
    count = sequences * BATCHES
    ex = speed_data.examples(Path(scratch.name), gen, count, s.prompt_len, s.response_len, shape.vocab,
                             CollectConfig.topk, shape.features)
    steps = s.warmup + s.steps
    workers = data_workers(cfg)
    source = DeviceFeed(batches.feed(batches.StepBatches(ex, speed_data.order(count, sequences), None, 0, steps,
                                                         cfg.grad_accum, 1, 0, map_inputs=s.design == "standalone"),
                                     workers), accelerator.device)
    feed_kind = (f"DataLoader, {workers} workers" if workers else "one collating thread") + \
        (", pinned" if accelerator.device.type == "cuda" else "")
    run = loop.Run(cfg, accelerator, student, optimizer, params, None, None, None, "", Path(scratch.name), None)
    cuda = accelerator.device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(accelerator.device)) if cuda else (lambda: None)
    bf16 = cuda and accelerator.mixed_precision == "bf16"
    peak = loop.peak_flops(torch.cuda.get_device_name(accelerator.device)) if bf16 else None
    speed = loop.Throughput(accelerator.num_processes, shape, peak, warmup=s.warmup, sync=sync)
    rows, timed = [], flops.StepTokens()
    t0 = None
    try:
        for step in range(steps):
            if step == s.warmup:
                sync()
                t0 = time.perf_counter()
            row, _, tokens = loop.train_step(run, source, step)
            speed.add(tokens)
            rows.append(row)
            if step >= s.warmup:
                timed.add(tokens)
        values = torch.stack(rows).tolist()  # the one read of the device: waits for the last step
        seconds = time.perf_counter() - t0
    finally:
        source.close()
        scratch.cleanup()
    trained_per_s, more = speed.read()
    if any(v[1] > 0 for v in values):
        raise UserError(f"a step's loss or gradients were not finite (losses {[round(v[0], 4) for v in values]})")
    ds = accelerator.state.deepspeed_plugin
    return {"shape": s.shape, "design": s.design, "device": device_name(accelerator.device),
            "processes": accelerator.num_processes, "deepspeed": f"zero{ds.zero_stage}" if ds else None,
            "precision": accelerator.mixed_precision, "compile": engine.use_compile(cfg, accelerator), "steps": s.steps,
            "warmup": s.warmup, "batch_tokens": budget, "sequences": sequences, "feed": feed_kind,
            "input_tokens_per_s": more["train/input_tokens_per_s"], "tokens_per_s": round(trained_per_s, 1),
            "mfu": more.get("train/mfu"), "peak_flops": peak,
            "flops_per_step": flops.train_flops(shape, timed)["total"] // s.steps, "seconds": round(seconds, 3),
            "params": sum(p.numel() for p in model.parameters()), "trainable_params": sum(p.numel() for p in params),
            "loss": round(values[-1][0], 5)}


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)"


def run(s: SpeedConfig, argv: list[str]) -> dict:
    from accelerate import PartialState

    r = measure(s)
    if PartialState().is_main_process:
        mfu = f", MFU {r['mfu']:.1%}" if r["mfu"] is not None else " (MFU: no bf16 peak known for this device)"
        print(f"speed: {r['design']} draft of the {r['shape']} shape on {r['device']} ({r['deepspeed'] or 'plain'}, "
              f"{r['processes']} process(es)): {r['tokens_per_s']:,.0f} trained tok/s, "
              f"{r['input_tokens_per_s']:,.0f} input tok/s{mfu}")
        if s.out:
            Path(s.out).parent.mkdir(parents=True, exist_ok=True)
            Path(s.out).write_text(json.dumps(r, indent=2) + "\n")
        print(json.dumps(r))
    return r


def main(argv: list[str] | None = None) -> dict:
    return cli.run_job(SpeedConfig, run, argv, __doc__)[1]


if __name__ == "__main__":
    main()
