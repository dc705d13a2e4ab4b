"""Benchmark one target/draft pair: target alone vs our speculative decoder vs transformers' assisted generation.

    python -m decode.bench --target default --draft layers:0,1,28,29 \
        --prompts distill/data/heldout.jsonl --max-new-tokens 64 --out result.json

All three run in one process on the same prompts after a warm-up, interleaved prompt by prompt so that
machine noise hits them alike; ratios are the result, absolute times are only as good as the machine.
transformers runs at the same constant γ with no confidence threshold, so both decoders make the same
proposals and speedup_vs_hf_assisted measures decoder overhead alone. transformers cannot run a feature head
(EAGLE-3 style, decode.feature_head), a reduced-vocabulary draft or a token tree; the result then says why
(`hf_assisted_skipped`). A feature head folder is one more --draft: α, τ, c (its step, feature_head.HeadRunner,
against the target's) and v(γ) as for any draft, with its own weights (no --draft-weights).
With --tree-nodes N (decode.tree) each round verifies a token tree of N nodes: the cost model then predicts from
the measured τ, the draft's levels a round (c each) and v(N) (costmodel.tree_speedup).
`lossless` is decode.lossless's rule for the target's dtype (float32: token for token; bf16/fp16: divergences
excused only at near-ties within an ε calibrated here, counted in the result): ours is judged against our target
alone, transformers' assisted generation against transformers' own generate (timed too: the hf_generate row).
The result JSON (docs/architecture.md) is written to --out and printed as the last stdout line.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from decode import cli, costmodel, latency, lossless
from decode.errors import UserError
from decode.feature_head import FeatureHead
from decode.hf_generate import hf_confidence, hf_generate
from decode.options import DecodeOptions
from decode.prompts import check_context, encode_prompt, read_prompts
from decode.runner_choice import runner_for
from decode.runners import HFRunner
from decode.speculative import Stats, generate
from decode.targets import (
    check_device,
    check_load_format,
    eos_ids,
    load_draft,
    load_format_field,
    load_target,
    parse_dtype,
)
from decode.tree import static_tree


@dataclass
class BenchConfig(DecodeOptions):
    """The decoding knobs (DecodeOptions: γ, schedule, lookup, tree nodes, draft weights, sampling) and the run's."""

    target: str = field(default="default", metadata={"help": "target: default, an HF folder, a Hub id or a .gguf file"})
    draft: str = field(default="layers:0,1,28,29", metadata={"help": "draft folder, `default` (the target itself) or "
                                                                     "layers:I,J,... (cut from the target)"})
    prompts: str = field(default="distill/data/heldout.jsonl", metadata={"help": "JSONL prompt file"})
    out: str | None = field(default=None, metadata={"help": "write the result JSON here too"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per prompt"})
    seed: int = field(default=0, metadata={"help": "sampling seed (prompt i uses seed + i)"})
    limit: int = field(default=0, metadata={"help": "first N prompts only (0 = all)"})
    device: str = field(default="auto", metadata={"help": "auto (CUDA when present: a target too large for one GPU "
                                                          "is spread over all; else CPU) | cpu | cuda[:N]"})
    dtype: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | float16"})
    hf_assisted: bool = field(default=True, metadata={"help": "also time transformers' assisted generation"})
    hf_static: bool = field(default=True, metadata={"help": "on a GPU, also time transformers' generate with a static "
                                                           "cache, compiled (its warm-up compiles: minutes)"})
    chat_template: bool = field(default=True, metadata={"help": "apply the tokenizer's chat template"})
    load_format: str = load_format_field()

    def __post_init__(self):
        super().__post_init__()
        check_load_format(self.load_format)
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.limit < 0:
            raise UserError(f"--limit must be >= 0 (the first N prompts; 0 = all), got {self.limit}")
        parse_dtype(self.dtype)


def parse_args(argv=None) -> BenchConfig:
    return cli.parse(BenchConfig, argv, __doc__)


def is_head(draft) -> bool:
    """A loaded draft (decode.targets.Draft) that is a feature head."""
    return draft is not None and isinstance(draft.model, FeatureHead)


def draft_kind(draft) -> str | None:
    """feature_head | standalone (None without a draft): the result's `draft_kind`."""
    return None if draft is None else "feature_head" if is_head(draft) else "standalone"


def check_head_options(draft, cfg: DecodeOptions, name: str) -> None:
    """A feature head runs with its own weights: --draft-weights is for standalone drafts."""
    if not is_head(draft):
        return
    if cfg.draft_weights != DecodeOptions.draft_weights:
        raise UserError(f"{name} is a feature head: it runs with its own weights; --draft-weights {cfg.draft_weights} "
                        f"is for standalone (FastLlama) drafts, use --draft-weights {DecodeOptions.draft_weights}")


def hf_skip_reason(draft, cfg: DecodeOptions) -> str | None:
    """Why transformers' assisted generation cannot run this draft at these settings (None: it can)."""
    if draft is None:
        return "no draft"
    if is_head(draft):
        return ("a feature head (EAGLE-3 style) drafts from the target's hidden states; transformers' assisted "
                "generation takes only a standalone model")
    if draft.vocab_map is not None:
        return ("a reduced-vocabulary draft speaks other token ids than the target; transformers' assisted generation "
                "needs the target's")
    if cfg.tree_nodes:
        return "transformers' assisted generation verifies a chain, not a token tree"
    return None


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
    interleaved prompt by prompt after a warm-up; return the result dict (docs/architecture.md) for this pair and γ."""
    return measure_many(target, tok, [(draft, cfg, hf_assisted)], rows, encoded, log)[0]


def measure_many(target, tok, runs: list[tuple], rows: list[dict], encoded: list[list[int]], log=None) -> list[dict]:
    """Several (draft, BenchConfig, hf_assisted) runs against ONE target-alone baseline: per prompt the target
    alone decodes once, then every run decodes the same prompt, so all ratios share the same baseline and
    machine noise; returns one result dict (docs/architecture.md) per run. The runs differ in draft, γ and schedule only."""
    first = runs[0][1]
    sampling = first.sampling
    alone = DecodeOptions(temperature=first.temperature, top_k=first.top_k, top_p=first.top_p)
    for _, c, _ in runs:
        if (c.temperature, c.top_k, c.top_p, c.max_new_tokens, c.seed) != (first.temperature, first.top_k, first.top_p,
                                                                          first.max_new_tokens, first.seed):
            raise ValueError("measure_many: runs must share sampling settings, max_new_tokens and seed")
    eos = eos_ids(target, tok)
    device = str(target.device)

    def ours(draft, ids, cfg, seed, n=first.max_new_tokens):
        gen = torch.Generator(device=device).manual_seed(seed)
        if cfg is None:  # the target alone through the same loop (no draft, no lookup: γ = 0)
            return generate(target, None, ids, n, alone, eos_token_ids=eos, generator=gen)
        # no draft but a lookup: prompt-lookup decoding on its own
        return generate(target, draft.model if draft is not None else None, ids, n, cfg,
                        eos_token_ids=eos, vocab_map=draft.vocab_map if draft is not None else None, generator=gen)

    # plain transformers cannot use a reduced-vocab draft or a feature head, and verifies one candidate per position
    hf_skip = [hf_skip_reason(d, c) if hf else None for d, c, hf in runs]
    do_hf = [hf and why is None for (_, _, hf), why in zip(runs, hf_skip)]
    # transformers' plain generate: the anchor row, and what its assisted generation is compared with; on a GPU
    # also its static-cache compiled generate, warmed up on every prompt first (one compile and CUDA graph per
    # cache size, none of it timed)
    hf_anchor = any(hf for _, _, hf in runs)
    hf_static = hf_anchor and target.device.type == "cuda" and getattr(first, "hf_static", False)
    hf_gen, hf_gen_static = {"tokens": 0, "seconds": 0.0}, {"tokens": 0, "seconds": 0.0}

    # --- warm-up: every path once, not timed
    ours(None, encoded[0], None, 0)
    if hf_anchor:
        hf_generate(target, encoded[0], first.max_new_tokens, sampling, 0, eos)
    static_failed = _warm_static(target, encoded, first.max_new_tokens, sampling, eos) if hf_static else None
    hf_static = hf_static and static_failed is None
    for (draft, cfg, _), hf_on in zip(runs, do_hf):
        ours(draft, encoded[0], cfg, 0)
        if hf_on:
            hf_generate(target, encoded[0], first.max_new_tokens, sampling, 0, eos, draft.model, cfg)

    # --- the lossless rule for this target (decode.lossless): exact in float32; in bf16/fp16 near-ties within ε
    ours_runner, hf_runner = runner_for(target), HFRunner(target)
    calibrate = sampling.greedy and lossless.rule_for(target.dtype) == "numeric"
    seqs = [(ids + ours(None, ids, None, 0)[0], len(ids)) for ids in encoded[:lossless.CALIBRATION_PROMPTS]
            ] if calibrate else []
    rule, eps = lossless.rule_and_epsilon(target.dtype, [ours_runner] + ([hf_runner] if hf_anchor else []), seqs,
                                          {n for _, c, _ in runs for n in lossless.verify_sizes(c)})

    # --- timed runs, interleaved prompt by prompt so machine noise hits every path alike
    base = Stats()
    base_cat: dict[str, Stats] = defaultdict(Stats)
    acc = [{"spec": Stats(), "cat": defaultdict(Stats), "prompts": defaultdict(int),
            "verdict": lossless.Verdict(rule, eps), "hf_verdict": lossless.Verdict(rule, eps),
            "hf": {"tokens": 0, "seconds": 0.0, "matches_target": 0}} for _ in runs]
    for i, (row, ids) in enumerate(zip(rows, encoded)):
        seed = first.seed + i
        ref, s0 = ours(None, ids, None, seed)
        base += s0
        base_cat[row["category"]] += s0
        if hf_anchor:
            ref_hf, secs = hf_generate(target, ids, first.max_new_tokens, sampling, seed, eos)
            hf_gen["tokens"] += len(ref_hf)
            hf_gen["seconds"] += secs
        if hf_static:
            y, secs = hf_generate(target, ids, first.max_new_tokens, sampling, seed, eos, static=True)
            hf_gen_static["tokens"] += len(y)
            hf_gen_static["seconds"] += secs
        for (draft, cfg, _), hf_on, a in zip(runs, do_hf, acc):
            out, s1 = ours(draft, ids, cfg, seed)
            a["spec"] += s1
            a["cat"][row["category"]] += s1
            a["prompts"][row["category"]] += 1
            if sampling.greedy:  # ours against ours; after an excused divergence, ours again from ref's prefix
                bad = lossless.check_prompt(a["verdict"], row["id"], ours_runner, ids, ref, out,
                                            partial(ours, draft, cfg=cfg, seed=seed), first.max_new_tokens)
                _warn(bad, row, cfg, "speculative output", "the target alone")
            if hf_on:
                _hf_assisted(target, hf_runner, draft, cfg, row, ids, ref_hf, seed, sampling, eos, a)
            if log:
                lookup = f" lookup {cfg.lookup}" if cfg.lookup else ""
                lookup += f" tree-{cfg.tree_nodes}" if cfg.tree_nodes else ""
                log(f"[{i + 1}/{len(rows)}] {row['id']} {cfg.draft} γ={cfg.gamma}{lookup}: {len(out)} tokens, "
                    f"accepted {s1.accepted}/{s1.proposed}")

    # --- cost model inputs on this device (c once per draft, v(γ) once: it is the target's alone), and the
    # cost model's prediction next to the measurement
    b = base.as_dict()
    hf_rows = {"hf_generate": _row(hf_gen) if hf_anchor else None,
               "hf_generate_static": _row(hf_gen_static) if hf_static else
               {"skipped": static_failed} if static_failed else None}
    return [_entry(cfg, draft_kind(draft), device, target, len(rows), b, base_cat, a, (hf_on, why), lat,
                   sampling.greedy, hf_rows)
            for (draft, cfg, _), hf_on, why, a, lat in zip(runs, do_hf, hf_skip, acc,
                                                            _latencies(target, runs, b["tokens"]))]


def _warm_static(target, encoded: list[list[int]], n: int, sampling, eos) -> str | None:
    """Warm transformers' static-cache generate up on every prompt (it compiles: one graph per cache size, none
    of it timed); why it failed, or None. An optional anchor: torch.compile's many failure modes skip the row."""
    try:
        for ids in encoded:
            hf_generate(target, ids, n, sampling, 0, eos, static=True)
    except Exception as e:  # noqa: BLE001 (said on stderr and in the row)
        failed = f"transformers' compiled generate failed: {type(e).__name__}: {e}"[:500]
        print(f"bench: {failed}", file=sys.stderr)
        return failed
    return None


def _hf_assisted(target, hf_runner, draft, cfg, row: dict, ids: list[int], ref_hf: list[int], seed: int, sampling,
                 eos, a: dict) -> None:
    """transformers' assisted generation on one prompt, timed into a["hf"] and, greedy, judged against
    transformers' own generate (ref_hf) into a["hf_verdict"]."""
    y, secs = hf_generate(target, ids, cfg.max_new_tokens, sampling, seed, eos, draft.model, cfg)
    a["hf"]["tokens"] += len(y)
    a["hf"]["seconds"] += secs
    a["hf"]["matches_target"] += int(y == ref_hf)
    if sampling.greedy:
        bad = lossless.check_prompt(a["hf_verdict"], row["id"], hf_runner, ids, ref_hf, y, partial(
            hf_generate, target, sampling=sampling, seed=seed, eos=eos, draft=draft.model, cfg=cfg), cfg.max_new_tokens)
        _warn(bad, row, cfg, "transformers' assisted generation", "transformers' generate")


def _row(gen: dict) -> dict:
    return {"tokens": gen["tokens"], "seconds": round(gen["seconds"], 4), "tokens_per_s": _rate(gen["tokens"],
                                                                                               gen["seconds"])}


SMALL_RUN_TOKENS, SMALL_RUN_REPEATS = 256, 4  # a run timing fewer tokens times its cost-model steps fewer times


def _latencies(target, runs: list[tuple], timed_tokens: int) -> list[dict]:
    """decode.latency.measure for each run: c once per (draft, draft weights), v(γ) once for the target. A run
    that timed fewer than SMALL_RUN_TOKENS tokens (a quick check) takes medians of SMALL_RUN_REPEATS pairs: its
    speedup is noisier than those medians anyway, and at 10 pairs the timing was ~40% of a small evaluation."""
    repeats = 10 if timed_tokens >= SMALL_RUN_TOKENS else SMALL_RUN_REPEATS
    lat_cache, v_seen = {}, {}
    for draft, cfg, _ in runs:
        key = (id(draft), cfg.draft_weights)
        if key not in lat_cache:
            # v at every verification size these runs use: γ (a tree: its nodes) tokens after the last one
            gammas = sorted({1, 2, 3, 4, 5, 6, 8, *(c.tree_nodes or c.gamma for d, c, _ in runs if d is draft)})
            lat_cache[key] = latency.measure(target, draft.model, gammas, repeats=repeats,
                                             draft_weights=cfg.draft_weights, known_v=v_seen)
            v_seen.update({int(g): x for g, x in lat_cache[key]["v"].items()})
    return [lat_cache[(id(draft), cfg.draft_weights)] for draft, cfg, _ in runs]


def _warn(bad: str | None, row: dict, cfg: BenchConfig, what: str, reference: str) -> None:
    """A divergence the lossless rule did not excuse, on stderr (the result's `divergences` hold it too)."""
    if bad:
        print(f"warning: prompt {row['id']}: {what} of {cfg.draft} (γ={cfg.gamma}) differs from {reference}: {bad}",
              file=sys.stderr)


def _entry(cfg: BenchConfig, kind: str | None, device: str, target, n_prompts: int, b: dict, base_cat: dict, a: dict,
           hf_run: tuple[bool, str | None], lat: dict, greedy: bool, hf_rows: dict | None = None) -> dict:
    """One result dict (docs/architecture.md) from the accumulated stats of a run. hf_run: (transformers' assisted
    generation ran, why it did not where it was asked for); hf_rows: transformers' plain generate (the anchor) and,
    on a GPU, its static-cache compiled generate."""
    hf_rows = hf_rows or {}
    spec, hf = a["spec"], a["hf"]
    hf_on, hf_skipped = hf_run
    s = spec.as_dict()
    speedup = (spec.new_tokens / spec.seconds) / (b["tokens"] / b["seconds"])
    hf_rate = _rate(hf["tokens"], hf["seconds"])
    return {
        "target": cfg.target,
        "draft": cfg.draft,
        "draft_kind": kind,
        "device": _device_name(device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "prompts": n_prompts,
        "prompt_file": cfg.prompts,
        "max_new_tokens": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "gamma": cfg.gamma,
        "schedule": cfg.schedule,
        "lookup": cfg.lookup,
        "lookup_tokens": cfg.lookup_tokens,
        "tree_nodes": cfg.tree_nodes,
        "draft_weights": cfg.draft_weights,
        "baseline": {k: b[k] for k in ("tokens", "seconds", "tokens_per_s")},
        "hf_generate": hf_rows.get("hf_generate"),  # transformers' target alone: the anchor, hf_assisted's reference
        "hf_generate_static": hf_rows.get("hf_generate_static"),  # the same with a static cache, compiled (GPU only)
        "speculative": s,
        "hf_assisted": (
            {"tokens": hf["tokens"], "seconds": round(hf["seconds"], 4), "tokens_per_s": hf_rate,
             "outputs_matching_target": hf["matches_target"],  # equal to transformers' own generate
             "num_assistant_tokens": cfg.gamma, "assistant_confidence_threshold": hf_confidence(cfg),
             **({"lossless": a["hf_verdict"].lossless, "excused_divergences": len(a["hf_verdict"].excused_margins),
                 "divergences": a["hf_verdict"].divergences} if greedy else {})}
            if hf_on else None
        ),
        "hf_assisted_skipped": hf_skipped,
        "speedup": round(speedup, 4),
        "speedup_vs_hf_assisted": round(s["tokens_per_s"] / hf_rate, 4) if hf_on and hf_rate else None,
        # lossless under decode.lossless's rule for this dtype; `lossless_rule`, `epsilon`, excused divergences
        **(a["verdict"].as_dict() if greedy else {"lossless": None, "lossless_rule": None}),
        "per_category": _per_category(a, base_cat),
        "cost_model": _cost_model(cfg, spec, b, lat, speedup),
    }


def _per_category(a: dict, base_cat: dict) -> dict:
    """Per prompt category: the run's tokens, α, τ and speedup over the target alone on the same prompts."""
    return {
        name: {
            "prompts": a["prompts"][name],
            "tokens": c.new_tokens,
            "acceptance_rate": round(c.acceptance_rate, 4),
            "tau": round(c.tau, 4),
            "baseline_tokens_per_s": base_cat[name].as_dict()["tokens_per_s"],
            "speculative_tokens_per_s": c.as_dict()["tokens_per_s"],
            "speedup": round(c.as_dict()["tokens_per_s"] / base_cat[name].as_dict()["tokens_per_s"], 4),
        }
        for name, c in sorted(a["cat"].items())
    }


def _cost_model(cfg: BenchConfig, spec: Stats, b: dict, lat: dict, speedup: float) -> dict:
    """The cost model's inputs (lat: c and v(γ) from decode.latency) and prediction next to the measured speedup."""
    v = {int(g): x for g, x in lat["v"].items()}
    alpha = spec.acceptance_rate  # α: accepted / proposed (docs/architecture.md, "Metrics")
    # the cost model's per-token α (costmodel.alpha_iid); with a varying γ there is no such estimate, use α
    # with lookup, rounds proposed by the draft and by context lookup are modelled apart (costmodel.speedup_with_lookup)
    d_acc, d_rounds = spec.accepted - spec.lookup_accepted, spec.rounds - spec.lookup_rounds
    p = (costmodel.alpha_iid(d_acc, d_rounds, spec.full_rounds - spec.lookup_full)
         if cfg.schedule == "constant" else alpha)
    lookup_model = _lookup_model(spec)
    # c per draft forward: a chain's γ steps, a tree's levels
    in_run = _costs_in_run(spec, b, spec.tree_levels / spec.tree_rounds if spec.tree_rounds else cfg.gamma)
    best_g, best_pred = costmodel.best_gamma(p, lat["c"], v)
    return {
        **lat,
        "alpha": round(alpha, 4),
        "alpha_iid": round(p, 4),
        "predicted_tau": round(costmodel.tau(p, cfg.gamma), 4),
        "predicted_speedup": round(_predict(cfg, p, lookup_model, lat["c"], v, spec), 4),
        "tree": _tree_model(cfg, spec) if cfg.tree_nodes else None,
        "lookup": {k: round(x, 4) for k, x in lookup_model.items()} if lookup_model else None,
        "measured_speedup": round(speedup, 4),
        "best_gamma": best_g,
        "best_gamma_predicted_speedup": round(best_pred, 4),
        # the same model with c and v(γ) taken from this run's own forward timings (see _costs_in_run)
        "in_run": in_run and {**in_run, "predicted_speedup": round(_predict(cfg, p, lookup_model, in_run["c"],
                                                                            {g: in_run["v"] for g in v}, spec), 4)},
    }


def _tree_model(cfg: BenchConfig, spec: Stats) -> dict:
    """A tree run's cost-model inputs: per-depth acceptance, nodes verified and draft levels a round, and the
    static tree of as many nodes that the measured acceptance by (depth, rank) suggests (vLLM's form)."""
    r = max(spec.tree_rounds, 1)
    return {"depth_acceptance": [round(x, 4) for x in costmodel.depth_acceptance(spec.accept_histogram)],
            "nodes_per_pass": round(spec.tree_nodes / r, 3), "levels_per_round": round(spec.tree_levels / r, 3),
            "static_tree": str(static_tree(spec.tree_ranks, cfg.tree_nodes)).replace(" ", "")}


def _lookup_model(spec: Stats) -> dict | None:
    """The lookup rounds' share, per-token α and proposal length (costmodel.speedup_with_lookup); None without."""
    if not spec.lookup_rounds:
        return None
    return {
        "share": spec.lookup_rounds / spec.rounds,
        "alpha_iid": costmodel.alpha_iid(spec.lookup_accepted, spec.lookup_rounds, spec.lookup_full),
        "tokens": spec.lookup_proposed / spec.lookup_rounds,
    }


def _predict(cfg: BenchConfig, p: float, lookup_model: dict | None, c: float, vs: dict[int, float],
             spec: Stats) -> float:
    """The cost model's speedup for per-token α p (and lookup rounds) at draft cost c and verify costs vs; for a
    token tree, from the measured τ, levels and nodes a round (costmodel.tree_speedup)."""
    if cfg.tree_nodes:
        return costmodel.tree_speedup(spec.tau, spec.tree_levels / max(spec.tree_rounds, 1), c,
                                      costmodel.v_at(vs, spec.tree_nodes / max(spec.tree_rounds, 1)),
                                      *_lookup_round(lookup_model, vs))
    v_draft = vs[cfg.gamma]
    if lookup_model:
        return costmodel.speedup_with_lookup(p, cfg.gamma, c, vs, lookup_model["share"], lookup_model["alpha_iid"],
                                             lookup_model["tokens"], v_draft=v_draft)
    return costmodel.speedup(p, cfg.gamma, c, v_draft)


def _lookup_round(lookup_model: dict | None, vs: dict[int, float]) -> tuple[float, float]:
    """(share of lookup rounds, v of their mean length) for costmodel.tree_speedup; (0, 0) without lookup."""
    if not lookup_model:
        return 0.0, 0.0
    return lookup_model["share"], costmodel.v_at(vs, max(1, round(lookup_model["tokens"])))


def _costs_in_run(spec, b: dict, gamma: float) -> dict | None:
    """c and v as this run saw them, in units of the target-alone run's mean forward time t1: c = draft seconds
    per draft round / γ / t1, v = mean target forward (verification or prefill) / t1. decode/latency.py measures
    them apart from the run, which on a shared CPU drifts between measurements; these drift with the run.
    Prefill forwards are in both means (one per prompt in each run). None for the target-alone entry."""
    if not b.get("target_forwards") or not spec.target_forwards:
        return None
    t1 = b["target_seconds"] / b["target_forwards"]
    draft_rounds = spec.rounds - spec.lookup_rounds
    c = spec.draft_seconds / (gamma * draft_rounds) / t1 if draft_rounds and spec.draft_forwards else 0.0
    return {"c": round(c, 4), "v": round(spec.target_seconds / spec.target_forwards / t1, 4),
            "target_forward_ms": round(t1 * 1e3, 3)}


def run(cfg: BenchConfig) -> dict:
    torch.manual_seed(cfg.seed)
    check_device(cfg.device)
    rows = read_prompts(cfg.prompts)
    if cfg.limit:
        rows = rows[: cfg.limit]
    target, tok = load_target(cfg.target, cfg.dtype, cfg.device, load_format=cfg.load_format)
    draft = load_draft(cfg.draft, target, tok, device=str(target.device))  # a spread target's first GPU
    check_head_options(draft, cfg, cfg.draft)
    encoded = encode_all(rows, tok, cfg.max_new_tokens, target.config.max_position_embeddings, cfg.chat_template)
    return measure_pair(target, tok, draft, rows, encoded, cfg, cfg.hf_assisted,
                        log=lambda m: print(m, file=sys.stderr))


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({torch.get_num_threads()} threads)"


def summary(r: dict) -> str:
    """The result's headline numbers in one line (the JSON, last on stdout, holds everything)."""
    s, hf = r["speculative"], r["hf_assisted"]
    text = (f"γ={r['gamma']}: α {s['acceptance_rate']:.3f}, τ {s['tau']:.2f}, lossless {lossless.describe(r)}; "
            f"tokens/s: target alone {r['baseline']['tokens_per_s']:.1f}, speculative {s['tokens_per_s']:.1f}")
    if r.get("hf_generate"):
        text += f", transformers generate {r['hf_generate']['tokens_per_s']:.1f}"
    if (r.get("hf_generate_static") or {}).get("tokens_per_s"):
        text += f" (static cache, compiled {r['hf_generate_static']['tokens_per_s']:.1f})"
    if hf:
        text += f", transformers assisted {hf['tokens_per_s']:.1f}"
    elif r.get("hf_assisted_skipped"):
        text += " (no transformers assisted: " + r["hf_assisted_skipped"].split(";")[0] + ")"
    text += f"; speedup {r['speedup']:.2f}x over the target alone"
    if r["speedup_vs_hf_assisted"]:
        text += f", {r['speedup_vs_hf_assisted']:.2f}x over transformers assisted"
    return text


def main(argv=None) -> None:
    cfg, result = cli.run_job(BenchConfig, lambda cfg, argv: run(cfg), argv, __doc__)
    print(summary(result), file=sys.stderr)
    line = json.dumps(result)
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(result, indent=2) + "\n")
    print(line)


if __name__ == "__main__":
    main()
