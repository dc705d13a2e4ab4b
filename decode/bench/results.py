"""A bench run's result dict (docs/architecture.md) from its accumulated stats: speed, α, τ, lossless, per
category, and the cost model's prediction beside the measurement; its one-line summary."""

from __future__ import annotations

import torch

from decode.bench import costmodel, parallel_cost
from decode.bench.anchors import hf_confidence
from decode.bench.config import BenchConfig
from decode.bench.context_cost import bucket_model
from decode.drafting import lossless
from decode.drafting.stats import Stats
from decode.drafting.tree import static_tree

# context-length buckets (prompt tokens): per_context groups a run's prompts by them
CONTEXT_BUCKETS = ((512, "<512"), (2048, "512-2K"), (4096, "2K-4K"), (8192, "4K-8K"))


def context_bucket(n: int) -> str:
    """The bucket of a prompt of n tokens: "ctx <512", "ctx 512-2K", "ctx 2K-4K", "ctx 4K-8K" or "ctx >=8K"."""
    return "ctx " + next((name for bound, name in CONTEXT_BUCKETS if n < bound), ">=8K")


def rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 3) if seconds else 0.0


def result_entry(cfg: BenchConfig, kind: str | None, device: str, target, n_prompts: int, b: dict, base_cat: dict, a: dict,
           hf_run: tuple[bool, str | None], lat: dict, greedy: bool, hf_rows: dict | None = None) -> dict:
    """One result dict (docs/architecture.md) from the accumulated stats of a run. hf_run: (transformers' assisted
    generation ran, why it did not where it was asked for); hf_rows: transformers' plain generate (the anchor) and,
    on a GPU, its static-cache compiled generate."""
    hf_rows = hf_rows or {}
    spec, hf = a["spec"], a["hf"]
    hf_on, hf_skipped = hf_run
    s = spec.as_dict()
    speedup = (spec.new_tokens / spec.seconds) / (b["tokens"] / b["seconds"])
    hf_rate = rate(hf["tokens"], hf["seconds"])
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
        "draft_context": cfg.draft_context,
        "baseline": {k: b[k] for k in ("tokens", "seconds", "tokens_per_s", "prefill_seconds", "decode_tokens_per_s")},
        "hf_generate": hf_rows.get("hf_generate"),  # transformers' target alone: the anchor, hf_assisted's reference
        "hf_generate_static": hf_rows.get("hf_generate_static"),  # the same with a static cache, compiled (GPU only)
        "hf_prompt_lookup": hf_rows.get("hf_prompt_lookup"),  # transformers' prompt-lookup decoding (evaluate's anchor)
        "speculative": s,
        "hf_assisted": (
            {"tokens": hf["tokens"], "seconds": round(hf["seconds"], 4), "tokens_per_s": hf_rate,
             # its τ as tokens per target forward (transformers' prefill verifies the first proposals too)
             "target_forwards": hf.get("target_forwards"), "tokens_per_target_forward":
                 round(hf["tokens"] / hf["target_forwards"], 4) if hf.get("target_forwards") else None,
             "outputs_matching_target": hf["matches_target"],  # equal to transformers' own generate
             "num_assistant_tokens": cfg.gamma, "assistant_confidence_threshold": hf_confidence(cfg),
             **({"lossless": a["hf_verdict"].lossless, "excused_divergences": len(a["hf_verdict"].excused_margins),
                 "divergences": a["hf_verdict"].divergences} if greedy else {})}
            if hf_on else None
        ),
        "hf_assisted_skipped": hf_skipped,
        "speedup": round(speedup, 4),
        "speedup_vs_hf_assisted": round(s["tokens_per_s"] / hf_rate, 4) if hf_on and hf_rate else None,
        # lossless under decode.drafting.lossless's rule for this dtype; `lossless_rule`, `epsilon`, excused divergences
        **(a["verdict"].as_dict() if greedy else {"lossless": None, "lossless_rule": None}),
        "per_category": _per_category(a, base_cat, lambda name: not name.startswith("ctx ")),
        # the same by the prompt's length in tokens (context_bucket): how a draft holds up at long contexts
        "per_context": _per_context(a, base_cat),
        "cost_model": _cost_model(cfg, spec, b, lat, speedup),
    }


def _per_category(a: dict, base_cat: dict, keep) -> dict:
    """Per prompt category (or context bucket: the groups `keep` takes): the run's tokens, α, τ and speedup over
    the target alone on the same prompts."""
    return {name: _group(a["prompts"][name], c, base_cat[name]) for name, c in sorted(a["cat"].items()) if keep(name)}


def _group(prompts: int, spec: Stats, base: Stats) -> dict:
    """One group's row: the run's stats on its prompts against the target alone's on the same prompts."""
    s, b = spec.as_dict(), base.as_dict()
    return {
        "prompts": prompts,
        "tokens": spec.new_tokens,
        "acceptance_rate": round(spec.acceptance_rate, 4),
        "draft_acceptance_rate": rounded(draft_alpha(s)),  # the draft's own proposals (lookup's left out)
        "tau": round(spec.tau, 4),
        "baseline_tokens_per_s": b["tokens_per_s"],
        "speculative_tokens_per_s": s["tokens_per_s"],
        "speedup": round(s["tokens_per_s"] / b["tokens_per_s"], 4),
        "baseline_decode_tokens_per_s": b["decode_tokens_per_s"],
        "speculative_decode_tokens_per_s": s["decode_tokens_per_s"],
    }


def _per_context(a: dict, base_cat: dict) -> dict:
    """_per_category's rows by context bucket, shortest first, named without the "ctx " prefix, each with the cost
    model at its length (decode.bench.context_cost)."""
    rows = _per_category(a, base_cat, lambda name: name.startswith("ctx "))
    order = [name for _, name in CONTEXT_BUCKETS] + [">=8K"]
    return {name: {**rows["ctx " + name], "cost_model": bucket_model(a["cat"]["ctx " + name], base_cat["ctx " + name])}
            for name in order if "ctx " + name in rows}


def _cost_model(cfg: BenchConfig, spec: Stats, b: dict, lat: dict, speedup: float) -> dict:
    """The cost model's inputs (lat: c and v(γ) from decode.bench.latency) and prediction next to the measured speedup."""
    v = {int(g): x for g, x in lat["v"].items()}
    alpha = spec.acceptance_rate  # α: accepted / proposed (docs/architecture.md, "Metrics")
    # the cost model's per-token α (costmodel.alpha_iid); with a varying γ there is no such estimate, use α
    # with lookup, rounds proposed by the draft and by context lookup are modelled apart (costmodel.speedup_with_lookup)
    d_acc, d_rounds = spec.accepted - spec.lookup_accepted, spec.rounds - spec.lookup_rounds
    p = (costmodel.alpha_iid(d_acc, d_rounds, spec.full_rounds - spec.lookup_full)
         if cfg.schedule == "constant" else alpha)
    lookup_model = _lookup_model(spec)
    parallel = lat.get("c_block")  # a parallel draft: one forward of γ tokens a round (decode.bench.parallel_cost)
    # c per draft forward: a chain's γ steps, a tree's levels, a parallel draft's one forward
    in_run = _costs_in_run(spec, b, 1 if parallel else spec.tree_levels / spec.tree_rounds if spec.tree_rounds else
                           cfg.gamma)
    ratio = draft_ratio(spec)
    best_g, best_pred = costmodel.best_gamma(p, lat["c"], v, ratio)
    return {
        **lat,
        "alpha": round(alpha, 4),
        "alpha_iid": round(p, 4),
        "target_tokens_per_draft_step": round(ratio, 4),  # 1 unless the draft has its own tokenizer
        "predicted_tau": round(costmodel.tau(p, cfg.gamma * ratio), 4),
        "predicted_speedup": round(_predict(cfg, p, lookup_model, lat["c"], v, spec), 4),
        "tree": _tree_model(cfg, spec) if cfg.tree_nodes else None,
        "lookup": {k: round(x, 4) for k, x in lookup_model.items()} if lookup_model else None,
        "measured_speedup": round(speedup, 4),
        "best_gamma": best_g,
        "best_gamma_predicted_speedup": round(best_pred, 4),
        # the same model with c and v(γ) taken from this run's own forward timings (see _costs_in_run)
        "in_run": in_run and {**in_run, "predicted_speedup": round(_predict(cfg, p, lookup_model, in_run["c"],
                                                                            {g: in_run["v"] for g in v}, spec), 4)},
        **(_parallel_model(cfg, spec, parallel, v, in_run) if parallel else {}),
    }


def _parallel_model(cfg: BenchConfig, spec: Stats, c_block: dict, v: dict[int, float], in_run: dict | None) -> dict:
    """A parallel draft's prediction (decode.bench.parallel_cost) in place of the chain's, its inputs beside."""
    m = parallel_cost.model(spec, cfg.gamma, cfg.tree_nodes, c_block, v)
    out = {"parallel": m, "predicted_speedup": m["predicted_speedup"]}  # predicted_tau stays the i.i.d. chain's
    if in_run:
        out["in_run"] = {**in_run, "predicted_speedup": round(parallel_cost.in_run(spec, in_run["v"], in_run["c"],
                                                                                   cfg.gamma), 4)}
    return out


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
    v_draft = costmodel.v_at(vs, cfg.gamma * draft_ratio(spec))
    if lookup_model:
        return costmodel.speedup_with_lookup(p, cfg.gamma, c, vs, lookup_model["share"], lookup_model["alpha_iid"],
                                             lookup_model["tokens"], v_draft=v_draft)
    return costmodel.speedup(p, cfg.gamma, c, v_draft, draft_ratio(spec))


def draft_alpha(s: dict) -> float | None:
    """α of the draft's own proposals, from a Stats.as_dict() (rounds proposed by context lookup left out); None
    where the draft proposed nothing (every round was lookup's, or the target alone's)."""
    proposed = s["proposed"] - s["lookup"]["proposed"]
    return (s["accepted"] - s["lookup"]["accepted"]) / proposed if proposed else None


def rounded(x: float | None) -> float | None:
    """x to 4 places, None kept (a rate that was not measured)."""
    return None if x is None else round(x, 4)


def draft_ratio(spec: Stats) -> float:
    """Target tokens a draft step proposes: 1, but for a draft with its own tokenizer (decode.drafting.translate) the
    run's measured ratio (Stats.draft_tokens: the draft steps behind its proposals)."""
    return (spec.proposed - spec.lookup_proposed) / spec.draft_tokens if spec.draft_tokens else 1.0


def _lookup_round(lookup_model: dict | None, vs: dict[int, float]) -> tuple[float, float]:
    """(share of lookup rounds, v of their mean length) for costmodel.tree_speedup; (0, 0) without lookup."""
    if not lookup_model:
        return 0.0, 0.0
    return lookup_model["share"], costmodel.v_at(vs, max(1, round(lookup_model["tokens"])))


def _costs_in_run(spec, b: dict, gamma: float) -> dict | None:
    """c and v as this run saw them, in units of the target-alone run's mean forward time t1: c = draft seconds
    per draft round / γ / t1, v = mean target forward (verification or prefill) / t1. decode/bench/latency.py measures
    them apart from the run, which on a shared CPU drifts between measurements; these drift with the run.
    Prefill forwards are in both means (one per prompt in each run). None for the target-alone entry."""
    if not b.get("target_forwards") or not spec.target_forwards:
        return None
    t1 = b["target_seconds"] / b["target_forwards"]
    draft_rounds = spec.rounds - spec.lookup_rounds
    c = spec.draft_seconds / (gamma * draft_rounds) / t1 if draft_rounds and spec.draft_forwards else 0.0
    return {"c": round(c, 4), "v": round(spec.target_seconds / spec.target_forwards / t1, 4),
            "target_forward_ms": round(t1 * 1e3, 3)}


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({torch.get_num_threads()} threads)"


def summary(r: dict) -> str:
    """The result's headline numbers in one line (the JSON, last on stdout, holds everything)."""
    s, hf = r["speculative"], r["hf_assisted"]
    gamma = f"γ={r['gamma']}" if r["schedule"] == "constant" else f"γ≤{r['gamma']} ({r['schedule']})"
    text = (f"{gamma}: α {s['acceptance_rate']:.3f}, τ {s['tau']:.2f}, lossless {lossless.describe(r)}; "
            f"tokens/s: target alone {r['baseline']['tokens_per_s']:.1f}, speculative {s['tokens_per_s']:.1f}")
    if r.get("hf_generate"):
        text += f", transformers generate {r['hf_generate']['tokens_per_s']:.1f}"
    if (r.get("hf_generate_static") or {}).get("tokens_per_s"):
        text += f" (static cache, compiled {r['hf_generate_static']['tokens_per_s']:.1f})"
    if hf:
        text += f", transformers assisted {hf['tokens_per_s']:.1f}"
    elif r.get("hf_assisted_skipped"):
        text += " (no transformers assisted: " + r["hf_assisted_skipped"].split(";")[0] + ")"
    windows = s.get("draft_window") or {}
    if windows:  # where the draft's window of the prompt came from (decode.drafting.prompt_read)
        text += "; draft window: " + ", ".join(f"{k} ({w['tokens'][0]}-{w['tokens'][1]} tokens)" if k != "none" else k
                                               for k, w in windows.items())
    text += f"; speedup {r['speedup']:.2f}x over the target alone"
    if r["speedup_vs_hf_assisted"]:
        text += f", {r['speedup_vs_hf_assisted']:.2f}x over transformers assisted"
    return text
