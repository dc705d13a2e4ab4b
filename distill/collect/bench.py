"""Benchmark collection throughput against calling `target.generate` one prompt at a time.

    python -m distill.collect.bench --target default --prompts heldout --n 64 --max-new-tokens 64 --topk 32

Same prompts, same process, after a warm-up: (a) HF `generate` per prompt (greedy, no logprobs stored),
(b) the full `distill.collect` run (batched, top-k logprobs computed and written to shards). Prints both
tokens/s, the ratio, and storage per token; the JSON result is the last stdout line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import torch

from decode.errors import UserError
from decode.prompts import encode_prompt
from decode.targets import load_target
from distill.collect import CollectConfig, run
from distill.prompts import load_prompts


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="default")
    p.add_argument("--prompts", default="heldout")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=CollectConfig.batch_size)
    a = p.parse_args(argv)
    try:
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
