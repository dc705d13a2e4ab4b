"""Benchmark collection throughput against calling `target.generate` one prompt at a time, or vLLM against HF.

    python -m distill.collect.bench --target default --prompts heldout --n 64 --max-new-tokens 64 --topk 32
    python -m distill.collect.bench --engine vllm --n 64 --max-new-tokens 64 --topk 32   # collect: vLLM vs HF
    python -m distill.collect.bench --n 32 --max-new-tokens 128 --samples 4                # + collect --samples 4

Same prompts, same process, after a warm-up: (a) HF `generate` per prompt (greedy, no logprobs stored),
(b) the full `distill.collect` run (batched, top-k logprobs computed and written to shards). Prints both
tokens/s, the ratio, and storage per token; the JSON result is the last stdout line. Then the step's matmuls alone
(gemm_ceiling): every linear layer of the target once at the batch's rows, timed here, so the tokens/s a step made of
nothing but them would reach stands beside the collection's, and the gap shows at a glance.
With --engine vllm: (a) `distill.collect --engine hf` after a warm-up collection of 2 prompts, (b) `--engine vllm`
(vLLM warms itself up when its engine starts); tokens/s over the generation time the shards record (engine and
model loading excluded, their wall times reported), and whether the stored top-k agree (compare()).
With --samples K (engine hf): (c) the same collection with K answers per prompt (the greedy one + K-1 sampled at
--sample-temperature), its tokens/s and its ratio to (b): what the extra answers cost per token.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from decode import cli
from decode.drafting.prompt_read import wall_clock
from decode.errors import UserError
from decode.models.targets import load_target
from decode.prompts import encode_prompt
from distill.collect import CollectConfig, kv_budget, run
from distill.prompts import load_prompts


@dataclass
class CollectBenchConfig:
    target: str = field(default="default", metadata={"help": "target: default, HF folder, Hub id or .gguf"})
    prompts: str = field(default="heldout", metadata={"help": "train/heldout (bundled), a JSONL file, or an HF dataset"})
    n: int = field(default=64, metadata={"help": "prompts timed"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per prompt"})
    topk: int = field(default=32, metadata={"help": "target logprobs stored per position by the collection"})
    batch_size: int = field(default=CollectConfig.batch_size, metadata={"help": "the collection's prompts per batch"})
    engine: str = field(default="hf", metadata={"help": "hf: collect vs HF generate one at a time | vllm: collect "
                                                        "--engine vllm vs --engine hf"})
    samples: int = field(default=1, metadata={"help": "> 1 (engine hf): also time collect --samples K"})
    sample_temperature: float = field(default=CollectConfig.sample_temperature,
                                      metadata={"help": "temperature of the sampled answers (--samples K)"})

    def __post_init__(self):
        if self.engine not in ("hf", "vllm"):
            raise UserError(f"--engine must be hf or vllm, got {self.engine!r}")
        if self.n < 1:
            raise UserError(f"--n must be >= 1 (prompts timed), got {self.n}")
        if self.samples > 1 and self.engine != "hf":
            raise UserError(f"--samples {self.samples} times the HF collection; leave it out with --engine {self.engine}")
        # the collection's own checks (max_new_tokens, topk, batch_size, samples), with its lines, before any model loads
        CollectConfig(max_new_tokens=self.max_new_tokens, topk=self.topk, batch_size=self.batch_size,
                      samples=self.samples, sample_temperature=self.sample_temperature)


def bench_hf(a: CollectBenchConfig) -> dict:
    """(a) target.generate one prompt at a time against (b) the collection job (see the module docstring)."""
    rows = load_prompts(a.prompts, limit=a.n)  # a bad prompt set fails before the target loads
    target, tok = load_target(a.target)
    encoded = [encode_prompt(tok, r) for r in rows]

    def one(ids):
        x = torch.tensor([ids])
        with torch.inference_mode():
            y = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=a.max_new_tokens, do_sample=False)
        return y.shape[1] - len(ids)

    one(encoded[0])  # warm-up
    t0 = time.perf_counter()
    hf_tokens = sum(one(ids) for ids in encoded)
    hf_s = time.perf_counter() - t0
    col = timed_collect(a, samples=1)  # (b) the real collection job, into a scratch folder
    result = {
        "target": a.target, "prompts": len(rows), "max_new_tokens": a.max_new_tokens, "k": a.topk,
        "batch_size": a.batch_size, "device": f"cpu ({torch.get_num_threads()} threads)",
        "hf_generate_one_at_a_time": {"tokens": hf_tokens, "seconds": round(hf_s, 2), "tokens_per_s": round(hf_tokens / hf_s, 2)},
        "collect": col,
    }
    result["ratio"] = round(col["tokens_per_s"] / result["hf_generate_one_at_a_time"]["tokens_per_s"], 2)
    print(f"target.generate one at a time: {result['hf_generate_one_at_a_time']['tokens_per_s']} tokens/s; "
          f"collect (batched, top-{a.topk} stored): {col['tokens_per_s']} tokens/s; "
          f"ratio {result['ratio']}x; {col['bytes_per_token']} bytes/token")
    g = result["gemm"] = gemm_ceiling(target, min(len(rows), kv_budget.auto_rows(target.device, a.batch_size)),
                                      sum(map(len, encoded)), col["tokens"])
    print(f"the step's matmuls alone at {g['rows']} rows: {g['gemm_gflop_per_s']} GFLOP/s here; the prompts' "
          f"({g['prompt_tokens']} tokens) and answers' matmuls at that rate allow {g['tokens_per_s']} tokens/s; "
          f"collect reaches {col['tokens_per_s'] / g['tokens_per_s']:.0%} of that")
    if a.samples > 1:  # (c)
        many = result[f"collect_samples_{a.samples}"] = timed_collect(a, samples=a.samples)
        result["samples_ratio"] = round(many["tokens_per_s"] / col["tokens_per_s"], 2)
        print(f"collect --samples {a.samples} (T {a.sample_temperature}): {many['rows']} answers, {many['tokens']} "
              f"tokens, {many['tokens_per_s']} tokens/s; {result['samples_ratio']}x the tokens/s of one answer each")
    return result


@torch.inference_mode()
def gemm_ceiling(model, rows: int, prompt_tokens: int, answer_tokens: int, reps: int = 3) -> dict:
    """A collection's matmuls alone: every nn.Linear of the target once on `rows` random rows, timed after a
    warm-up (the target's own weights and dtype, unfused: a lower bound on the rate), then what the prompts' forward
    (every linear but the head) and the answers' steps (all of them) cost at that rate -> {rows, GFLOP an answer
    token, GEMM GFLOP/s here, prompt_tokens, the answer tokens/s a collection made of nothing else would reach}."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    head = model.get_output_embeddings()
    xs = {n: torch.randn(rows, n, dtype=model.dtype, device=model.device) for n in {m.in_features for m in linears}}

    def step():
        for m in linears:
            F.linear(xs[m.in_features], m.weight)

    step()
    t0 = wall_clock(model.device)
    for _ in range(reps):
        step()
    seconds = (wall_clock(model.device) - t0) / reps
    flop = 2 * sum(m.weight.numel() for m in linears)  # an answer token
    rate = flop * rows / seconds
    body = flop - 2 * (head.weight.numel() if head in linears else 0)  # a prompt token: the head runs on its last only
    total = (prompt_tokens * body + answer_tokens * flop) / rate
    return {"rows": rows, "gflop_per_token": round(flop / 1e9, 3), "gemm_gflop_per_s": round(rate / 1e9, 1),
            "prompt_tokens": prompt_tokens, "tokens_per_s": round(answer_tokens / total, 1) if total else 0.0}


def timed_collect(a: CollectBenchConfig, samples: int) -> dict:
    """One collection of a's first --n prompts into a scratch folder, timed end to end (the target's load included,
    as in the job)."""
    with tempfile.TemporaryDirectory() as out:
        cfg = CollectConfig(target=a.target, prompts=a.prompts, limit=a.n, output=out, max_new_tokens=a.max_new_tokens,
                            topk=a.topk, batch_size=a.batch_size, samples=samples,
                            sample_temperature=a.sample_temperature)
        t0 = time.perf_counter()
        info = run(cfg)
        s = time.perf_counter() - t0
    return {"rows": info["rows"], "tokens": info["tokens"], "seconds": round(s, 2),
            "tokens_per_s": round(info["tokens"] / s, 2), "bytes_per_token": info["bytes_per_token"]}


def main(argv=None) -> None:
    _, result = cli.run_job(CollectBenchConfig, lambda a, argv: engines(a) if a.engine == "vllm" else bench_hf(a),
                            argv, __doc__)
    print(json.dumps(result))


def near_tie_only(ids_a: list[int], lp_a: list[float], ids_b: list[int], lp_b: list[float], tol: float = 2e-2) -> bool:
    """One position's top-k from two engines differ only where candidates are (nearly) tied: every slot whose id
    differs holds a logprob within `tol` of a neighbour's in either list (two ids swapped), or is the last slot
    (rank k and k+1 swapped). tol: two fp16 steps at |logprob| in [8, 16)."""
    k = len(ids_a)
    for j in range(k):
        if ids_a[j] == ids_b[j]:
            continue
        tied = j == k - 1 or any(abs(lp[j] - lp[n]) <= tol for lp in (lp_a, lp_b) for n in (j - 1, j + 1) if 0 <= n < k)
        if not tied:
            return False
    return True


def compare(a: dict[str, dict], b: dict[str, dict]) -> dict:
    """Rows of two collections by id: responses equal, and the stored top-k over the positions both share up to
    the first differing response token (past it the two condition on different text)."""
    same_resp = positions = same_ids = ties = 0
    max_diff = 0.0
    for i, ra in a.items():
        rb = b[i]
        x, y = ra["response_ids"], rb["response_ids"]
        same_resp += x == y
        n = next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
        positions += n
        for j in range(n):
            same = ra["topk_ids"][j] == rb["topk_ids"][j]
            same_ids += same
            ties += not same and near_tie_only(ra["topk_ids"][j], ra["topk_logprobs"][j], rb["topk_ids"][j],
                                               rb["topk_logprobs"][j])
        if n:
            d = torch.tensor(ra["topk_logprobs"][:n]) - torch.tensor(rb["topk_logprobs"][:n])
            max_diff = max(max_diff, d.abs().max().item())
    return {"responses_identical": same_resp, "prompts": len(a), "positions_compared": positions,
            "positions_total": sum(len(r["response_ids"]) for r in a.values()), "topk_ids_identical": same_ids,
            "topk_ids_differing_only_at_near_ties": ties, "max_abs_logprob_diff": round(max_diff, 5)}


def engines(a: CollectBenchConfig) -> dict:
    """collect --engine hf against --engine vllm, same prompts, one process (see the module docstring)."""
    from distill.collect import vllm_engine
    from distill.collect.shards import load_collected

    vllm_engine.require("--engine vllm")
    kw = dict(target=a.target, prompts=a.prompts, limit=a.n, max_new_tokens=a.max_new_tokens, topk=a.topk,
              batch_size=a.batch_size)
    res, rows = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        run(CollectConfig(output=f"{tmp}/warm", **{**kw, "limit": 2}))
        for engine in ("hf", "vllm"):
            t0 = time.perf_counter()
            info = run(CollectConfig(output=f"{tmp}/{engine}", engine=engine, **kw))
            res[engine] = {"tokens": info["tokens"], "tokens_per_s": info["tokens_per_s"],
                           "wall_s_with_loading": round(time.perf_counter() - t0, 2)}
            rows[engine] = {r["id"]: r for r in load_collected(f"{tmp}/{engine}").to_list()}
    import vllm

    result = {"target": a.target, "prompts": a.n, "max_new_tokens": a.max_new_tokens, "k": a.topk,
              "batch_size": a.batch_size, "torch_threads": torch.get_num_threads(), "vllm": vllm.__version__,
              "hf": res["hf"], "vllm_engine": res["vllm"],
              "ratio": round(res["vllm"]["tokens_per_s"] / res["hf"]["tokens_per_s"], 2),
              "topk": compare(rows["hf"], rows["vllm"])}
    t = result["topk"]
    print(f"collect --engine hf: {res['hf']['tokens_per_s']} tokens/s; --engine vllm: {res['vllm']['tokens_per_s']} "
          f"tokens/s; ratio {result['ratio']}x; responses identical {t['responses_identical']}/{t['prompts']}; top-k ids "
          f"identical at {t['topk_ids_identical']}/{t['positions_compared']} shared positions (of the others "
          f"{t['topk_ids_differing_only_at_near_ties']} differ only at near-ties), max |Δ logprob| "
          f"{t['max_abs_logprob_diff']}")
    return result


if __name__ == "__main__":
    main()
