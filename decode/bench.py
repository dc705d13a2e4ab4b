"""Benchmark one target/draft pair: target alone vs our speculative decoder vs transformers' assisted generation.

    python -m decode.bench --target default --draft layers:0,1,28,29 \
        --prompts distill/data/heldout.jsonl --max-new-tokens 64 --out result.json

All three run in one process on the same prompts after a warm-up, interleaved prompt by prompt so that
machine noise hits them alike; ratios are the result, absolute times are only as good as the machine.
transformers runs at the same constant γ with no confidence threshold, so both decoders make the same
proposals and speedup_vs_hf_assisted measures decoder overhead alone. The result JSON (DESIGN.md) is
written to --out and printed as the last stdout line.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from decode import costmodel, latency
from decode.errors import UserError
from decode.prompts import check_context, encode_prompt, read_prompts
from decode.sampling import SamplingParams
from decode.speculative import DEFAULT_CONFIDENCE, SCHEDULES, Stats, generate
from decode.targets import eos_ids, load_draft, load_target


@dataclass
class BenchConfig:
    target: str = "default"
    draft: str = "layers:0,1,28,29"
    prompts: str = "distill/data/heldout.jsonl"
    out: str | None = None
    max_new_tokens: int = 64
    gamma: int = 4
    schedule: str = "constant"
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    limit: int = 0  # first N prompts only (0 = all)
    device: str = "cpu"
    dtype: str = "auto"
    hf_assisted: bool = True
    chat_template: bool = True

    def __post_init__(self):
        if self.gamma < 1:
            raise UserError(f"--gamma must be >= 1 (draft tokens per round), got {self.gamma}")
        if self.schedule not in SCHEDULES:
            raise UserError(f"--schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        SamplingParams(self.temperature, self.top_k, self.top_p)  # validates


def parse_args(argv=None) -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in asdict(BenchConfig()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            p.add_argument(flag, type=type(default) if default is not None else str, default=default)
    return BenchConfig(**vars(p.parse_args(argv)))


def _hf_assisted(target, draft, ids, cfg: BenchConfig, sampling: SamplingParams, seed: int, eos: tuple[int, ...]):
    """transformers' assisted generation at the same γ and schedule as ours.

    transformers reads these settings from the *assistant's* generation_config (kwargs to generate() are
    ignored there), defaults to 20 tokens with an adaptive threshold, and its heuristic schedule persists
    across calls; so they are set on a fresh copy of the assistant's config before every call.
    """
    gc = copy.deepcopy(draft.generation_config)
    gc.num_assistant_tokens = cfg.gamma
    gc.num_assistant_tokens_schedule = "heuristic_transient" if cfg.schedule == "heuristic" else "constant"
    gc.assistant_confidence_threshold = DEFAULT_CONFIDENCE if cfg.schedule == "dynamic" else 0.0
    draft.generation_config = gc
    kwargs = dict(do_sample=not sampling.greedy, max_new_tokens=cfg.max_new_tokens, assistant_model=draft,
                  eos_token_id=list(eos), pad_token_id=eos[0] if eos else None)  # stop where our decoder stops
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
    x = torch.tensor([ids], device=target.device)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.inference_mode():
        y = target.generate(x, attention_mask=torch.ones_like(x), **kwargs)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    return y[0, len(ids):].tolist(), time.perf_counter() - t0


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 3) if seconds else 0.0


def encode_all(rows: list[dict], tok, max_new_tokens: int, max_positions: int, chat_template: bool = True) -> list[list[int]]:
    encoded = []
    for row in rows:
        ids = encode_prompt(tok, row, chat_template)
        check_context(len(ids), max_new_tokens, max_positions, row["id"])
        encoded.append(ids)
    return encoded


def measure_pair(target, tok, draft, rows: list[dict], encoded: list[list[int]], cfg: BenchConfig,
                 hf_assisted: bool = True, log=None) -> dict:
    """Time target alone, our decoder and (optionally) transformers' assisted generation on the same prompts,
    interleaved prompt by prompt after a warm-up; return the DESIGN.md result dict for this pair and γ."""
    sampling = SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p)
    eos = eos_ids(target, tok)
    do_hf = hf_assisted and draft.vocab_map is None  # plain transformers cannot use a reduced-vocab draft
    device = str(target.device)

    def ours(ids, gamma, seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return generate(target, draft.model if gamma else None, ids, cfg.max_new_tokens, gamma, cfg.schedule,
                        sampling, eos, vocab_map=draft.vocab_map, generator=gen)

    # --- warm-up: every path once, not timed
    ours(encoded[0], 0, 0)
    ours(encoded[0], cfg.gamma, 0)
    if do_hf:
        _hf_assisted(target, draft.model, encoded[0], cfg, sampling, 0, eos)

    # --- timed runs, interleaved prompt by prompt so machine noise hits all three alike
    base, spec = Stats(), Stats()
    hf = {"tokens": 0, "seconds": 0.0, "matches_target": 0}
    per_cat = defaultdict(lambda: {"prompts": 0, "base": Stats(), "spec": Stats()})
    lossless = True
    for i, (row, ids) in enumerate(zip(rows, encoded)):
        seed = cfg.seed + i
        ref, s0 = ours(ids, 0, seed)
        out, s1 = ours(ids, cfg.gamma, seed)
        base += s0
        spec += s1
        cat = per_cat[row["category"]]
        cat["prompts"] += 1
        cat["base"] += s0
        cat["spec"] += s1
        if sampling.greedy and out != ref:
            lossless = False
            print(f"warning: prompt {row['id']}: speculative output differs from the target alone", file=sys.stderr)
        if do_hf:
            y, secs = _hf_assisted(target, draft.model, ids, cfg, sampling, seed, eos)
            hf["tokens"] += len(y)
            hf["seconds"] += secs
            hf["matches_target"] += int(y == ref)
        if log:
            log(f"[{i + 1}/{len(rows)}] {row['id']}: {len(out)} tokens, accepted {s1.accepted}/{s1.proposed}")

    # --- cost model inputs on this device, and its prediction next to the measurement
    gammas = sorted({1, 2, 3, 4, 5, 6, 8, cfg.gamma})
    lat = latency.measure(target, draft.model, gammas)
    v = {int(g): x for g, x in lat["v"].items()}
    alpha = spec.acceptance_rate
    speedup = (spec.new_tokens / spec.seconds) / (base.new_tokens / base.seconds)
    best_g, best_pred = costmodel.best_gamma(alpha, lat["c"], v)
    b, s = base.as_dict(), spec.as_dict()
    hf_rate = _rate(hf["tokens"], hf["seconds"])
    return {
        "target": cfg.target,
        "draft": cfg.draft,
        "device": _device_name(device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "prompts": len(rows),
        "prompt_file": cfg.prompts,
        "max_new_tokens": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "gamma": cfg.gamma,
        "schedule": cfg.schedule,
        "baseline": {k: b[k] for k in ("tokens", "seconds", "tokens_per_s")},
        "speculative": s,
        "hf_assisted": (
            {"tokens": hf["tokens"], "seconds": round(hf["seconds"], 4), "tokens_per_s": hf_rate,
             "outputs_matching_target": hf["matches_target"], "num_assistant_tokens": cfg.gamma,
             "assistant_confidence_threshold": DEFAULT_CONFIDENCE if cfg.schedule == "dynamic" else 0.0}
            if do_hf else None
        ),
        "speedup": round(speedup, 4),
        "speedup_vs_hf_assisted": round(s["tokens_per_s"] / hf_rate, 4) if do_hf and hf_rate else None,
        "lossless": lossless if sampling.greedy else None,
        "per_category": {
            name: {
                "prompts": c["prompts"],
                "tokens": c["spec"].new_tokens,
                "acceptance_rate": round(c["spec"].acceptance_rate, 4),
                "tau": round(c["spec"].tau, 4),
                "baseline_tokens_per_s": c["base"].as_dict()["tokens_per_s"],
                "speculative_tokens_per_s": c["spec"].as_dict()["tokens_per_s"],
                "speedup": round(c["spec"].as_dict()["tokens_per_s"] / c["base"].as_dict()["tokens_per_s"], 4),
            }
            for name, c in sorted(per_cat.items())
        },
        "cost_model": {
            **lat,
            "alpha": round(alpha, 4),
            "predicted_tau": round(costmodel.tau(alpha, cfg.gamma), 4),
            "predicted_speedup": round(costmodel.speedup(alpha, cfg.gamma, lat["c"], v[cfg.gamma]), 4),
            "measured_speedup": round(speedup, 4),
            "best_gamma": best_g,
            "best_gamma_predicted_speedup": round(best_pred, 4),
        },
    }


def run(cfg: BenchConfig) -> dict:
    torch.manual_seed(cfg.seed)
    rows = read_prompts(cfg.prompts)
    if cfg.limit:
        rows = rows[: cfg.limit]
    target, tok = load_target(cfg.target, cfg.dtype, cfg.device)
    draft = load_draft(cfg.draft, target, tok, device=cfg.device)
    encoded = encode_all(rows, tok, cfg.max_new_tokens, target.config.max_position_embeddings, cfg.chat_template)
    return measure_pair(target, tok, draft, rows, encoded, cfg, cfg.hf_assisted,
                        log=lambda m: print(m, file=sys.stderr))


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({torch.get_num_threads()} threads)"


def main(argv=None) -> None:
    try:
        cfg = parse_args(argv)
        result = run(cfg)
    except UserError as e:
        sys.exit(f"error: {e}")
    line = json.dumps(result)
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(result, indent=2) + "\n")
    print(line)


if __name__ == "__main__":
    main()
