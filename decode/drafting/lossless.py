"""When is a greedy speculative output lossless? One rule, read by decode.bench, distill's evaluate, pipeline and publish.

    exact    (float32 targets): token for token equal to the target alone's output.
    numeric  (bfloat16 / float16 targets): a verification forward of γ + 1 tokens takes other GEMM shapes and
             attention kernels than a one-token forward, so its logits round differently and two near-tied
             tokens may swap (vLLM: lossless "up to the precision limits of hardware numerics"). A divergence at
             new token i is *excused* when the target's own two logits there, the reference token's and the
             speculative one's after prompt + ref[:i], are within ε of each other: its `margin` <= ε. ε is
             calibrated per target and device (`calibrate`): the most that the difference of two competing
             logits moved between the target's forward paths (one token at a time, γ + 1 at a time, one prefill)
             over the same positions. After an excused divergence the check goes on from the reference prefix
             (the speculative decoder runs again from prompt + ref[:i + 1]) instead of giving up on the prompt.
             Any other divergence makes the run not lossless; none is hidden.

`judge` is the pure rule on token lists (margins and reruns come in as functions); `Verdict` sums prompts and
gives the result JSON's keys; `margin_fn` and `calibrate` compute margins and ε with a runner (decode.runners).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

RULES = ("exact", "numeric")
CALIBRATION_PROMPTS = 2  # prompts (with the target alone's output) whose positions calibrate ε
CALIBRATION_TOKENS = 32  # positions per prompt
COMPETING = 8  # the reference row's top tokens whose logit differences count: those that can take the argmax


def rule_for(dtype: torch.dtype) -> str:
    """exact for a float32 (or float64) target, numeric for bfloat16 / float16."""
    return "exact" if dtype in (torch.float32, torch.float64) else "numeric"


def first_divergence(ref: list[int], out: list[int]) -> int | None:
    """Index of the first new token where out differs from ref (a length difference counts), or None."""
    if ref == out:
        return None
    return next((i for i, (a, b) in enumerate(zip(ref, out)) if a != b), min(len(ref), len(out)))


def judge(ref: list[int], out: list[int], rule: str, epsilon: float,
          margin: Callable[[int, int], float] | None = None,
          rerun: Callable[[int], list[int]] | None = None) -> dict:
    """One prompt's verdict: {"lossless", "excused": [margins], "divergence": {...} | None, "unchecked"}.

    ref, out: the target alone's and the speculative decoder's new tokens. margin(i, token) -> |z[ref[i]] - z[token]|,
    the target's logits after prompt + ref[:i]. rerun(k) -> the speculative decoder's new tokens after
    prompt + ref[:k] under the same stop conditions (compared with ref[k:]); without it the tokens after an excused
    divergence are left unchecked and counted in "unchecked". Under `exact` no divergence is excused; a
    divergence where one output has ended (EOS, length) is never a near-tie.
    """
    if rule not in RULES:
        raise ValueError(f"unknown lossless rule {rule!r}: one of {RULES}")
    excused, offset = [], 0
    while (i := first_divergence(ref[offset:], out)) is not None:
        at = offset + i
        both = at < len(ref) and i < len(out)
        m = margin(at, out[i]) if both and margin is not None else None
        if rule == "exact" or m is None or m > epsilon:
            return {"lossless": False, "excused": excused, "unchecked": 0,
                    "divergence": {"at": at, "ref": ref[at:at + 5], "out": out[i:i + 5],
                                   "margin": None if m is None else round(m, 4)}}
        excused.append(round(m, 4))
        offset = at + 1
        if offset >= len(ref):
            break
        if rerun is None:
            return {"lossless": True, "excused": excused, "divergence": None, "unchecked": len(ref) - offset}
        out = rerun(offset)
    return {"lossless": True, "excused": excused, "divergence": None, "unchecked": 0}


@dataclass
class Verdict:
    """A run's verdict over its prompts (add each judge() result with `add`); `as_dict` gives the result JSON keys."""

    rule: str
    epsilon: float
    lossless: bool = True
    excused_margins: list[float] = field(default_factory=list)
    divergences: list[dict] = field(default_factory=list)  # outside ε (any, under exact), with the prompt's id
    unchecked: int = 0

    def add(self, prompt: str, one: dict) -> dict | None:
        """Take one prompt's judge() result; return its divergence (with the prompt id) when it was not excused."""
        self.excused_margins += one["excused"]
        self.unchecked += one["unchecked"]
        if one["lossless"]:
            return None
        self.lossless = False
        self.divergences.append({"prompt": prompt, **one["divergence"]})
        return self.divergences[-1]

    def as_dict(self) -> dict:
        return {"lossless": self.lossless, "lossless_rule": self.rule, "epsilon": round(self.epsilon, 4),
                "excused_divergences": len(self.excused_margins), "excused_margins": self.excused_margins,
                "divergences": self.divergences, "unchecked_tokens": self.unchecked}


def check_prompt(verdict: Verdict, prompt: str, runner, prompt_ids: list[int], ref: list[int], out: list[int],
                 decode: Callable, budget: int) -> str | None:
    """judge() one prompt under the verdict's rule and ε and add it to `verdict`: margins from the target's
    `runner`, reruns by decode(ids=prompt_ids + ref[:k], n=budget - k) -> (new tokens, ...), budget being the
    max_new_tokens of `out`. Returns what to warn about (a divergence not excused), or None."""
    one = judge(ref, out, verdict.rule, verdict.epsilon, margin_fn(runner, prompt_ids, ref),
                lambda k: decode(ids=prompt_ids + ref[:k], n=budget - k)[0])
    div = verdict.add(prompt, one)
    if div is None:
        return None
    m = div["margin"]
    why = (f"margin {m} > ε {verdict.epsilon:.3g}" if verdict.rule == "numeric" and m is not None else
           "exact rule" if verdict.rule == "exact" else "one output ended first: not a near-tie")
    return f"at new token {div['at']}: {div['out']} vs {div['ref']} ({why})"


def describe(r: dict) -> str:
    """The verdict in a few words, for summary lines and reports: `True`, `True (2 excused ≤ ε 0.125)`, `False`."""
    text = str(r.get("lossless"))
    if r.get("lossless_rule") == "numeric" and r.get("lossless") is not None:
        n, eps = r.get("excused_divergences", 0), r.get("epsilon")
        worst = f", worst {max(r['excused_margins']):.3g}" if r.get("excused_margins") else ""
        text += f" (numeric: {n} excused{worst}, ε {eps:.3g})"
    return text


# --- the target's side: margins and ε, through a runner (decode.runners: HFRunner or FastLlama)


@torch.inference_mode()
def margin_fn(runner, prompt_ids: list[int], ref: list[int]) -> Callable[[int, int], float]:
    """margin(i, token) -> |z[ref[i]] - z[token]| from one forward of the target over prompt + ref[:i]."""

    def margin(i: int, token: int) -> float:
        ids = prompt_ids + ref[:i]
        z = runner.forward(ids, runner.new_cache(len(ids) + 1), 1)[-1].float()  # (V,)
        return (z[ref[i]] - z[token]).abs().item()

    return margin


@torch.inference_mode()
def path_logits(runner, ids: list[int], start: int, chunk: int) -> torch.Tensor:
    """(len(ids) - start, V) float logits after each of ids[start:], the first `start` ids prefilled and the rest
    fed `chunk` at a time (1: as the target alone decodes; γ + 1: as a verification does); chunk 0: one prefill of
    all ids."""
    cache = runner.new_cache(len(ids) + 1)
    n = len(ids) - start
    if chunk == 0:
        return runner.forward(ids, cache, n).float()
    runner.forward(ids[:start], cache, 1)
    rows = [runner.forward(ids[j:j + chunk], cache, len(ids[j:j + chunk])) for j in range(start, len(ids), chunk)]
    return torch.cat(rows).float()


def epsilon_of(paths: list[torch.Tensor], competing: int = COMPETING) -> float:
    """The largest change, between any two paths, of the difference of two competing logits: per position, over
    the first path's top `competing` tokens, max(Δ) - min(Δ) with Δ the two paths' logits subtracted. A swap of
    two tokens between paths needs their difference to move by at least its size, so this bounds the margins a
    numerics flip can have. paths: (P, V) logits of the same positions."""
    top = paths[0].topk(min(competing, paths[0].shape[-1]), -1).indices  # (P, k)
    picked = [p.gather(-1, top) for p in paths]
    eps = 0.0
    for a in range(len(picked)):
        for b in range(a + 1, len(picked)):
            d = picked[a] - picked[b]
            eps = max(eps, (d.max(-1).values - d.min(-1).values).max().item())
    return eps


def verify_sizes(options) -> set[int]:
    """The token counts of a run's verification forwards (options: decode.options.DecodeOptions), to calibrate ε
    at: γ + 1 (a token tree: its nodes + 1); up to 4γ + 1 under the heuristic schedule; a lookup proposal + 1."""
    sizes = {(options.tree_nodes or options.gamma) + 1}
    sizes |= {4 * options.gamma + 1} if options.schedule == "heuristic" else set()
    return sizes | ({max(options.lookup_tokens, options.gamma) + 1} if options.lookup else set())


def calibrate(runners: list, sequences: list[tuple[list[int], int]], sizes: list[int]) -> float:
    """ε for a target on this device: epsilon_of over one-token, chunked (each size in `sizes`, the verification
    lengths γ + 1 a run uses) and one-prefill logits of the same positions, through every runner the comparisons
    use (ours; transformers' for its generate). sequences: (prompt + the target alone's output, len(prompt)),
    positions from len(prompt) on, at most CALIBRATION_TOKENS of them."""
    eps = 0.0
    for runner in runners:
        for ids, start in sequences:
            ids = ids[: start + CALIBRATION_TOKENS]
            if len(ids) <= start:
                continue
            chunks = [1, 0, *sorted({s for s in sizes if s > 1})]
            eps = max(eps, epsilon_of([path_logits(runner, ids, start, c) for c in chunks]))
    return eps


def rule_and_epsilon(dtype: torch.dtype, runners: list, sequences: list[tuple[list[int], int]],
                     sizes) -> tuple[str, float]:
    """(rule, ε) for a target of this dtype: (exact, 0.0) in float32, else (numeric, calibrate(...))."""
    rule = rule_for(dtype)
    return rule, calibrate(runners, sequences, sorted(sizes)) if rule == "numeric" else 0.0
