"""The GPU check: this project's GPU paths timed on a real model's shape with random weights, in one command.

    python -m distill.gpu_check --out runs/gpu-check                  # Llama-3.1-8B's shape, bf16, one GPU: 8 min at most
    python -m distill.gpu_check --out runs/gpu-check-tiny --shape tiny  # the same steps on a 4 x 256 shape (CPU dry run)

Run it in the repository root (it runs configs/ files). It writes OUT/target: the shape's config.json (8b:
Llama-3.1-8B's 32 layers x 4096, GQA 32/8, FFN 14336, llama3 RoPE, untied head, bf16; its vocabulary is the default
tokenizer's 49,152 ids, not Llama's 128,256) and the default target's tokenizer files ($SPECDISTILL_GPU_TOKENIZER
when set: the offline GPU machine's carried copy; else decode.targets' `default`). Then each step runs in its own
process, with a timeout, on `--load-format dummy` (random weights built on the GPU: no 15 GB download):

  bench-self   decode.bench, the target as its own draft (α = 1: the decoder's own overhead)
  bench-cut    decode.bench, a 2-layer cut of the target (layers:0,1)
  pipeline     the quick pipeline end to end (fewer steps, 4 prompts evaluated, no lookup), shipping a draft
  zero2        a 1-process DeepSpeed ZeRO-2 train of a few steps (accelerate launch) of the GPU training preset
               (configs/train/gpu-8b.yaml: token-budget batches, lr for the 8B width) on the pipeline's data and its
               random target (RUN/target)

and prints one table (also OUT/gpu_check.json); each step's output is in OUT/logs/STEP.log. The step timeouts
(TIMEOUTS) sum to 8 minutes for the 8b shape. A machine without datasets or deepspeed installed fails the steps that
need them (pipeline, zero2) and says so in their row; on an offline box bring their wheels along.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import LlamaConfig

from decode import cli
from decode.errors import UserError
from decode.shapes import SHAPES, shape_config

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "distill" / "data" / "heldout.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
# seconds each step may take: the 8b row sums to 8 minutes (estimated from ../shared/gpu/README.md's H200 numbers:
# ~21 tok/s for our decoder's target alone, ~20 s to build and ~20 s to save the shape, 590-900 tok/s training);
# tiny is for 2 busy CPU cores (DeepSpeed's first CPU run also builds its shm_comm op, ~85 s)
TIMEOUTS = {"8b": {"bench-self": 70, "bench-cut": 70, "pipeline": 265, "zero2": 75},
            "tiny": {"bench-self": 300, "bench-cut": 300, "pipeline": 900, "zero2": 600}}
# no static-cache compiled transformers anchor: its warm-up compiles for minutes (scripts/gpu_decoder.sh times it)
BENCH = {"8b": ["--limit", "3", "--max-new-tokens", "48", "--hf-static", "false"],
         "tiny": ["--limit", "2", "--max-new-tokens", "16", "--hf-static", "false"]}
# the quick preset with fewer steps, prompts evaluated and no lookup variants (each doubles the draft runs), so the
# 8B shape fits the budget: an 8B-shaped step trains ~3 s, evaluation decodes ~21 tok/s. No torch.compile (--compile
# auto turns it on with CUDA): 10 steps do not pay for compiling (docs/results.md, issue 38) and the budget has no room
PIPELINE = ["--train", "{max_steps: 10, eval_every: 10, save_every: 10, report_to: none, compile: off}",
            "--head", "{max_steps: 10, eval_every: 10, save_every: 10, report_to: none, compile: off}",
            "--evaluate", "{limit: 4, lookup: 0}"]
ZERO2_STEPS = 5
TRAIN_PRESET = "configs/train/gpu-8b.yaml"  # the zero2 step's recipe, for both shapes (tiny: a CPU dry run of it)


@dataclass
class GpuCheckConfig:
    out: str = field(default="runs/gpu-check", metadata={"help": "folder for the target's config, logs, results"})
    shape: str = field(default="8b", metadata={"help": "8b: Llama-3.1-8B's shape (one GPU) | tiny: 4 layers x 256 "
                                                       "(a CPU dry run of the same steps)"})

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise UserError(f"--shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")


def tokenizer_dir() -> Path:
    """The default target's tokenizer files: $SPECDISTILL_GPU_TOKENIZER (set by the GPU machine's carry), else the
    embedded default's converted folder."""
    env = os.environ.get("SPECDISTILL_GPU_TOKENIZER")
    if env:
        if not (Path(env) / "tokenizer.json").is_file():
            raise UserError(f"SPECDISTILL_GPU_TOKENIZER={env} holds no tokenizer.json; point it at the default "
                            "target's tokenizer files")
        return Path(env)
    from decode.targets import resolve

    return Path(resolve("default"))


def write_target(folder: Path, shape: str, tok: Path) -> LlamaConfig:
    """A config-only target folder: config.json of `shape` (bf16) + the tokenizer files; the weights come from
    --load-format dummy."""
    cfg = shape_config(shape)
    folder.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(folder)
    for f in TOKENIZER_FILES:
        if (tok / f).is_file():
            shutil.copy(tok / f, folder / f)
    return cfg


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"


# --- the steps: (name, what, command, key numbers read from the step's outputs)

def steps(out: Path, shape: str) -> list[tuple[str, str, list[str], callable]]:
    py, target, run = sys.executable, str(out / "target"), out / "pipeline"
    bench = [py, "-m", "decode.bench", "--target", target, "--load-format", "dummy", "--prompts", str(HELDOUT),
             *BENCH[shape]]
    cpu = not torch.cuda.is_available()  # the accelerate config's bf16 mixed precision is for GPUs
    zero2 = [py, "-m", "accelerate.commands.launch", "-q", "--config_file", "configs/accelerate/zero2.yaml",
             "--num_processes", "1", *(["--mixed_precision", "no"] if cpu else []), "distill/train.py",
             "--config", TRAIN_PRESET, "--target", str(run / "target"), "--data", str(run / "collect"),
             "--eval-data", str(run / "heldout"), "--output", str(out / "zero2"), "--max-steps", str(ZERO2_STEPS),
             "--eval-every", str(ZERO2_STEPS), "--save-every", str(ZERO2_STEPS), "--log-every", "1",
             "--eval-rows", "16", "--report-to", "none",
             *(["--precision", "fp32"] if cpu else [])]
    return [
        ("bench-self", "bench, the target as its own draft",
         [*bench, "--draft", "default", "--out", str(out / "bench-self.json")], lambda: bench_numbers(out / "bench-self.json")),
        ("bench-cut", "bench, draft layers:0,1",
         [*bench, "--draft", "layers:0,1", "--out", str(out / "bench-cut.json")], lambda: bench_numbers(out / "bench-cut.json")),
        ("pipeline", "quick pipeline, ships a draft",
         [py, "-m", "distill.pipeline", "--config", "configs/pipeline/default.yaml", "--preset", "quick", "--target",
          target, "--load-format", "dummy", "--output", str(run), *PIPELINE], lambda: pipeline_numbers(run)),
        ("zero2", f"ZeRO-2 train, 1 process, {ZERO2_STEPS} steps", zero2, lambda: train_numbers(out / "zero2")),
    ]


def bench_numbers(path: Path) -> str:
    r = json.loads(path.read_text())
    s = r["speculative"]
    hf = f", HF assisted {r['hf_assisted']['tokens_per_s']:.1f}" if r.get("hf_assisted") else ""
    return (f"tok/s: target {r['baseline']['tokens_per_s']:.1f}, speculative {s['tokens_per_s']:.1f}{hf}; "
            f"α {s['acceptance_rate']:.2f}, lossless {r['lossless']}")


def pipeline_numbers(run: Path) -> str:
    p = json.loads((run / "pipeline.json").read_text())
    t, s = p["timings"], p.get("shipped")
    times = ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in t.items() if k.endswith("_s"))
    if not s:
        b = p.get("best") or {}
        raise RuntimeError(f"no draft shipped (best: {b.get('draft')}, lossless {b.get('lossless')}); {times}")
    return f"shipped {s['kind']}: {s['speedup']}x, α {s['acceptance_rate']}; {times}"


def train_numbers(run: Path) -> str:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    logged = [m for m in rows if "train/tokens_per_s" in m]  # eval rows carry no train/* metrics
    if not logged:
        raise RuntimeError(f"no train/* metrics in {run / 'metrics.jsonl'}")
    last = logged[-1]
    return f"{last.get('step')} steps, last {last['train/tokens_per_s']} tok/s, loss {last['train/loss']}"


def run_step(name: str, cmd: list[str], timeout: int, logs: Path) -> tuple[str, float]:
    """One step in its own process (a crash or hang ends that step only); (status, seconds)."""
    logs.mkdir(parents=True, exist_ok=True)
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(logs / f"{name}.log", "w") as log:
        try:
            rc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return f"timeout ({timeout}s)", time.perf_counter() - t0
    return ("ok" if rc == 0 else f"failed (exit {rc})"), time.perf_counter() - t0


def error_line(path: Path) -> str:
    """A failed step's reason: its `error:` line (the jobs' one-line errors), else its last line."""
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()] if path.is_file() else []
    errors = [x for x in lines if x.startswith("error:")]
    return (errors or lines or [""])[-1][:200]


def table(rows: list[dict]) -> str:
    head = ("step", "device", "what", "numbers", "seconds", "status")
    cells = [head] + [(r["step"], r["device"], r["what"], r["numbers"], f"{r['seconds']:.1f}", r["status"]) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join(" | ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells)


def run(cfg: GpuCheckConfig, argv=None) -> list[dict]:
    out = Path(cfg.out).resolve()
    dev, rows = device_name(), []
    dtype = "bfloat16" if torch.cuda.is_available() else "float32 (--dtype auto on CPU)"  # decode.targets.parse_dtype
    t0 = time.perf_counter()
    c = write_target(out / "target", cfg.shape, tokenizer_dir())
    n = c.num_hidden_layers * (4 * c.hidden_size * c.head_dim * (c.num_attention_heads + c.num_key_value_heads) // 2
                               + 3 * c.hidden_size * c.intermediate_size) + 2 * c.vocab_size * c.hidden_size
    rows.append({"step": "config", "device": dev, "what": f"{cfg.shape} shape -> {out / 'target'}",
                 "numbers": f"{c.num_hidden_layers} x {c.hidden_size}, {n / 1e9:.2f}B params, runs in {dtype}",
                 "seconds": time.perf_counter() - t0, "status": "ok"})
    for name, what, cmd, numbers in steps(out, cfg.shape):
        status, seconds = run_step(name, cmd, TIMEOUTS[cfg.shape][name], out / "logs")
        try:
            found = numbers()
        except Exception as e:  # noqa: BLE001 - a step's missing or partial output is reported, not raised
            found = str(e) if status == "ok" else error_line(out / "logs" / f"{name}.log")
            status = status if status != "ok" else "failed"
        rows.append({"step": name, "device": dev, "what": what, "numbers": found, "seconds": seconds, "status": status})
        print(f"   {status} in {seconds:.1f}s: {found}", flush=True)
    (out / "gpu_check.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    return rows


def main(argv: list[str] | None = None) -> None:
    _, rows = cli.run_job(GpuCheckConfig, run, argv, __doc__)
    if any(r["status"] != "ok" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
