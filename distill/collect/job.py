"""Collect: run the target on prompts and store its outputs with top-k logprobs, resumably, in shards.

    python -m distill.collect --config configs/collect/default.yaml [--key value ...]
    accelerate launch --config_file configs/accelerate/ddp.yaml -m distill.collect --config ...  # each rank its share
    python -m distill.collect --mode score --prompts chats.jsonl ...        # teacher-force given responses
    python -m distill.collect --generator runs/train/checkpoint-400/hf ...  # on-policy: draft writes, target scores
    python -m distill.collect --engine vllm [--tensor-parallel-size 2] ...  # vLLM's continuous batching generates
    python -m distill.collect --prompts self:2000 ...                      # the target writes its prompts (Magpie)
    python -m distill.collect --samples 4 --sample-temperature 0.8 ...      # greedy answer + 3 sampled per prompt

Killing it at any moment and rerunning the same command finishes with every prompt exactly once.
The dataset layout is documented in distill/collect/shards.py; `load_collected(OUT)` returns it as one Dataset.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from tqdm import tqdm

from decode import cli
from decode.drafting.sampling import SamplingParams
from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.models.targets import (
    check_device,
    check_load_format,
    eos_ids,
    load_draft,
    load_format_field,
    load_target,
    load_tokenizer,
    parse_dtype,
    resolve,
)
from decode.prompts import check_context, encode_prompt
from distill.collect import kv_budget, llama_steps, self_prompts, shards, vllm_engine
from distill.collect.generation import Generated, generate_batch, score_batch, warm_up
from distill.prompts import load_prompts, split_response


@dataclass
class CollectConfig:
    target: str = field(default="default", metadata={"help": "target: default, HF folder, Hub id or .gguf"})
    prompts: str = field(default="train", metadata={"help": "train/heldout (bundled), a JSONL file, an HF dataset, "
                                                                 "or self:N (the target writes N prompts first)"})
    columns: dict = field(default_factory=dict, metadata={"help": "map of our field -> dataset column, e.g. {prompt: question}"})
    split: str = field(default="train", metadata={"help": "dataset split for HF datasets"})
    categories: list = field(default_factory=list, metadata={"help": "only these prompt categories"})
    limit: int = field(default=0, metadata={"help": "first N prompts only (0 = all)"})
    output: str = field(default="runs/collect", metadata={"help": "output folder (resumes if it exists)"})
    mode: str = field(default="generate", metadata={"help": "generate | score (teacher-force given responses)"})
    generator: str | None = field(default=None, metadata={"help": "draft folder that generates (on-policy data); target scores"})
    chat_template: bool = field(default=True, metadata={"help": "apply the tokenizer's chat template"})
    max_new_tokens: int = field(default=128, metadata={"help": "tokens generated per prompt"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy (the first answer, with --samples)"})
    samples: int = field(default=1, metadata={"help": "answers per prompt: the first at --temperature, the others "
                                                     "at --sample-temperature (rows ID~s1, ID~s2, ...)"})
    sample_temperature: float = field(default=0.8, metadata={"help": "temperature of answers 2..K (--samples K)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling (1 = off)"})
    top_k: int = field(default=0, metadata={"help": "sampling top-k (0 = off)"})
    stop: list = field(default_factory=list, metadata={"help": "stop strings"})
    topk: int = field(default=32, metadata={"help": "target logprobs stored per position (0 = none)"})
    batch_size: int = field(default=0, metadata={"help": "prompts per forward batch at most (one shard per batch); "
                                                        "0 = auto: 64 on the CPU (its throughput still grows at 64), "
                                                        "256 on a GPU; fewer where a batch's longest prompt leaves the "
                                                        "KV budget room for fewer (kv_budget.py)"})
    kv_budget_gb: float = field(default=0.0, metadata={"help": "GB of KV cache and prefill a batch may hold (HF "
                                                                "engine, generate mode); 0 = auto: 0.8 of the GPU "
                                                                "memory free once the target is loaded, 0.5 of the "
                                                                "available RAM on the CPU"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    device: str = field(default="auto", metadata={"help": "auto (this rank's GPU under a launcher, else every GPU: "
                                                          "a large target is spread over them; else CPU) | cpu | cuda[:N]"})
    dtype: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16"})
    load_format: str = load_format_field()
    engine: str = field(default="hf", metadata={"help": "hf (transformers, batched here) | vllm (vLLM's continuous "
                                                        "batching; --mode generate only) | auto (vllm when installed "
                                                        "on a CUDA machine, else hf)"})
    tensor_parallel_size: int = field(default=1, metadata={"help": "--engine vllm: GPUs each rank's vLLM spreads the "
                                                                   "target over"})
    shard_index: int = field(default=-1, metadata={"help": "this process's share (default: RANK from the launcher)"})
    num_shards: int = field(default=0, metadata={"help": "number of shares (default: WORLD_SIZE from the launcher)"})

    def __post_init__(self):
        if self.mode not in ("generate", "score"):
            raise UserError(f"--mode must be 'generate' or 'score', got {self.mode!r}")
        if self.generator and self.mode == "score":
            raise UserError("--generator makes on-policy data by generating; it cannot be combined with --mode score")
        if self.mode == "score" and not self.topk:
            raise UserError("--mode score stores top-k logprobs; give --topk > 0")
        if self_prompts.is_self(self.prompts):  # `self:N`: the target writes its prompts (self_prompts.py)
            self_prompts.parse(self.prompts, self.mode)
        for name in ("max_new_tokens", "samples"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("batch_size", "kv_budget_gb"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must be >= 0 (0 = auto), got {getattr(self, name)}")
        if self.limit < 0:
            raise UserError(f"--limit must be >= 0 (the first N prompts; 0 = all), got {self.limit}")
        if self.topk < 0:
            raise UserError(f"--topk must be >= 0 (logprobs stored per position; 0 = none), got {self.topk}")
        if self.num_shards < 0 or self.shard_index < -1:
            raise UserError(f"--num-shards must be >= 0 and --shard-index >= 0 (or -1 = RANK), got "
                            f"{self.num_shards} and {self.shard_index}")
        if self.num_shards and self.shard_index >= self.num_shards:
            raise UserError(f"--shard-index {self.shard_index} is outside 0..{self.num_shards - 1} "
                            f"(--num-shards {self.num_shards})")
        parse_dtype(self.dtype)
        if self.engine not in ("hf", "vllm", "auto"):
            raise UserError(f"--engine must be hf, vllm or auto, got {self.engine!r}")
        if self.engine == "vllm" and (self.mode == "score" or self.generator):
            raise UserError("--engine vllm generates with the target only; use --engine hf for --mode score and --generator")
        check_load_format(self.load_format)
        if self.tensor_parallel_size < 1:
            raise UserError(f"--tensor-parallel-size must be >= 1 (GPUs per vLLM engine), got {self.tensor_parallel_size}")
        SamplingParams(self.temperature, self.top_k, self.top_p)
        if self.samples > 1 and (self.sample_temperature <= 0 or self.mode == "score"):
            raise UserError(f"--samples {self.samples} adds sampled answers: give --sample-temperature > 0 (got "
                            f"{self.sample_temperature}), in --mode generate (score mode has one given response)")

    def settings(self) -> dict:
        """What makes two collections the same collection (anything else may change on resume)."""
        keys = ("target", "prompts", "columns", "split", "categories", "limit", "mode", "generator", "chat_template",
                "max_new_tokens", "temperature", "top_p", "top_k", "stop", "topk", "seed", "samples", "load_format")
        return {**{k: getattr(self, k) for k in keys}, "engine": self.resolved_engine(),
                "sample_temperature": self.sample_temperature if self.samples > 1 else None}

    def resolved_engine(self) -> str:
        """hf or vllm: `auto` picks vLLM only where it pays and only for what it runs (target generation)."""
        if self.engine == "auto" and (self.mode == "score" or self.generator):
            return "hf"
        return vllm_engine.resolve_engine(self.engine)


# settings keys added after collections were made: a settings file without one was made with this value
SETTINGS_SINCE = {"engine": "hf", "samples": 1, "sample_temperature": None, "load_format": "auto"}


def _rank_world(cfg: CollectConfig) -> tuple[int, int]:
    world = cfg.num_shards or int(os.environ.get("WORLD_SIZE", 1))
    rank = cfg.shard_index if cfg.shard_index >= 0 else int(os.environ.get("RANK", 0))
    if not 0 <= rank < world:
        raise UserError(f"shard index {rank} is outside 0..{world - 1}")
    return rank, world


def prepare(cfg: CollectConfig, tokenizer, max_positions: int, rows: list[dict] | None = None) -> list[dict]:
    """Prompts (`rows`, loaded here if not given) with token ids (and response ids in scoring mode), all checked
    before anything runs."""
    rows = load_prompts(cfg.prompts, cfg.columns, cfg.split, cfg.categories or None, cfg.limit) if rows is None else rows
    for row in rows:
        prompt, response = split_response(row) if cfg.mode == "score" else (row, None)
        if cfg.mode == "score" and response is None:
            raise UserError(f"prompt {row['id']!r} has no response to score: give a 'response' column or end "
                            "'messages' with an assistant turn")
        row["prompt_ids"] = encode_prompt(tokenizer, prompt, cfg.chat_template)
        if response is not None:
            row["response_ids"] = tokenizer(response, add_special_tokens=False)["input_ids"]
            if tokenizer.eos_token_id is not None:
                row["response_ids"].append(tokenizer.eos_token_id)
        n_new = len(row.get("response_ids", ())) if cfg.mode == "score" else cfg.max_new_tokens
        check_context(len(row["prompt_ids"]), n_new, max_positions, row["id"])
    return rows


def run(cfg: CollectConfig, argv: list[str] | None = None, command: str | None = None) -> dict | None:
    """Collect (resumable). `command`: the command line to record, when another job (pipeline, sweep) runs this stage."""
    out = Path(cfg.output)
    engine = cfg.resolved_engine()
    rank, world = _rank_world(cfg)
    if engine == "hf":
        check_device(cfg.device)
    own = self_prompts.parse(cfg.prompts, cfg.mode) if self_prompts.is_self(cfg.prompts) else None
    # a bad prompt file fails here, not after a large target has loaded
    rows = None if own else load_prompts(cfg.prompts, cfg.columns, cfg.split, cfg.categories or None, cfg.limit)
    # vLLM loads the target itself (in its engine process): here only its config, generation config and tokenizer
    target, tok = (load_target(cfg.target, cfg.dtype, cfg.device, load_format=cfg.load_format) if engine == "hf"
                   else _target_meta(cfg.target))
    if own:  # the target writes the prompts first: OUT/self-prompts.jsonl, resumable
        rows = self_prompts.prompt_rows(own, cfg, world, target, tok)
    vocab = target.config.vocab_size
    if cfg.topk > vocab:
        raise UserError(f"--topk {cfg.topk} is larger than the target's vocabulary ({vocab})")
    rows = prepare(cfg, tok, target.config.max_position_embeddings, rows)
    shards.guard_settings(out, {**cfg.settings(), "tokenizer": shards.tokenizer_fingerprint(tok)}, SETTINGS_SINCE)
    cli.save(cfg, out / "collect.config.json")

    shards.clean_temp(out, f"r{rank:03d}-")  # a kill mid-write leaves this rank's temp folder behind
    done = shards.done_ids(out)
    mine = [r for i, r in enumerate(answers(rows, cfg.samples)) if i % world == rank and r["id"] not in done]
    # first answers, then sampled ones (a batch shares one temperature); similar lengths share a batch: little padding
    mine.sort(key=lambda r: (r["sample"] > 0, -len(r["prompt_ids"])))
    eos = set(eos_ids(target, tok))
    source = "score" if cfg.mode == "score" else ("on_policy" if cfg.generator else "target")

    bar = tqdm(total=len(mine), desc=f"collect[{rank}/{world}]", unit="prompt", mininterval=5)
    totals = [0, 0.0]  # tokens, seconds

    def emit(batch: list[dict], results: list[Generated], seconds: float, **meta) -> None:
        """One shard per batch of finished prompts: what a kill can lose is at most one batch."""
        n_tok = _write_batch(out, rank, source, batch, results, seconds, **meta)
        totals[0], totals[1] = totals[0] + n_tok, totals[1] + seconds
        bar.update(len(batch))
        bar.set_postfix(tokens=totals[0], tok_s=f"{totals[0] / max(totals[1], 1e-9):.1f}")

    if mine and engine == "vllm":
        _collect_vllm(cfg, target, mine, eos, emit)
    elif mine:
        _collect_hf(cfg, target, tok, mine, eos, emit)
    bar.close()
    return finish(out, cfg, rows, tok, argv, command, target.config)


def answers(rows: list[dict], samples: int) -> list[dict]:
    """One row per answer to collect: answer j of prompt ID is row `ID~sJ` (ID itself for the first)."""
    return [{**r, "id": shards.sample_id(r["id"], j), "sample": j} for r in rows for j in range(samples)]


def temperature_of(cfg: CollectConfig, row: dict) -> float:
    return cfg.temperature if row["sample"] == 0 else cfg.sample_temperature


def _target_meta(spec: str):
    """What collection needs of a target that vLLM will serve, without loading its weights: a stand-in with
    .config, .generation_config (eos ids) and .path, and the tokenizer."""
    from transformers import AutoConfig, GenerationConfig

    path = resolve(spec)
    config = AutoConfig.from_pretrained(path)
    try:
        gen = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: the model config's eos, as from_pretrained would do
        gen = GenerationConfig.from_model_config(config)
    return SimpleNamespace(config=config, generation_config=gen, path=path), load_tokenizer(spec)


def _write_batch(out: Path, rank: int, source: str, batch: list[dict], results: list[Generated], seconds: float,
                 **meta) -> int:
    """Write one shard of finished prompts (the dataset format of shards.py); the response tokens it holds. meta:
    more of the shard's numbers (eager_fallbacks, kv_budget)."""
    n_tok = sum(len(g.response_ids) for g in results)
    records = [
        {"id": r["id"], "category": r["category"], "source": source, "prompt_ids": r["prompt_ids"],
         "response_ids": g.response_ids, "topk_ids": g.topk_ids or [], "topk_logprobs": g.topk_logprobs or []}
        for r, g in zip(batch, results)
    ]
    shards.write_shard(out, f"r{rank:03d}-{time.time_ns()}", records,
                       {"rank": rank, "rows": len(records), "tokens": n_tok, "seconds": seconds,
                        "prompt_tokens": sum(len(r["prompt_ids"]) for r in batch), **meta})
    return n_tok


def _collect_hf(cfg: CollectConfig, target, tok, mine: list[dict], eos: set[int], emit) -> None:
    """transformers: one left-padded batch at a time (generation.py). The target generating: each batch the most
    prompts, up to the cap, whose KV cache and prefill fit the budget (kv_budget.py); else cap prompts a batch."""
    device = str(target.device)  # where inputs go: the first GPU of a target spread by a device map
    vocab = target.config.vocab_size
    pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos), 0)
    generator_model, gvocab = None, None
    if cfg.generator:
        d = load_draft(cfg.generator, target, tok, device=device)
        generator_model, gvocab = d.model, VocabMap(d.vocab_map, vocab)
    cap = kv_budget.auto_rows(target.device, cfg.batch_size)
    budget, plan = 0, None
    if cfg.mode == "generate" and generator_model is None:
        budget = kv_budget.auto_budget(target.device, cfg.kv_budget_gb)
        cost = llama_steps.row_cost(target)
        plan = lambda lengths: kv_budget.plan_batches(lengths, cfg.max_new_tokens, cap, cost, budget)  # noqa: E731
    batches = list(kv_budget.batches(mine, cap, plan))
    if plan:  # the timed batches start warm
        warm_up(target, [r["prompt_ids"] for r in batches[0][0]], cfg.max_new_tokens, cfg.topk, eos, pad, budget)
    for batch, offset in batches:
        failed = len(llama_steps.eager_fallbacks(target))
        sampling = SamplingParams(temperature_of(cfg, batch[0]), cfg.top_k, cfg.top_p)
        t0 = time.perf_counter()
        gen = torch.Generator(device=device).manual_seed(cfg.seed + offset)
        if cfg.mode == "score":
            results = score_batch(target, [r["prompt_ids"] for r in batch], [r["response_ids"] for r in batch], cfg.topk, pad)
        elif generator_model is not None:
            drafted = generate_batch(generator_model, [gvocab.to_draft(r["prompt_ids"]) for r in batch],
                                     cfg.max_new_tokens, sampling, 0, eos, pad, tuple(cfg.stop), tok, gen)
            responses = [[gvocab.to_target(t) for t in g.response_ids] for g in drafted]
            results = score_batch(target, [r["prompt_ids"] for r in batch], responses, cfg.topk, pad)
        else:
            results = generate_batch(target, [r["prompt_ids"] for r in batch], cfg.max_new_tokens, sampling, cfg.topk,
                                     eos, pad, tuple(cfg.stop), tok, gen, budget=budget)
        emit(batch, results, time.perf_counter() - t0, kv_budget=budget, kv_peak=llama_steps.kv_peak(target),
             eager_fallbacks=len(llama_steps.eager_fallbacks(target)) - failed)


def _collect_vllm(cfg: CollectConfig, target, mine: list[dict], eos: set[int], emit) -> None:
    """vLLM: every prompt of this rank's share in one continuously batched stream; a shard is written each time
    --batch-size prompts (auto: kv_budget.auto_rows) have finished (the seconds recorded: wall time since the previous
    shard)."""
    vllm_engine.pin_gpus(cfg.tensor_parallel_size)
    max_len = vllm_engine.model_len([len(r["prompt_ids"]) for r in mine], cfg.max_new_tokens,
                                    target.config.max_position_embeddings)
    # --load-format dummy: vLLM's own dummy loader fills the target folder's shape with random weights (its
    # values, not decode.models.targets' seed: for timing), nothing written to disk
    llm = vllm_engine.build_llm(target.path, max_model_len=max_len, dtype=cfg.dtype, max_logprobs=cfg.topk,
                                tensor_parallel_size=cfg.tensor_parallel_size, seed=cfg.seed,
                                engine_args={"load_format": "dummy"} if cfg.load_format == "dummy" else None)
    # a seed per prompt id: a sampled response does not depend on the batch it shared or on a resume
    params = [vllm_engine.sampling_params(max_new_tokens=cfg.max_new_tokens, temperature=temperature_of(cfg, r),
                                          top_k=cfg.top_k, top_p=cfg.top_p, k=cfg.topk, stop=tuple(cfg.stop), eos=eos,
                                          seed=cfg.seed + zlib.crc32(r["id"].encode())) for r in mine]
    batch, results, t0 = [], [], time.perf_counter()
    rows = kv_budget.auto_rows(torch.device("cuda" if torch.cuda.is_available() else "cpu"), cfg.batch_size)
    for i, out in vllm_engine.stream(llm, [r["prompt_ids"] for r in mine], params):
        batch.append(mine[i])
        results.append(Generated(*vllm_engine.response_topk(out.outputs[0], cfg.topk)))
        if len(batch) == rows:
            emit(batch, results, time.perf_counter() - t0)
            batch, results, t0 = [], [], time.perf_counter()
    if batch:
        emit(batch, results, time.perf_counter() - t0)
    vllm_engine.shutdown(llm)


def finish(out: Path, cfg: CollectConfig, rows: list[dict], tok, argv, command: str | None = None,
           target_config=None) -> dict | None:
    """Write collect.json once every prompt is in a shard (the last rank to finish does it)."""
    metas = shards.shard_meta(out)
    n_rows = sum(m["rows"] for m in metas)
    if n_rows < len(rows) * cfg.samples:
        print(f"{n_rows}/{len(rows) * cfg.samples} answers collected; other ranks are still running", file=sys.stderr)
        return None
    per_rank: dict = {}
    for m in metas:
        t, s = per_rank.get(m["rank"], (0, 0.0))
        per_rank[m["rank"]] = (t + m["tokens"], s + m["seconds"])
    tokens = sum(t for t, _ in per_rank.values())
    info = {
        "target": cfg.target,
        "tokenizer": shards.tokenizer_fingerprint(tok),
        "settings": cfg.settings(),
        "k": cfg.topk,
        "prompts": len(rows),
        "rows": n_rows,
        "tokens": tokens,
        "shards": len(metas),
        "tokens_per_s": round(sum(t / s for t, s in per_rank.values() if s), 2),
        "largest_batch": max((m["rows"] for m in metas), default=0),
        # captures that failed (llama_steps): those steps ran eagerly; the GPU check's collection row fails on any
        "eager_fallbacks": sum(m.get("eager_fallbacks", 0) for m in metas),
        # the KV budget (kv_budget.py) and the most K/V bytes held at once (llama_steps.kv_peak), in this process
        "kv_budget_bytes": max((m.get("kv_budget", 0) for m in metas), default=0),
        "kv_peak_bytes": max((m.get("kv_peak", 0) for m in metas), default=0),
        "bytes": sum(f.stat().st_size for f in (out / "shards").rglob("*.arrow")),
        "config": cli.to_dict(cfg),
        "command": command or "python -m distill.collect " + " ".join(argv or []),
    }
    info["bytes_per_token"] = round(info["bytes"] / max(tokens, 1), 1)
    info["bytes_per_example"] = round(info["bytes"] / max(n_rows, 1))
    if target_config is not None and all("prompt_tokens" in m for m in metas):
        info["storage"] = storage(info["bytes"], sum(m["prompt_tokens"] for m in metas) + tokens, n_rows,
                                  target_config.hidden_size)
    shards.write_json_atomic(out / "collect.json", info)
    return info


HIDDEN_LAYERS, HIDDEN_BYTES = 3, 2  # what an EAGLE-3 trainer stores a position: 3 layers' hidden states in bf16


def storage(stored: int, positions: int, rows: int, hidden: int) -> dict:
    """What this collection stores (token ids and the responses' top-k, no hidden state: a feature head's run
    computes its features from these ids, online or once into its own folder) against storing every position's
    hidden states with the data: HIDDEN_LAYERS layers of `hidden` values in bf16 for each prompt and response
    token, as EAGLE-3-style trainers write them."""
    states = positions * hidden * HIDDEN_LAYERS * HIDDEN_BYTES
    return {"positions": positions, "hidden_state_bytes": states,
            "hidden_state_bytes_per_example": round(states / max(rows, 1)),
            "hidden_states_over_stored": round(states / max(stored, 1), 1)}


def main(argv: list[str] | None = None) -> None:
    cfg, info = cli.run_job(CollectConfig, run, argv, __doc__)
    if info:
        what = f"{info['rows']} answers to {info['prompts']} prompts" if cfg.samples > 1 else f"{info['rows']} prompts"
        print(f"collected {what}, {info['tokens']} tokens at {info['tokens_per_s']} tokens/s "
              f"({info['bytes_per_token']} bytes/token) into {cfg.output}")
        print(json.dumps({k: v for k, v in info.items() if k != "config"}))
