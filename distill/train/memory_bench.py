"""Peak host memory of building a draft from a large target, and of training against the size of the data.

    python -m distill.train.memory_bench build      # a 1.07B-parameter Llama-shaped target, a 2-layer draft
    python -m distill.train.memory_bench train --tokens 500000 2000000 --steps 5

`build`: writes a randomly initialised Llama-shaped target of --hidden x --layers (default 2048 x 16, FFN 8192,
32 heads over 8 KV heads, the default tokenizer's 49,152 tokens, tied head: 1.07B parameters) as bf16
safetensors in 1 GB shards, a tensor at a time. Then, each in a subprocess, builds the default design's draft
(the first 2 layers) as training does (designs.build_draft_from_files) and, for comparison, as a whole-target load
would (from_pretrained, then the cut), and measures each subprocess's peak RSS. The goal: the draft's own size
plus at most 1.5 GB.

`train`: writes a randomly initialised Llama-shaped target (the default tokenizer, vocabulary 49,152; small
layers) and, per size, a synthetic collected set of that many response tokens with top-k log-probs, in the
real collected format (distill.collect.shards.write_shard, as collection writes it, and a collect.json). Then
trains a 1-layer draft on each for a few steps, each run in a subprocess, and measures that subprocess's peak
RSS (VmHWM, as the subprocess reports it). Prints one JSON line per run, then a summary line: the peak RSS of
each size and the ratio largest / smallest (the goal: below 1.10).
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
SHARD_BYTES = 2**30  # target weight shard size, as from_pretrained would write them
# The child reports its own peak: VmHWM, the high-water mark of the memory map exec gave it. (Its rusage
# ru_maxrss would not do: Linux carries the parent's RSS at fork into the child's maxrss across exec.)
PEAK = "\nprint('peak_rss_kib', open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"


def run_measured(code: str, argv: list[str], what: str) -> str:
    """Run `code` in a fresh interpreter, then its peak-RSS line; its output (the peak line last)."""
    done = subprocess.run([sys.executable, "-c", code + PEAK, *argv], capture_output=True, text=True,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def peak_mib(output: str) -> float:
    line = [x for x in output.splitlines() if x.startswith("peak_rss_kib ")][-1]
    return round(int(line.split()[1]) / 1024, 1)


# --- train: peak RSS against the size of the collected data


def write_target(folder: Path, hidden: int, layers: int) -> str:
    """A random LlamaForCausalLM with the default tokenizer, saved to folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from decode.models.targets import load_tokenizer

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
    from decode.models.targets import load_tokenizer
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
    t0 = time.perf_counter()
    output = run_measured("import sys; from distill.train import main; main(sys.argv[1:])", argv,
                          f"training on {data}")
    return {"peak_rss_mib": peak_mib(output), "seconds": round(time.perf_counter() - t0, 1)}


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


# --- build: the draft from a large target's files


def write_big_target(folder: Path, hidden: int, layers: int) -> dict:
    """A random Llama-shaped target written as bf16 safetensors shards, a tensor at a time (never whole in memory)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from decode.models.targets import load_tokenizer

    tok = load_tokenizer("default")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                         tie_word_embeddings=True, dtype="bfloat16", bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items() if k != "lm_head.weight"}
    folder.mkdir(parents=True, exist_ok=True)
    gen, shard, size, weight_map, n = torch.Generator().manual_seed(0), {}, 0, {}, 0
    for key, shape in shapes.items():
        shard[key] = (torch.randn(shape, generator=gen) * 0.02).to(torch.bfloat16)
        size += shard[key].numel() * 2
        if size >= SHARD_BYTES or key == list(shapes)[-1]:
            name = f"model-{n:05d}.safetensors"
            save_file(shard, folder / name, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard, size, n = {}, 0, n + 1
    params = sum(int(np.prod(s)) for s in shapes.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": params * 2},
                                                                     "weight_map": weight_map}))
    config.save_pretrained(folder)
    tok.save_pretrained(folder)
    return {"params": params, "bytes": params * 2}


BUILD = {  # what each subprocess runs: the draft as training builds it, and the fp32 whole-target load it replaced
    "from_files": "from distill.train.designs import DraftDesign, build_draft_from_files\n"
                  "from decode.models.targets import load_tokenizer\n"
                  "draft, _ = build_draft_from_files(DraftDesign(), FOLDER, load_tokenizer(FOLDER))\n",
    "whole_target": "from decode.models.layer_cut import draft_from_layers\nfrom decode.models.targets import load_model\n"
                    "target, _ = load_model(FOLDER, 'float32')\ndraft = draft_from_layers(target, [0, 1])\n",
}
# every weight read once, so that memory-mapped tensors are resident, as they are once training touches them
TOUCH = "sum(float(p.sum()) for p in draft.parameters())\n"


def run_build(folder: Path, how: str) -> dict:
    """Build the draft in a fresh process: its peak RSS (MiB), wall time, and the draft's parameter bytes."""
    code = (f"FOLDER = {str(folder)!r}\n" + BUILD[how] + TOUCH +
            "print('draft_bytes', sum(p.numel() * p.element_size() for p in draft.parameters()))")
    t0 = time.perf_counter()
    output = run_measured(code, [], f"building the draft ({how})")
    draft = int([x for x in output.splitlines() if x.startswith("draft_bytes ")][-1].split()[1])
    return {"how": how, "peak_rss_mib": peak_mib(output), "seconds": round(time.perf_counter() - t0, 1),
            "draft_mib": round(draft / 2**20, 1)}


def build_bench(args) -> list[dict]:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="memory_bench."))
    folder = work / "big-target"
    target = write_big_target(folder, args.hidden, args.layers)
    results = []
    for how in args.how:
        r = {"part": "build", "target_params": target["params"], "target_mib": round(target["bytes"] / 2**20, 1),
             **run_build(folder, how)}
        r["over_draft_mib"] = round(r["peak_rss_mib"] - r["draft_mib"], 1)  # the goal: <= 1536
        print(json.dumps(r), flush=True)
        results.append(r)
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
    b = sub.add_parser("build", help="peak RSS of building a 2-layer draft from a large target's files")
    b.add_argument("--hidden", type=int, default=2048, help="the target's width (FFN 4x; 32 heads over 8 KV heads)")
    b.add_argument("--layers", type=int, default=16, help="the target's layers")
    b.add_argument("--how", nargs="+", choices=list(BUILD), default=list(BUILD), help="which builds to measure")
    b.add_argument("--workdir", default=None, help="where the target goes (default: a new temp folder)")
    b.set_defaults(run=build_bench)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
