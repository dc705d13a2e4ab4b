"""The cost model at one context length: a context bucket's own c, v and prompt forwards, timed inside the run.

decode.bench.latency times c and v(γ) after a 128-token context. At 4K-8K tokens both move (attention reads the
whole cache), and two costs appear that a short prompt hides: the target's forward over the prompt (paid alike
with and without a draft) and the draft's own forward over it (paid once a call, before its first proposal). In
units of t1, the target-alone run's mean decoding step at the same prompts:

    d       draft seconds a round (its prompt forward left out; lookup rounds cost none), so γ·c for a chain
    v       the verification forward's mean
    P_t     the target's prompt forward, a call;  P_d  the draft's prompt forward, a call
    decode  predicted speedup after the first token:  τ / (d + v)      (τ measured: tokens a verification)
    whole   predicted end to end, n tokens a call after the first:  (P_t + n) / (P_t + P_d + n (d + v) / τ)

The gap to the measured speedup is what neither forward accounts for (the loop's own work, sampling).
"""

from __future__ import annotations

from decode.drafting.stats import Stats


def bucket_model(spec: Stats, base: Stats) -> dict | None:
    """The model above for one group of prompts (spec: the speculative run's stats on them, base: the target
    alone's); None where either run has no decoding step to time (every call stopped at its first token)."""
    base_steps = base.target_forwards - base.generations
    if not base_steps or not spec.rounds or not spec.generations:
        return None
    t1 = (base.target_seconds - base.target_prompt_seconds) / base_steps
    if t1 <= 0:
        return None
    calls = spec.generations
    d = (spec.draft_seconds - spec.draft_prompt_seconds) / spec.rounds / t1
    v = (spec.target_seconds - spec.target_prompt_seconds) / spec.rounds / t1
    p_t, p_d = base.target_prompt_seconds / base.generations / t1, spec.draft_prompt_seconds / calls / t1
    n = (spec.new_tokens - calls) / calls  # tokens a call after its first
    decode = spec.tau / (d + v)
    return {
        "target_step_ms": round(t1 * 1e3, 3),
        "draft_per_round": round(d, 4),
        "v": round(v, 4),
        "target_prompt_steps": round(p_t, 2),
        "draft_prompt_steps": round(p_d, 2),
        "predicted_decode_speedup": round(decode, 4),
        "predicted_speedup": round((p_t + n) / (p_t + p_d + n / decode), 4) if n else None,
    }
