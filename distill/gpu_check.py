"""The GPU check: this project's GPU paths timed on a real model's shape with random weights, in one command.

    python -m distill.gpu_check --out runs/gpu-check                  # Llama-3.1-8B's shape, bf16, one GPU: 8 min at most
    python -m distill.gpu_check --out runs/gpu-check-tiny --shape tiny  # the same steps on a 4 x 256 shape (CPU dry run)

Run it in the repository root (it runs configs/ files). It writes OUT/target: the shape's config.json (decode.models.shapes:
8b is Llama-3.1-8B's 32 layers x 4096, GQA 32/8, FFN 14336, llama3 RoPE, untied head, bf16, with the default
tokenizer's 49,152 ids) and the default target's tokenizer files ($SPECDISTILL_GPU_TOKENIZER when set: the offline
GPU machine's carried copy; else decode.models.targets' `default`). Then each step runs in its own process group,
on random weights (`--load-format dummy`, built on the GPU), with a timeout (BUDGETS) after which the whole group
is killed (a launcher's workers and a vLLM engine too); on a GPU under SPECDISTILL_SYNC_DEBUG=error
(distill.sync_debug: a host sync in a collection or training step fails it):

  decoder    decode.bench with a 2-layer cut of the target as draft: the target alone (tok/s, % of the rate at which
             the device streams the weights) and the cut (c, speedup, lossless); no transformers anchors
  standalone distill.train.speed --design standalone: configs/train/gpu-8b.yaml's draft, fed by the real data
             loader (a synthetic collection on disk), eager
  head       distill.train.speed --design head: the feature head the same way (its features memory-mapped)
  zero2      the standalone speed run under `accelerate launch` (configs/accelerate/zero2.yaml, 1 process): its
             tok/s over the plain run's (both --compile off, both fp32 weights under bf16 autocast: like with like)
  pipeline   the quick pipeline end to end on the standalone design, shipping a draft; its collection (256 train
             prompts x 64 tokens, HF engine, the batch kv_budget chooses) is the collection row

Each row carries its target, what was measured and whether it met the target (TARGETS); a row below its target,
or a collection whose graph capture fell back to eager steps, is not ok, and the command exits 1. The 8b targets
are the project's: the decoder >= 50% of the weight-streaming limit, the cut lossless, training >= 35% MFU
(standalone) and >= 30% (head), ZeRO-2 >= 0.8x the plain run, collection >= 5,000 tok/s, a draft shipped. The
tiny targets only show that each path runs on a CPU (speeds about a tenth of what a loaded 2-core box measured).

It prints one table (also OUT/gpu_check.json, rows as they finish, so a killed check keeps what it measured); each
step's output is in OUT/logs/STEP.log. The 8b budgets sum to 85% of 8 minutes less the parent's own start
(START_S): 15% slack. A machine without datasets or deepspeed installed fails the steps that need them (pipeline,
zero2) and says so in their row; on an offline box bring their wheels along.
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
from distill import sync_debug

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "distill" / "data" / "heldout.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
# seconds each step may take. 8b (one H100; estimated, not measured, from docs/results.md's 2026-11-27 run: ~40 s of
# imports, CUDA start and building the random target per process; the decoder at ~9 ms a step; collection a few
# seconds for 16k tokens; a speed run ~10 timed steps of ~0.1 s): with START_S for the parent's own start they fill
# 85% of TOTAL_S. tiny: 2 busy CPU cores (DeepSpeed's first CPU run also builds its shm_comm op, ~85 s)
TOTAL_S = {"8b": 480, "tiny": None}
SLACK = 0.15
START_S = 30  # the parent's imports and the target's config before the first step
BUDGETS = {"8b": {"decoder": 70, "standalone": 50, "head": 50, "zero2": 65, "pipeline": 140},
           "tiny": {"decoder": 300, "standalone": 300, "head": 300, "zero2": 600, "pipeline": 900}}
BENCH = {"8b": ["--limit", "3", "--max-new-tokens", "48"], "tiny": ["--limit", "2", "--max-new-tokens", "16"]}
SPEED_STEPS = {"8b": ["--steps", "10"], "tiny": ["--steps", "4"]}
# the quick preset on the standalone design with fewer steps (no compiling: 10 steps do not pay for it), 4 prompts
# evaluated, no lookup, trees or anchors; its collection 256 prompts at the batch the KV budget chooses
PIPELINE = ["--designs", "[standalone]", "--collect", "{limit: 256, max_new_tokens: 64}",
            "--heldout", "{limit: 16, max_new_tokens: 32}",
            "--train", "{max_steps: 10, eval_every: 10, save_every: 10, report_to: none, compile: off}",
            "--evaluate", "{limit: 4, lookup: 0, tree_nodes: 0, anchors: none}"]


@dataclass(frozen=True)
class Target:
    """A row's target: the step's number `metric` must be at least `at_least` (True counts as 1)."""
    metric: str
    at_least: float
    unit: str


TARGETS = {
    "8b": {"decoder": Target("stream_pct", 50, "% of the weight-streaming limit"),
           "cut": Target("lossless", 1, "lossless (1 = yes)"),
           "standalone": Target("mfu_pct", 35, "% MFU"), "head": Target("mfu_pct", 30, "% MFU"),
           "zero2": Target("ratio", 0.8, "x the plain run"), "collect": Target("tokens_per_s", 5000, "tok/s"),
           "pipeline": Target("shipped", 1, "draft shipped (1 = yes)")},
    # a CPU: the paths run (no MFU without a known peak: trained tok/s instead). Speeds about a tenth of what a
    # 2-core box measured beside other jobs (load ~9, 2026-12-06: 67%, 306, 133, 91 tok/s; docs/results.md); the
    # ratio ZeRO-2 / plain (0.92 there) does not fall with the load, so its floor stays 0.3
    "tiny": {"decoder": Target("stream_pct", 5, "% of the weight-streaming limit"),
             "cut": Target("lossless", 1, "lossless (1 = yes)"),
             "standalone": Target("tokens_per_s", 30, "trained tok/s"),
             "head": Target("tokens_per_s", 13, "trained tok/s"),
             "zero2": Target("ratio", 0.3, "x the plain run"), "collect": Target("tokens_per_s", 9, "tok/s"),
             "pipeline": Target("shipped", 1, "draft shipped (1 = yes)")},
}


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
        ("pipeline", pipeline, {"collect": ("collection, HF engine, batch from the KV budget",
                                            lambda: collect_numbers(run)),
                                "pipeline": ("quick pipeline, ships a draft", lambda: pipeline_numbers(run))}),
    ]


# --- what each step measured: (text, {metric: number}, fault or None); a fault fails the row whatever its number


def target_numbers(path: Path):
    r = json.loads(path.read_text())
    cm, tps = r["cost_model"], r["baseline"]["tokens_per_s"]
    limit = 1e3 / cm["weight_stream_ms"]  # tok/s if a step cost exactly one read of the weights
    return (f"{tps:.1f} tok/s, {100 * tps / limit:.0f}% of the {limit:.0f} tok/s weight-streaming limit "
            f"({cm['stream_GBps']:.0f} GB/s); step {cm['target_step_ms']:.2f} ms"), {"stream_pct": 100 * tps / limit}, None


def cut_numbers(path: Path):
    r = json.loads(path.read_text())
    s, cm = r["speculative"], r["cost_model"]
    return (f"c {cm['c']:.3f}, speedup {r['speedup']:.2f}x (predicted {cm['predicted_speedup']:.2f}x), "
            f"α {s['acceptance_rate']:.2f}, lossless {r['lossless']}"), {"lossless": bool(r["lossless"])}, None


def speed_numbers(path: Path):
    r = json.loads(path.read_text())
    mfu = r.get("mfu")
    text = f"{r['tokens_per_s']:.0f} tok/s" + (f", MFU {100 * mfu:.1f}%" if mfu is not None else ", MFU n/a (no known peak)")
    return (f"{text} ({r['trainable_params'] / 1e6:.0f}M trained, {r.get('feed', 'synthetic')})",
            {"tokens_per_s": r["tokens_per_s"], "mfu_pct": None if mfu is None else 100 * mfu}, None)


def zero2_numbers(path: Path, plain: Path):
    z, p = json.loads(path.read_text()), json.loads(plain.read_text())
    ratio = z["tokens_per_s"] / p["tokens_per_s"]
    return f"{z['tokens_per_s']:.0f} tok/s, {ratio:.2f}x the plain run ({z.get('precision')})", {"ratio": ratio}, None


def collect_numbers(run: Path):
    c = json.loads((run / "collect" / "collect.json").read_text())
    fallbacks = c.get("eager_fallbacks", 0)
    text = (f"{c['tokens_per_s']:.0f} tok/s, {c['tokens']} tokens of {c['rows']} prompts, batches of up to "
            f"{c.get('largest_batch')}, KV peak {c.get('kv_peak_bytes', 0) / 2**30:.1f} of "
            f"{c.get('kv_budget_bytes', 0) / 2**30:.1f} GB")
    fault = f"{fallbacks} graph capture(s) fell back to eager steps" if fallbacks else None
    return text, {"tokens_per_s": c["tokens_per_s"]}, fault


def pipeline_numbers(run: Path):
    p = json.loads((run / "pipeline.json").read_text())
    t, s = p["timings"], p.get("shipped")
    times = ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in t.items() if k.endswith("_s"))
    if not s:
        b = p.get("best") or {}
        return f"no draft shipped (best: {b.get('draft')}, lossless {b.get('lossless')}); {times}", {"shipped": False}, None
    return f"shipped {s['kind']}: {s['speedup']}x, α {s['acceptance_rate']}; {times}", {"shipped": True}, None


def judge(target: Target, metrics: dict, fault: str | None) -> tuple[float | None, bool, str]:
    """(measured, met, status) of a row whose step ran: met when the metric is at least the target and nothing
    failed the row (fault: an eager fallback); a missing metric is not met."""
    measured = metrics.get(target.metric)
    if measured is None:
        return None, False, f"not measured ({target.metric})"
    value = float(measured)
    if fault:
        return value, False, fault
    met = value >= target.at_least
    return value, met, "ok" if met else f"below target ({value:.4g} < {target.at_least:g} {target.unit})"


def run_step(name: str, cmd: list[str], timeout: float, logs: Path, env: dict | None = None) -> tuple[str, float]:
    """One step in its own process group (a crash or hang ends that step only); (status, seconds). At its end, or
    its timeout, the whole group is killed: a launcher's workers or an engine process cannot outlive it and hold
    the GPU during the next step."""
    logs.mkdir(parents=True, exist_ok=True)
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(logs / f"{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_group(proc)
    if rc is None:
        return f"timeout ({timeout:.0f}s)", time.perf_counter() - t0
    return ("ok" if rc == 0 else f"failed (exit {rc})"), time.perf_counter() - t0


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the step's process group, SIGKILL to what is left after `grace` seconds; reaps the step."""
    import signal

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # the group is gone
        end = time.monotonic() + wait
        while time.monotonic() < end and group_alive(proc.pid):
            time.sleep(0.1)
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def error_line(path: Path) -> str:
    """A failed step's reason: its `error:` line (the jobs' one-line errors), else its last line."""
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()] if path.is_file() else []
    errors = [x for x in lines if x.startswith("error:")]
    return (errors or lines or [""])[-1][:200]


def table(rows: list[dict]) -> str:
    head = ("row", "device", "what", "numbers", "target", "met", "seconds", "status")

    def target(r):
        return "" if r["target"] is None else f">= {r['target']:g} {r['unit']}"

    cells = [head] + [(r["row"], r["device"], r["what"], r["numbers"], target(r), "yes" if r["met"] else "NO",
                       f"{r['seconds']:.1f}", r["status"]) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join(" | ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells)


def step_rows(name: str, status: str, seconds: float, reads: dict, dev: str, logs: Path, shape: str) -> list[dict]:
    """The rows one step gives: each its numbers, target, measured value and whether it met the target, or why there
    are none."""
    rows = []
    for row, (what, numbers) in reads.items():
        target, measured, met = TARGETS[shape][row], None, False
        try:
            found, metrics, fault = numbers()
            measured, met, judged = judge(target, metrics, fault)
            ok = judged if status == "ok" else status
            met = met and status == "ok"
        except Exception as e:  # noqa: BLE001 - a step's missing or partial output is reported, not raised
            found = str(e)[:200] if status == "ok" else error_line(logs / f"{name}.log")
            ok = status if status != "ok" else "failed"
        rows.append({"row": row, "device": dev, "what": what, "numbers": found, "target": target.at_least,
                     "unit": target.unit, "measured": measured, "met": met, "seconds": seconds, "status": ok})
        print(f"   {row}: {ok} in {seconds:.1f}s: {found}", flush=True)
    return rows


def step_env() -> dict:
    """The steps' environment: on a GPU a host sync inside a collection or training step fails it."""
    env = dict(os.environ)
    if torch.cuda.is_available():
        env.setdefault(sync_debug.ENV, "error")
    return env


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
                 "target": None, "unit": "", "measured": None, "met": True, "seconds": time.perf_counter() - t0,
                 "status": "ok"})
    total, env = TOTAL_S[cfg.shape], step_env()
    for name, cmd, reads in steps(out, cfg.shape):
        timeout = BUDGETS[cfg.shape][name]
        if total is not None:  # never past the whole check's time, counted from this process's start
            timeout = min(timeout, total - process_age())
        status, seconds = run_step(name, cmd, timeout, out / "logs", env)
        rows += step_rows(name, status, seconds, reads, dev, out / "logs", cfg.shape)
        (out / "gpu_check.json").write_text(json.dumps(rows, indent=2) + "\n")  # as each step ends
    print(table(rows))
    return rows


def process_age() -> float:
    """Seconds since this process started (its imports included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def main(argv: list[str] | None = None) -> None:
    _, rows = cli.run_job(GpuCheckConfig, run, argv, __doc__)
    missed = [r["row"] for r in rows if not r["met"]]
    if missed:
        print(f"gpu_check: {len(missed)} row(s) did not meet their target: {', '.join(missed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
