"""The GPU check: this project's GPU paths timed on a real model's shape with random weights, in one command.

    python -m distill.gpu_check --out runs/gpu-check                  # Llama-3.1-8B's shape, bf16, one GPU: 8 min at most
    python -m distill.gpu_check --out runs/gpu-check-tiny --shape tiny  # the same steps on a 4 x 256 shape (CPU dry run)

Run it in the repository root (it runs configs/ files). It writes OUT/target: the shape's config.json (decode.models.shapes:
8b is Llama-3.1-8B's 32 layers x 4096, GQA 32/8, FFN 14336, llama3 RoPE, untied head, bf16, with the default
tokenizer's 49,152 ids) and the default target's tokenizer files ($SPECDISTILL_GPU_TOKENIZER when set: the offline
GPU machine's carried copy; else decode.models.targets' `default`). Then each step runs in its own process, with a timeout
(BUDGETS: the 8b steps sum to 8 minutes), on random weights (`--load-format dummy`, built on the GPU):

  decoder    decode.bench with a 2-layer cut of the target as draft: the target alone (tok/s, % of the rate at which
             the device streams the weights) and the cut (c, speedup, lossless); no transformers anchors
  standalone distill.train.speed --design standalone: configs/train/gpu-8b.yaml's draft on synthetic data, eager
  head       distill.train.speed --design head: the feature head the same way
  zero2      the standalone speed run under `accelerate launch` (configs/accelerate/zero2.yaml, 1 process): its
             tok/s over the plain run's (both --compile off: like with like)
  pipeline   the quick pipeline end to end on the standalone design, shipping a draft; its collection (128 train
             prompts x 64 tokens at batch 64, HF engine) is the collection row

It prints one table (also OUT/gpu_check.json, rows as they finish, so a killed check keeps what it measured); each
step's output is in OUT/logs/STEP.log. The speed rows run eagerly (--compile off) so that the ZeRO-2 ratio compares
like with like and no step spends its budget compiling. A machine without datasets or deepspeed installed fails
the steps that need them (pipeline, zero2) and says so in their row; on an offline box bring their wheels along.
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
from decode.models.shapes import SHAPES, shape_config

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "distill" / "data" / "heldout.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
# seconds each step may take. 8b (one H100, estimated from docs/results.md's 2026-11-27 run: ~40 s of imports, CUDA
# start and building the random target per process; the decoder at ~9 ms a step; collection at batch 64 a few
# seconds for 8k tokens; a speed run ~10 timed steps of ~0.1 s): they sum to 8 minutes. tiny: 2 busy CPU cores
# (DeepSpeed's first CPU run also builds its shm_comm op, ~85 s).
BUDGETS = {"8b": {"decoder": 90, "standalone": 60, "head": 60, "zero2": 75, "pipeline": 195},
           "tiny": {"decoder": 300, "standalone": 300, "head": 300, "zero2": 600, "pipeline": 900}}
BENCH = {"8b": ["--limit", "3", "--max-new-tokens", "48"], "tiny": ["--limit", "2", "--max-new-tokens", "16"]}
SPEED_STEPS = {"8b": ["--steps", "10"], "tiny": ["--steps", "4"]}
# the quick preset on the standalone design with fewer steps (no compiling: 10 steps do not pay for it), 4 prompts
# evaluated, no lookup, trees or anchors; its collection two full batches of 64, the collection row
PIPELINE = ["--designs", "[standalone]", "--collect", "{limit: 128, max_new_tokens: 64, batch_size: 64}",
            "--heldout", "{limit: 16, max_new_tokens: 32}",
            "--train", "{max_steps: 10, eval_every: 10, save_every: 10, report_to: none, compile: off}",
            "--evaluate", "{limit: 4, lookup: 0, tree_nodes: 0, anchors: none}"]


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
    from decode.models.targets import resolve

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


# --- the steps: (name, command, {row name: (what, numbers read from the step's outputs)})

def steps(out: Path, shape: str) -> list[tuple[str, list[str], dict]]:
    py, target, run = sys.executable, str(out / "target"), out / "pipeline"
    cpu = not torch.cuda.is_available()  # the accelerate config's bf16 mixed precision is for GPUs

    def speed(design: str, name: str) -> list[str]:
        return ["-m", "distill.train.speed", "--shape", shape, "--design", design, *SPEED_STEPS[shape],
                "--compile", "off", "--out", str(out / f"{name}.json")]

    zero2 = [py, "-m", "accelerate.commands.launch", "-q", "--config_file", "configs/accelerate/zero2.yaml",
             "--num_processes", "1", *(["--mixed_precision", "no"] if cpu else []), *speed("standalone", "zero2")]
    bench = [py, "-m", "decode.bench", "--target", target, "--load-format", "dummy", "--prompts", str(HELDOUT),
             "--draft", "layers:0,1", "--schedule", "constant", "--no-hf-assisted", "--hf-static", "false",
             *BENCH[shape],
             "--out", str(out / "decoder.json")]
    pipeline = [py, "-m", "distill.pipeline", "--config", "configs/pipeline/default.yaml", "--preset", "quick",
                "--target", target, "--load-format", "dummy", "--output", str(run), *PIPELINE]
    return [
        ("decoder", bench, {"decoder": ("target alone (bench)", lambda: target_numbers(out / "decoder.json")),
                            "cut": ("draft layers:0,1 (bench)", lambda: cut_numbers(out / "decoder.json"))}),
        ("standalone", [py, *speed("standalone", "standalone")],
         {"standalone": ("train speed, standalone draft", lambda: speed_numbers(out / "standalone.json"))}),
        ("head", [py, *speed("head", "head")],
         {"head": ("train speed, feature head", lambda: speed_numbers(out / "head.json"))}),
        ("zero2", zero2, {"zero2": ("ZeRO-2, 1 process, standalone",
                                    lambda: zero2_numbers(out / "zero2.json", out / "standalone.json"))}),
        ("pipeline", pipeline, {"collect": ("collection, HF engine, batch 64", lambda: collect_numbers(run)),
                                "pipeline": ("quick pipeline, ships a draft", lambda: pipeline_numbers(run))}),
    ]


def target_numbers(path: Path) -> str:
    r = json.loads(path.read_text())
    cm, tps = r["cost_model"], r["baseline"]["tokens_per_s"]
    limit = 1e3 / cm["weight_stream_ms"]  # tok/s if a step cost exactly one read of the weights
    return (f"{tps:.1f} tok/s, {100 * tps / limit:.0f}% of the {limit:.0f} tok/s weight-streaming limit "
            f"({cm['stream_GBps']:.0f} GB/s); step {cm['target_step_ms']:.2f} ms")


def cut_numbers(path: Path) -> str:
    r = json.loads(path.read_text())
    s, cm = r["speculative"], r["cost_model"]
    return (f"c {cm['c']:.3f}, speedup {r['speedup']:.2f}x (predicted {cm['predicted_speedup']:.2f}x), "
            f"α {s['acceptance_rate']:.2f}, lossless {r['lossless']}")


def speed_numbers(path: Path) -> str:
    r = json.loads(path.read_text())
    mfu = f", MFU {100 * r['mfu']:.1f}%" if r.get("mfu") is not None else ", MFU n/a (no known peak)"
    return f"{r['tokens_per_s']:.0f} tok/s{mfu} ({r['trainable_params'] / 1e6:.0f}M trained)"


def zero2_numbers(path: Path, plain: Path) -> str:
    z, p = json.loads(path.read_text()), json.loads(plain.read_text())
    return f"{z['tokens_per_s']:.0f} tok/s, {z['tokens_per_s'] / p['tokens_per_s']:.2f}x the plain run"


def collect_numbers(run: Path) -> str:
    c = json.loads((run / "collect" / "collect.json").read_text())
    return f"{c['tokens_per_s']:.0f} tok/s, {c['tokens']} tokens of {c['rows']} prompts"


def pipeline_numbers(run: Path) -> str:
    p = json.loads((run / "pipeline.json").read_text())
    t, s = p["timings"], p.get("shipped")
    times = ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in t.items() if k.endswith("_s"))
    if not s:
        b = p.get("best") or {}
        raise RuntimeError(f"no draft shipped (best: {b.get('draft')}, lossless {b.get('lossless')}); {times}")
    return f"shipped {s['kind']}: {s['speedup']}x, α {s['acceptance_rate']}; {times}"


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
    head = ("row", "device", "what", "numbers", "seconds", "status")
    cells = [head] + [(r["row"], r["device"], r["what"], r["numbers"], f"{r['seconds']:.1f}", r["status"]) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join(" | ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells)


def step_rows(name: str, status: str, seconds: float, reads: dict, dev: str, logs: Path) -> list[dict]:
    """The rows one step gives: each its numbers, or why there are none."""
    rows = []
    for row, (what, numbers) in reads.items():
        try:
            found, ok = numbers(), status
        except Exception as e:  # noqa: BLE001 - a step's missing or partial output is reported, not raised
            found = str(e)[:200] if status == "ok" else error_line(logs / f"{name}.log")
            ok = status if status != "ok" else "failed"
        rows.append({"row": row, "device": dev, "what": what, "numbers": found, "seconds": seconds, "status": ok})
        print(f"   {row}: {ok} in {seconds:.1f}s: {found}", flush=True)
    return rows


def run(cfg: GpuCheckConfig, argv=None) -> list[dict]:
    out = Path(cfg.out).resolve()
    dev, rows = device_name(), []
    dtype = "bfloat16" if torch.cuda.is_available() else "float32 (--dtype auto on CPU)"  # decode.models.targets.parse_dtype
    t0 = time.perf_counter()
    c = write_target(out / "target", cfg.shape, tokenizer_dir())
    n = c.num_hidden_layers * (4 * c.hidden_size * c.head_dim * (c.num_attention_heads + c.num_key_value_heads) // 2
                               + 3 * c.hidden_size * c.intermediate_size) + 2 * c.vocab_size * c.hidden_size
    rows.append({"row": "config", "device": dev, "what": f"{cfg.shape} shape -> {out / 'target'}",
                 "numbers": f"{c.num_hidden_layers} x {c.hidden_size}, {n / 1e9:.2f}B params, runs in {dtype}",
                 "seconds": time.perf_counter() - t0, "status": "ok"})
    for name, cmd, reads in steps(out, cfg.shape):
        status, seconds = run_step(name, cmd, BUDGETS[cfg.shape][name], out / "logs")
        rows += step_rows(name, status, seconds, reads, dev, out / "logs")
        (out / "gpu_check.json").write_text(json.dumps(rows, indent=2) + "\n")  # as each step ends
    print(table(rows))
    return rows


def main(argv: list[str] | None = None) -> None:
    _, rows = cli.run_job(GpuCheckConfig, run, argv, __doc__)
    if any(r["status"] != "ok" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
