"""Benchmark collection throughput against calling `target.generate` one prompt at a time.

    python -m distill.collect.bench --target default --prompts heldout --n 64 --max-new-tokens 64 --topk 32

Same prompts, same process, after a warm-up: (a) HF `generate` per prompt (greedy, no logprobs stored),
(b) the full `distill.collect` run (batched, top-k logprobs computed and written to shards). Prints both
tokens/s, the ratio, and storage per token; the JSON result is the last stdout line.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from decode import cli
from decode.errors import UserError
from decode.prompts import encode_prompt
from decode.targets import load_target
from distill.collect import CollectConfig, run
from distill.prompts import load_prompts


@dataclass
class CollectBenchConfig:
    target: str = field(default="default", metadata={"help": "target: default, HF folder, Hub id or .gguf"})
    prompts: str = field(default="heldout", metadata={"help": "train/heldout (bundled), a JSONL file, or an HF dataset"})
    n: int = field(default=64, metadata={"help": "prompts timed"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per prompt"})
    topk: int = field(default=32, metadata={"help": "target logprobs stored per position by the collection"})
    batch_size: int = field(default=CollectConfig.batch_size, metadata={"help": "the collection's prompts per batch"})


def main(argv=None) -> None:
    try:
        a = cli.parse(CollectBenchConfig, argv, __doc__)
        target, tok = load_target(a.target)
        rows = load_prompts(a.prompts, limit=a.n)
        encoded = [encode_prompt(tok, r) for r in rows]
        # --- (a) target.generate, one prompt at a time (warm-up first)
        def one(ids):
            x = torch.tensor([ids])
            with torch.inference_mode():
                y = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=a.max_new_tokens, do_sample=False)
            return y.shape[1] - len(ids)
        one(encoded[0])
        t0 = time.perf_counter()
        hf_tokens = sum(one(ids) for ids in encoded)
        hf_s = time.perf_counter() - t0
        # --- (b) the real collection job, into a scratch folder
        with tempfile.TemporaryDirectory() as out:
            cfg = CollectConfig(target=a.target, prompts=a.prompts, limit=a.n, output=out, max_new_tokens=a.max_new_tokens,
                                topk=a.topk, batch_size=a.batch_size)
            t0 = time.perf_counter()
            info = run(cfg)
            col_s = time.perf_counter() - t0
    except UserError as e:
        sys.exit(f"error: {e}")
    result = {
        "target": a.target, "prompts": len(rows), "max_new_tokens": a.max_new_tokens, "k": a.topk,
        "batch_size": a.batch_size, "device": f"cpu ({torch.get_num_threads()} threads)",
        "hf_generate_one_at_a_time": {"tokens": hf_tokens, "seconds": round(hf_s, 2), "tokens_per_s": round(hf_tokens / hf_s, 2)},
        "collect": {"tokens": info["tokens"], "seconds": round(col_s, 2), "tokens_per_s": round(info["tokens"] / col_s, 2),
                    "bytes_per_token": info["bytes_per_token"]},
    }
    result["ratio"] = round(result["collect"]["tokens_per_s"] / result["hf_generate_one_at_a_time"]["tokens_per_s"], 2)
    print(f"target.generate one at a time: {result['hf_generate_one_at_a_time']['tokens_per_s']} tokens/s; "
          f"collect (batched, top-{a.topk} stored): {result['collect']['tokens_per_s']} tokens/s; "
          f"ratio {result['ratio']}x; {info['bytes_per_token']} bytes/token")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
