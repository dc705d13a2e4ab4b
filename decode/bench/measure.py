"""Timing one or several drafts against one target-alone baseline, interleaved prompt by prompt after a warm-up,
with transformers' anchors and the lossless rule (measure_many); the cost model's c and v(γ) beside (_latencies)."""

from __future__ import annotations

import sys
from collections import defaultdict
from functools import partial

import torch

from decode.bench import latency
from decode.bench.anchors import hf_generate
from decode.bench.config import BenchConfig, draft_kind, hf_skip_reason
from decode.bench.results import context_bucket, rate, result_entry
from decode.drafting import lossless
from decode.drafting.speculative import generate
from decode.drafting.stats import Stats, decode_rate
from decode.models.targets import (
    eos_ids,
)
from decode.options import DecodeOptions
from decode.prompts import check_context, encode_prompt
from decode.runners.choice import runner_for
from decode.runners.hf import HFRunner


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


def measure_many(target, tok, runs: list[tuple], rows: list[dict], encoded: list[list[int]], log=None,
                 hf_lookup: int = 0, warm_up: bool = True) -> list[dict]:
    """Several (draft, BenchConfig, hf_assisted) runs against ONE target-alone baseline: per prompt the target
    alone decodes once, then every run decodes the same prompt, so all ratios share the same baseline and
    machine noise; returns one result dict (docs/architecture.md) per run. The runs differ in draft, γ and schedule only.
    hf_lookup: transformers' prompt-lookup decoding with that many tokens a round too, per prompt beside its plain
    generate (each entry's `hf_prompt_lookup`), so that anchor shares the loop and generate's timing.
    warm_up False: no untimed pass first, for runs a measurement in this process has already warmed up (on long
    prompts that pass costs as much as a timed prompt)."""
    first = runs[0][1]
    sampling = first.sampling
    _check_shared(runs)
    eos = eos_ids(target, tok)
    device = str(target.device)
    ours = partial(_ours, target, eos, first)

    # plain transformers cannot use a reduced-vocab draft or a feature head, and verifies one candidate per position
    hf_skip = [hf_skip_reason(d, c) if hf else None for d, c, hf in runs]
    do_hf = [hf and why is None for (_, _, hf), why in zip(runs, hf_skip)]
    # transformers' plain generate: the anchor row, and what its assisted generation is compared with; on a GPU
    # also its static-cache compiled generate, warmed up on every prompt first (one compile and CUDA graph per
    # cache size, none of it timed)
    hf_anchor = any(hf for _, _, hf in runs) or hf_lookup > 0
    hf_static = hf_anchor and warm_up and target.device.type == "cuda" and getattr(first, "hf_static", False)
    # the plain generate anchor also counts its calls and seconds to each first token (the rate after it)
    hf_gen = {"tokens": 0, "seconds": 0.0, "calls": 0, "first_seconds": 0.0}
    hf_gen_static = {"tokens": 0, "seconds": 0.0}
    hf_pld = {"tokens": 0, "seconds": 0.0, "same": 0}

    # --- warm-up: every path once, not timed
    static_failed = _warm_up(target, ours, runs, do_hf, encoded, sampling, eos, hf_anchor, hf_static, hf_lookup) \
        if warm_up else None
    hf_static = hf_static and static_failed is None

    # --- the lossless rule for this target (decode.drafting.lossless): exact in float32; in bf16/fp16 near-ties within ε
    ours_runner, hf_runner = runner_for(target), HFRunner(target)
    calibrate = sampling.greedy and lossless.rule_for(target.dtype) == "numeric"
    seqs = [(ids + ours(None, ids, None, 0)[0], len(ids)) for ids in encoded[:lossless.CALIBRATION_PROMPTS]
            ] if calibrate else []
    rule, eps = lossless.rule_and_epsilon(target.dtype, [ours_runner] + ([hf_runner] if hf_anchor else []), seqs,
                                          {n for _, c, _ in runs for n in lossless.verify_sizes(c)})

    # --- timed runs, interleaved prompt by prompt so machine noise hits every path alike
    env = {"target": target, "eos": eos, "ours": ours, "ours_runner": ours_runner, "hf_runner": hf_runner}
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
        base_cat[context_bucket(len(ids))] += s0
        if hf_anchor:
            timings = {}
            ref_hf, secs = hf_generate(target, ids, first.max_new_tokens, sampling, seed, eos, timings=timings)
            hf_gen["tokens"] += len(ref_hf)
            hf_gen["seconds"] += secs
            hf_gen["calls"] += 1
            hf_gen["first_seconds"] += timings.get("first_token_s", secs)
            hf_gen["same"] = hf_gen.get("same", 0) + (ref_hf == ref)  # the two decoders' target alone agree
        if hf_lookup:
            y, secs = hf_generate(target, ids, first.max_new_tokens, sampling, seed, eos, lookup=hf_lookup)
            hf_pld["tokens"], hf_pld["seconds"] = hf_pld["tokens"] + len(y), hf_pld["seconds"] + secs
            hf_pld["same"] += y == ref_hf  # transformers' prompt lookup is lossless in greedy decoding
        if hf_static:
            y, secs = hf_generate(target, ids, first.max_new_tokens, sampling, seed, eos, static=True)
            hf_gen_static["tokens"] += len(y)
            hf_gen_static["seconds"] += secs
        for run, hf_on, a in zip(runs, do_hf, acc):
            _time_run(env, run, hf_on, a, (i, row, ids, seed, ref, ref_hf if hf_anchor else None), len(rows), log)

    # --- cost model inputs on this device (c once per draft, v(γ) once: it is the target's alone), and the
    # cost model's prediction next to the measurement
    b = base.as_dict()
    hf_rows = {"hf_generate": {**_row(hf_gen), "outputs_matching_ours": hf_gen.get("same", 0)} if hf_anchor else None,
               "hf_generate_static": _row(hf_gen_static) if hf_static else
               {"skipped": static_failed} if static_failed else None,
               "hf_prompt_lookup": {**_row(hf_pld), "gamma": hf_lookup, "outputs_matching_hf_generate": hf_pld["same"]}
               if hf_lookup else None}
    out = [result_entry(cfg, draft_kind(draft), device, target, len(rows), b, base_cat, a, (hf_on, why), lat,
                        sampling.greedy, hf_rows)
           for (draft, cfg, _), hf_on, why, a, lat in zip(runs, do_hf, hf_skip, acc,
                                                           _latencies(target, runs, b["tokens"]))]
    for (draft, _, _), e in zip(runs, out):  # a draft with its own tokenizer: the pair's vocabularies (vocab_pair)
        if draft is not None and draft.other is not None:
            e["other_tokenizer"] = draft.other.describe()
    return out


def _time_run(env: dict, run: tuple, hf_on: bool, a: dict, prompt: tuple, n_rows: int, log=None) -> None:
    """One run (draft, cfg, _) on one prompt (index, row, ids, seed, our target-alone output, transformers' or None),
    accumulated into `a` by category and by context bucket, with the lossless checks of ours and transformers'.
    env: the target, its eos ids, our decoder (ours) and the two runners the lossless rule reads."""
    draft, cfg, _ = run
    i, row, ids, seed, ref, ref_hf = prompt
    ours, ours_runner = env["ours"], env["ours_runner"]
    out, s1 = ours(draft, ids, cfg, seed)
    a["spec"] += s1
    for group in (row["category"], context_bucket(len(ids))):
        a["cat"][group] += s1
        a["prompts"][group] += 1
    if cfg.sampling.greedy:  # ours against ours; after an excused divergence, ours again from ref's prefix
        bad = lossless.check_prompt(a["verdict"], row["id"], ours_runner, ids, ref, out,
                                    partial(ours, draft, cfg=cfg, seed=seed), cfg.max_new_tokens)
        _warn(bad, row, cfg, "speculative output", "the target alone")
    if hf_on:
        _hf_assisted(env["target"], env["hf_runner"], draft, cfg, row, ids, ref_hf, seed, cfg.sampling, env["eos"], a)
    if log:
        lookup = f" lookup {cfg.lookup}" if cfg.lookup else ""
        lookup += f" tree-{cfg.tree_nodes}" if cfg.tree_nodes else ""
        log(f"[{i + 1}/{n_rows}] {row['id']} {cfg.draft} γ={cfg.gamma}{lookup}: {len(out)} tokens, "
            f"accepted {s1.accepted}/{s1.proposed}")


def _check_shared(runs: list[tuple]) -> None:
    """The runs of one measure_many share sampling settings, max_new_tokens and seed (one baseline serves all)."""
    first = runs[0][1]
    for _, c, _ in runs:
        if (c.temperature, c.top_k, c.top_p, c.max_new_tokens, c.seed) != (first.temperature, first.top_k, first.top_p,
                                                                          first.max_new_tokens, first.seed):
            raise ValueError("measure_many: runs must share sampling settings, max_new_tokens and seed")


def _ours(target, eos, first, draft, ids, cfg, seed, n=None):
    """Our decoder on one prompt: (tokens, Stats). cfg None: the target alone through the same loop (no draft, no
    lookup: γ = 0); a draft None with a lookup: prompt-lookup decoding on its own."""
    gen = torch.Generator(device=str(target.device)).manual_seed(seed)
    n = first.max_new_tokens if n is None else n
    if cfg is None:
        alone = DecodeOptions(temperature=first.temperature, top_k=first.top_k, top_p=first.top_p)
        return generate(target, None, ids, n, alone, eos_token_ids=eos, generator=gen)
    return generate(target, draft.decoding if draft is not None else None, ids, n, cfg,
                    eos_token_ids=eos, vocab_map=draft.vocab_map if draft is not None else None, generator=gen)


def _warm_up(target, ours, runs: list[tuple], do_hf: list[bool], encoded: list[list[int]], sampling, eos,
             hf_anchor: bool, hf_static: bool, hf_lookup: int = 0) -> str | None:
    """Every path once on the first prompt (transformers' static-cache generate on every prompt), none of it
    timed; why the static-cache anchor failed, or None."""
    n = runs[0][1].max_new_tokens
    ours(None, encoded[0], None, 0)
    if hf_anchor:
        hf_generate(target, encoded[0], n, sampling, 0, eos)
    if hf_lookup:
        hf_generate(target, encoded[0], n, sampling, 0, eos, lookup=hf_lookup)
    static_failed = _warm_static(target, encoded, n, sampling, eos) if hf_static else None
    for (draft, cfg, _), hf_on in zip(runs, do_hf):
        ours(draft, encoded[0], cfg, 0)
        if hf_on:
            hf_generate(target, encoded[0], n, sampling, 0, eos, draft.model, cfg, tokenizers=uag(draft))
    return static_failed


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
    calls = [0]  # target forwards: τ of transformers' decoding (tokens per forward; its prefill verifies too)
    hook = target.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        y, secs = hf_generate(target, ids, cfg.max_new_tokens, sampling, seed, eos, draft.model, cfg,
                              tokenizers=uag(draft))
    finally:
        hook.remove()
    a["hf"]["tokens"] += len(y)
    a["hf"]["seconds"] += secs
    a["hf"]["target_forwards"] = a["hf"].get("target_forwards", 0) + calls[0]
    a["hf"]["matches_target"] += int(y == ref_hf)
    if sampling.greedy:
        bad = lossless.check_prompt(a["hf_verdict"], row["id"], hf_runner, ids, ref_hf, y, partial(
            hf_generate, target, sampling=sampling, seed=seed, eos=eos, draft=draft.model, cfg=cfg, tokenizers=uag(draft)),
            cfg.max_new_tokens)
        _warn(bad, row, cfg, "transformers' assisted generation", "transformers' generate")


def uag(draft) -> tuple | None:
    """(target's, draft's tokenizer) for a draft with its own: transformers runs universal assisted generation."""
    return (draft.other.target_tokenizer, draft.other.tokenizer) if draft.other is not None else None


def _row(gen: dict) -> dict:
    row = {"tokens": gen["tokens"], "seconds": round(gen["seconds"], 4), "tokens_per_s": rate(gen["tokens"], gen["seconds"])}
    if "first_seconds" in gen:  # the plain generate anchor: the rate after the first token too (Stats.as_dict's)
        row["prefill_seconds"] = round(gen["first_seconds"], 4)
        row["decode_tokens_per_s"] = decode_rate(gen["tokens"], gen["calls"], gen["seconds"], gen["first_seconds"])
    return row


SMALL_RUN_TOKENS, SMALL_RUN_REPEATS = 256, 4  # a run timing fewer tokens times its cost-model steps fewer times


def _latencies(target, runs: list[tuple], timed_tokens: int) -> list[dict]:
    """decode.bench.latency.measure for each run: c once per (draft, draft weights), v(γ) once for the target. A run
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

