"""Peak host memory of training against the size of the collected data (it should not grow with it).

    python -m distill.train.memory_bench train --tokens 500000 2000000 --steps 5

`train`: writes a randomly initialised Llama-shaped target (the default tokenizer, vocabulary 49,152; small
layers) and, per size, a synthetic collected set of that many response tokens with top-k log-probs, in the
real collected format (distill.collect.shards.write_shard, as collection writes it, and a collect.json). Then
trains a 1-layer draft on each for a few steps, each run in a subprocess, and measures that subprocess's peak
RSS (os.wait4's ru_maxrss). Prints one JSON line per run, then a summary line: the peak RSS of each size and
the ratio largest / smallest (the goal: below 1.10).

Subcommands are the benchmark's parts; `build` (the draft build's memory) is left for later.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS_PER_SHARD = 200


def write_target(folder: Path, hidden: int, layers: int) -> str:
    """A random LlamaForCausalLM with the default tokenizer, saved to folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from decode.targets import load_tokenizer

    tok = load_tokenizer("default")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def write_collected(out: Path, target: str, tokens: int, response_len: int, prompt_len: int, topk: int,
                    seed: int = 0) -> dict:
    """A synthetic collection of `tokens` response tokens (rows of response_len) with top-k, as collection writes it."""
    from decode.targets import load_tokenizer
    from distill.collect import shards

    tok = load_tokenizer(target)
    vocab, rng = len(tok), np.random.default_rng(seed)
    rows = -(-tokens // response_len)
    for first in range(0, rows, ROWS_PER_SHARD):
        batch = [_row(f"p{i}", rng, vocab, prompt_len, response_len, topk) for i in range(first, min(rows, first + ROWS_PER_SHARD))]
        shards.write_shard(out, f"{first:08d}", batch, {"rows": len(batch), "tokens": len(batch) * response_len,
                                                        "seconds": 1.0, "rank": 0})
    info = {"target": target, "tokenizer": shards.tokenizer_fingerprint(tok), "k": topk, "rows": rows,
            "tokens": rows * response_len, "settings": {"mode": "generate", "max_new_tokens": response_len, "topk": topk}}
    shards.write_json_atomic(out / "collect.json", info)
    return info


def _row(rid: str, rng, vocab: int, prompt_len: int, response_len: int, topk: int) -> dict:
    response = rng.integers(0, vocab, response_len)
    ids = rng.integers(0, vocab, (response_len, topk))
    ids[:, 0] = response  # greedy-like: the sampled token is the teacher's first
    logprobs = np.sort(-rng.exponential(2.0, (response_len, topk)), axis=-1)[:, ::-1].astype(np.float16)
    return {"id": rid, "category": "bench", "source": "target", "prompt_ids": rng.integers(0, vocab, prompt_len).tolist(),
            "response_ids": response.tolist(), "topk_ids": ids.tolist(), "topk_logprobs": logprobs.tolist()}


def run_training(target: str, data: Path, out: Path, steps: int, extra: list[str]) -> dict:
    """Train in a subprocess; its peak RSS (MiB) and wall time."""
    argv = ["--target", target, "--data", str(data), "--output", str(out), "--max-steps", str(steps), "--layers", "1",
            "--batch-size", "8", "--report-to", "none", "--log-every", "1", "--eval-every", str(10 * steps),
            "--eval-rows", "16", "--save-every", str(10 * steps), "--warmup-steps", "1", *extra]
    cmd = [sys.executable, "-c", "import sys; from distill.train import main; main(sys.argv[1:])", *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (kilobytes on Linux)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"training on {data} failed ({proc.returncode}):\n{output[-3000:]}")
    return {"peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "seconds": round(time.perf_counter() - t0, 1)}


def train_bench(args) -> list[dict]:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="memory_bench."))
    target = write_target(work / "target", args.hidden, args.layers)
    results = []
    for tokens in args.tokens:
        data = work / f"data-{tokens}"
        info = write_collected(data, target, tokens, args.response_len, args.prompt_len, args.topk)
        result = {"part": "train", "response_tokens": info["tokens"], "rows": info["rows"], "topk": args.topk,
                  "data_mib": round(sum(f.stat().st_size for f in data.rglob("*.arrow")) / 2**20, 1),
                  **run_training(target, data, work / f"run-{tokens}", args.steps, args.train_args)}
        print(json.dumps(result), flush=True)
        results.append(result)
    peaks = [r["peak_rss_mib"] for r in results]
    print(json.dumps({"part": "train", "summary": True, "peak_rss_mib": dict(zip(map(str, args.tokens), peaks)),
                      "ratio": round(max(peaks) / min(peaks), 3)}), flush=True)
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m distill.train.memory_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    t = sub.add_parser("train", help="peak RSS of training on collected sets of different sizes")
    t.add_argument("--tokens", type=int, nargs="+", default=[500_000, 2_000_000], help="response tokens per set")
    t.add_argument("--steps", type=int, default=5, help="optimizer steps per run")
    t.add_argument("--response-len", type=int, default=500, help="response tokens per row")
    t.add_argument("--prompt-len", type=int, default=64, help="prompt tokens per row")
    t.add_argument("--topk", type=int, default=32, help="teacher log-probs per position (collection's default)")
    t.add_argument("--hidden", type=int, default=64, help="the target's width")
    t.add_argument("--layers", type=int, default=2, help="the target's layers")
    t.add_argument("--workdir", default=None, help="where targets, data and runs go (default: a new temp folder)")
    t.add_argument("--train-args", nargs=argparse.REMAINDER, default=[], help="more training options, last")
    t.set_defaults(run=train_bench)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
