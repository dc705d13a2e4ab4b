"""The draft's window of the prompt by cost (decode.drafting.prompt_read): for windows W of the prompt's last tokens,
the acceptance the draft keeps and what it costs, and the W that decodes fastest after the first token.

    α_W     the draft's top-1 agreement with the target's own output, teacher-forced: one draft forward over
            the prompt's last W tokens and the output (the cheap proxy for greedy α, docs/architecture.md)
    d(W, g) the draft's cost of a round at a W-token context: g steps (a chain) or one g-token forward (parallel)
    P(W)    its read of W tokens (the deferred prompt forward)
    t1, v   the target's one-token step and v(g) at the prompts' median length
    s(W)  = max over g of τ(α_W, g) / (d(W, g) + v(g))        decode speed against the target alone, costs in t1
    A(W)  = max(1, n / (P(W) + n / s(W)))                     after the first token, over n new tokens: where
            drafting does not win its read back, the schedule stays with the target alone (1)

evaluate's long check (distill/evaluate/long_check.py) runs it on the long held-out prompts and stores the result
with the draft (decode.models.draft_folder.store_window); the decoder reads the window from there.
"""

from __future__ import annotations

import statistics

import torch

from decode.bench import costmodel
from decode.bench.latency import _seconds, step_latency
from decode.drafting.parallel import block_logits, mask_token
from decode.models.draft_folder import VocabMap
from decode.runners.choice import runner_for

WINDOWS = (128, 256, 512, 1024, 2048, 4096)  # candidates, below the draft's trained length and the longest prompt


@torch.inference_mode()
def agreement(runner, vocab: VocabMap, mask: int | None, prompt: list[int], out: list[int], window: int) -> int:
    """How many of out's tokens the draft predicts (argmax) reading the prompt's last `window` tokens and out's
    earlier tokens."""
    if len(out) < 1:
        return 0
    ids = vocab.to_draft(prompt[-window:] + out[:-1])
    cache = runner.new_cache(len(ids) + 1)
    logits = runner.forward(ids, cache, len(out))  # (len(out), V_draft): position i predicts out[i]
    if mask is not None:
        logits = block_logits(logits, mask, vocab)
    best = vocab.targets(logits.argmax(-1)).tolist()
    return sum(a == b for a, b in zip(best, out))


@torch.inference_mode()
def read_seconds(runner, tokens: int, repeats: int = 3) -> float:
    """Median seconds of the draft's forward over `tokens` tokens into an empty cache (one logits row kept)."""
    ids = torch.randint(0, runner.config.vocab_size, (tokens,)).tolist()
    times = []
    for _ in range(repeats + 1):
        cache = runner.new_cache(tokens + 1)
        times.append(_seconds(runner.device, lambda: runner.forward(ids, cache, 1)))  # noqa: B023
    return statistics.median(times[1:])


@torch.inference_mode()
def target_costs(target, context: int, gmax: int, repeats: int = 5, warmup: int = 2) -> tuple[float, dict[int, float]]:
    """(t1 seconds, {g: v(g)}) after one `context`-token prefill: forwards of 1 and g + 1 tokens timed in turn."""
    runner = runner_for(target)
    vocab = runner.config.vocab_size
    cache = runner.new_cache(context + gmax + 2)
    runner.forward(torch.randint(0, vocab, (context,)).tolist(), cache, 1)
    ids = torch.randint(0, vocab, (gmax + 1,)).tolist()
    times: dict[int, list[float]] = {n: [] for n in range(1, gmax + 2)}
    for i in range(warmup + repeats):
        for n in times:
            secs = _seconds(runner.device, lambda: runner.forward(ids[:n], cache, n))  # noqa: B023
            cache.crop(-n)
            if i >= warmup:
                times[n].append(secs)
    t1 = statistics.median(times[1])
    return t1, {g: statistics.median(times[g + 1]) / t1 for g in range(1, gmax + 1)}


def candidates(limit: int | None, longest: int) -> list[int]:
    """WINDOWS below the draft's trained length, and the longest prompt (or that length) itself: read whole."""
    top = min(limit or longest, longest)
    return sorted({w for w in WINDOWS if w < top} | {top})


def choose(draft, target, encoded: list[list[int]], outputs: list[list[int]], gamma: int, n_new: int,
           weights: str = "float32", limit: int | None = None, repeats: int = 5) -> dict:
    """The record stored with the draft: the chosen window and, for every candidate, what it was chosen from.
    draft: a decode.models.targets.Draft (a standalone or parallel draft); encoded/outputs: the long prompts and
    the target's greedy output after each; limit: the draft's trained length."""
    runner = runner_for(draft.model, weights=weights)
    vocab = VocabMap(draft.vocab_map, target.config.vocab_size)
    mask = mask_token(draft.model.config)
    lengths = sorted(len(ids) for ids in encoded)
    t1, v = target_costs(target, lengths[len(lengths) // 2], gamma, repeats)
    total = sum(len(o) for o in outputs)
    rows = {}
    for w in candidates(limit, lengths[-1]):
        alpha = sum(agreement(runner, vocab, mask, p, o, w) for p, o in zip(encoded, outputs)) / max(total, 1)
        if mask is None:  # a chain: g one-token steps
            one = step_latency(draft.model, w, 1, repeats, weights=weights)
            step = {g: g * one for g in range(1, gamma + 1)}
        else:  # a parallel draft: one g-token forward
            step = {g: step_latency(draft.model, w, g, repeats, weights=weights) for g in range(1, gamma + 1)}
        read = read_seconds(runner, w)
        s = max(costmodel.tau(alpha, g) / (step[g] / t1 + v[g]) for g in step)
        drafting = n_new / (read / t1 + n_new / s)  # the read paid, then every round drafted
        rows[w] = {"agreement": round(alpha, 4), "read_ms": round(read * 1e3, 3),
                   "round_ms": {str(g): round(x * 1e3, 3) for g, x in step.items()},
                   "decode_speedup": round(s, 4), "drafting_after_first_token": round(drafting, 4),
                   # where drafting does not win the read back the schedule stays with the target alone: 1
                   "predicted_after_first_token": round(max(drafting, 1.0), 4)}
    # the fastest after the first token; where no window pays (the schedule would not draft), the fastest decoding
    best = max(rows, key=lambda w: (rows[w]["predicted_after_first_token"], rows[w]["decode_speedup"], -w))
    ws = sorted(rows)
    one_step = [rows[w]["round_ms"]["1"] for w in ws]
    per_key = ((one_step[-1] - one_step[0]) / (ws[-1] - ws[0]) * 1e3) if len(ws) > 1 else None
    return {"window": best, "chosen_by": "evaluate's long check (decode/bench/window_cost.py)",
            "prompts": len(encoded), "prompt_tokens": [lengths[0], lengths[-1]], "max_new_tokens": n_new,
            "gamma": gamma, "draft_weights": weights, "target_step_ms": round(t1 * 1e3, 3),
            "v": {str(g): round(x, 4) for g, x in v.items()},
            "draft_ms_per_1k_keys": round(per_key, 4) if per_key is not None else None,
            "pays": rows[best]["drafting_after_first_token"] > 1.0, "windows": {str(w): r for w, r in rows.items()}}
