"""Distillation losses from the teacher's stored top-k log-probs, as small pure functions.

Inputs are flattened over response positions (N of them):

    student_logits  (N, V_s)  float  student logits over its own (possibly reduced) vocabulary
    topk_ids        (N, k)    long   teacher's top-k ids mapped into the student's index space,
                                     -1 where the teacher's token is not in the student's vocabulary
    topk_logprobs   (N, k)    float  teacher log-probs of those tokens (float16 on disk, float32 here)
    labels          (N,)      long   teacher's sampled tokens in student index space, -1 = not in it
    mask            (N,)      bool   positions that count; every loss is the mean over them

Temperature is not applied here: the caller divides the logits (and collected the teacher at that temperature).

Tail handling: k+1 bins
-----------------------
The teacher gives only k probabilities. Its remaining mass, 1 - sum(exp(topk_logprobs)) clamped at 0, goes
into one "rest" bin, and so does the mass of every -1 id (a token the student cannot produce). The student's
distribution is coarsened to the same k+1 bins: its probabilities at the valid ids (0 at -1 ids) and its rest
mass, the softmax mass of every student token outside the valid ids. That rest mass is summed over the
complement (a logsumexp where it underflows), not taken as 1 - sum q, so it is exact and its gradient stays right
when it is tiny. One softmax pass serves every term (student_logprobs).

Each divergence is computed exactly over these bins. Merging tokens into bins is a fixed map, so by the
data-processing inequality each value is a lower bound of the full-vocabulary divergence. It is equal to it
for fkl, jsd and tvd when the teacher puts no mass outside the valid ids; reverse KL over the full vocabulary
is then infinite, which is why the floor below exists.

Two corrections keep the bins a proper distribution:
- The teacher's rest bin is floored at TAIL_FLOOR = 1e-6 and the k+1 bins renormalised. float16 rounding can
  make the stored top-k sum reach or pass 1, and a zero teacher bin would make reverse KL infinite wherever
  the student keeps any tail mass. 1e-6 is at or below what float16 log-probs resolve.
- If the valid ids cover the whole student vocabulary (k >= V_s), the student has no rest bin; the teacher's
  rest mass (tokens the student cannot produce) is dropped and its k bins renormalised.

Divergences, with P = teacher and Q = student over the bins:
    fkl = KL(P || Q) = sum p log(p/q)          rkl = KL(Q || P) = sum q log(q/p)
    jsd = beta KL(P || M) + (1-beta) KL(Q || M),  M = beta P + (1-beta) Q,  0 < beta < 1.
          0 <= jsd <= log 2; beta = 0.5 is the symmetric JSD; swapping P and Q is the same as 1 - beta.
    tvd = 0.5 sum |p - q|
    ce  = -log q(label), on the full student vocabulary (no bins).
    top1 = -log q(teacher's most likely token), likewise. On greedy-collected rows the label is that token, so
          top1 = ce there; on rows sampled at T > 0 the label is a draw (35% of labels are not the teacher's top
          token at T = 0.8 on the default target), and top1 trains toward what greedy verification accepts.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from distill.train.softmax import student_logprobs

TAIL_FLOOR = 1e-6
DIVERGENCES = ("fkl", "rkl", "jsd", "tvd")
LOSS_NAMES = (*DIVERGENCES, "ce", "top1")
NEEDS_TOPK = (*DIVERGENCES, "top1")  # the losses that read the teacher's stored top-k


def coarsen(student_logits: Tensor, topk_ids: Tensor, topk_logprobs: Tensor,
            student: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Teacher and student log-probs over the k+1 bins (the k ids, then the rest bin).

    Args:
        student_logits: (N, V_s) float, any float dtype (computed in float32).
        topk_ids: (N, k) long, student index space, -1 = not in the student's vocabulary.
        topk_logprobs: (N, k) float, teacher log-probs.
        student: (log q at topk_ids (N, k), log q of the rest (N, 1)) when the caller already computed them
            with `student_logprobs` (combined_loss shares that pass with the cross-entropies).

    Returns:
        t_logp (N, k+1) float32, s_logp (N, k+1) float32 (carries the gradient), live (N, k+1) bool.
        A bin is dead for a -1 id, and the rest bin is dead when the valid ids cover V_s; dead bins hold
        log-prob 0 (so that nothing downstream sees -inf) and are left out of every sum.
    """
    n, v = student_logits.shape
    if topk_ids.shape != topk_logprobs.shape or topk_ids.dim() != 2 or topk_ids.shape[0] != n:
        raise ValueError(
            f"expected topk_ids and topk_logprobs of shape (N={n}, k); got {tuple(topk_ids.shape)} "
            f"and {tuple(topk_logprobs.shape)}"
        )
    valid = topk_ids >= 0
    has_rest = valid.sum(-1, keepdim=True) < v  # (N, 1); ids are never duplicated
    live = torch.cat([valid, has_rest], dim=-1)

    # --- student: log-probs at the ids, and the rest as the log of the complement's softmax mass
    s_top, s_rest = student or student_logprobs(student_logits.float(), topk_ids, topk_ids)
    s_logp = torch.cat([s_top, s_rest], dim=-1).masked_fill(~live, 0.0)

    # --- teacher: rest = 1 - sum of the valid top-k mass, via expm1 for precision near 1
    t_top = topk_logprobs.float().masked_fill(~valid, -math.inf)
    t_in = torch.logsumexp(t_top, dim=-1, keepdim=True)  # log of the valid top-k mass
    t_rest = torch.log((-torch.expm1(t_in)).clamp(min=TAIL_FLOOR))
    t_logp = torch.cat([t_top, t_rest], dim=-1).masked_fill(~live, -math.inf)
    t_logp = (t_logp - torch.logsumexp(t_logp, dim=-1, keepdim=True)).masked_fill(~live, 0.0)
    return t_logp, s_logp, live


def bin_divergence(name: str, t_logp: Tensor, s_logp: Tensor, live: Tensor, jsd_beta: float = 0.5) -> Tensor:
    """One divergence per position over bins from `coarsen`.

    Args:
        name: one of DIVERGENCES ("fkl", "rkl", "jsd", "tvd").
        t_logp, s_logp, live: (N, B) as returned by `coarsen`.
        jsd_beta: weight of the teacher in M, 0 < jsd_beta < 1 (only for "jsd").

    Returns:
        (N,) float32.
    """
    p = t_logp.exp().masked_fill(~live, 0.0)
    q = s_logp.exp().masked_fill(~live, 0.0)
    if name == "fkl":
        d = p * (t_logp - s_logp)
    elif name == "rkl":
        d = q * (s_logp - t_logp)
    elif name == "jsd":
        if not 0 < jsd_beta < 1:
            raise ValueError(f"jsd_beta must be in (0, 1) (0.5 = symmetric JSD), got {jsd_beta}")
        b = jsd_beta
        m = torch.logsumexp(torch.stack([t_logp + math.log(b), s_logp + math.log(1 - b)]), dim=0)
        d = b * p * (t_logp - m) + (1 - b) * q * (s_logp - m)
    elif name == "tvd":
        d = 0.5 * (p - q).abs()
    else:
        raise ValueError(f"unknown divergence {name!r}; valid: {', '.join(DIVERGENCES)}")
    return d.sum(-1)


def per_position(
    student_logits: Tensor,
    topk_ids: Tensor,
    topk_logprobs: Tensor,
    names: tuple[str, ...] | list[str] = DIVERGENCES,
    jsd_beta: float = 0.5,
) -> dict[str, Tensor]:
    """Divergences per position, sharing one coarsening. Shapes as in the module docstring.

    Returns:
        {name: (N,) float32} for each name in `names` (a subset of DIVERGENCES).
    """
    bins = coarsen(student_logits, topk_ids, topk_logprobs)
    return {name: bin_divergence(name, *bins, jsd_beta=jsd_beta) for name in names}


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of values (N,) over mask (N,) bool, as a scalar (); 0 when no position counts."""
    if mask.dtype != torch.bool or mask.shape != values.shape:
        raise ValueError(
            f"mask must be bool of shape {tuple(values.shape)}, got {mask.dtype} {tuple(mask.shape)}"
        )
    return torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1)


def forward_kl(student_logits: Tensor, topk_ids: Tensor, topk_logprobs: Tensor, mask: Tensor) -> Tensor:
    """KL(teacher || student) over the k+1 bins: (N, V_s), (N, k), (N, k), (N,) -> ()."""
    return masked_mean(per_position(student_logits, topk_ids, topk_logprobs, ["fkl"])["fkl"], mask)


def reverse_kl(student_logits: Tensor, topk_ids: Tensor, topk_logprobs: Tensor, mask: Tensor) -> Tensor:
    """KL(student || teacher) over the k+1 bins: (N, V_s), (N, k), (N, k), (N,) -> ()."""
    return masked_mean(per_position(student_logits, topk_ids, topk_logprobs, ["rkl"])["rkl"], mask)


def jsd(
    student_logits: Tensor, topk_ids: Tensor, topk_logprobs: Tensor, mask: Tensor, beta: float = 0.5
) -> Tensor:
    """Generalised JSD, beta KL(P||M) + (1-beta) KL(Q||M), M = beta P + (1-beta) Q, P = teacher, Q = student.

    (N, V_s), (N, k), (N, k), (N,) -> (). beta in (0, 1); 0.5 is the symmetric JSD, bounded by log 2.
    """
    return masked_mean(per_position(student_logits, topk_ids, topk_logprobs, ["jsd"], beta)["jsd"], mask)


def tvd(student_logits: Tensor, topk_ids: Tensor, topk_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Total variation 0.5 sum |p - q| over the k+1 bins: (N, V_s), (N, k), (N, k), (N,) -> ()."""
    return masked_mean(per_position(student_logits, topk_ids, topk_logprobs, ["tvd"])["tvd"], mask)


def _mean_nll(logq: Tensor, ids: Tensor, mask: Tensor) -> Tensor:
    """-log q(id), mean over mask & (ids >= 0): (N,) log-probs at ids (N,) (-1 = outside the vocabulary), (N,) -> ()."""
    return masked_mean(-logq, mask & (ids >= 0))


def cross_entropy(student_logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy on the teacher's tokens, mean over mask & (labels >= 0): (N, V_s), (N,), (N,) -> ()."""
    return _mean_nll(student_logprobs(student_logits.float(), labels[:, None])[0].squeeze(-1), labels, mask)


def _check_weights(weights: dict[str, float], topk_ids: Tensor | None, labels: Tensor | None) -> list[str]:
    """The active loss names (weight > 0), in LOSS_NAMES order; ValueError on unusable weights or inputs."""
    unknown = sorted(set(weights) - set(LOSS_NAMES))
    if unknown:
        raise ValueError(f"unknown loss weight(s) {unknown}; valid: {', '.join(LOSS_NAMES)}")
    negative = {name: w for name, w in weights.items() if w < 0}
    if negative:
        raise ValueError(f"loss weights must be >= 0, got {negative}")
    active = [name for name in LOSS_NAMES if weights.get(name, 0.0) > 0]
    if not active:
        raise ValueError(
            f"all loss weights are zero or missing ({weights}); set one of {', '.join(LOSS_NAMES)}"
        )
    if "ce" in active and labels is None:
        raise ValueError("weights['ce'] > 0 needs labels")
    if "top1" in active and topk_ids is None:
        raise ValueError("weights['top1'] > 0 needs the teacher's top-k ids")
    return active


def position_terms(
    student_logits: Tensor,
    topk_ids: Tensor | None,
    topk_logprobs: Tensor | None,
    labels: Tensor | None,
    active: list[str],
    jsd_beta: float = 0.5,
) -> list[Tensor]:
    """Each active term per position, sharing one softmax pass. Shapes as in the module docstring.

    Returns:
        [(N,) float32 per name in `active`]: a divergence over the k+1 bins, or -log q (ce: of the label,
        top1: of the teacher's first id; the value at a -1 id is unused, and `combine` masks it out).
    """
    divergences = [n for n in active if n in DIVERGENCES]
    z = student_logits.float()
    cols = ([topk_ids] if topk_ids is not None else []) + ([labels[:, None]] if "ce" in active else [])
    at, rest = student_logprobs(z, torch.cat(cols, dim=-1), topk_ids if divergences else None)  # (N, k[+1]), (N, 1)
    terms = {}
    if divergences:
        k = topk_ids.shape[-1]
        bins = coarsen(z, topk_ids, topk_logprobs, student=(at[:, :k], rest))
        terms = {name: bin_divergence(name, *bins, jsd_beta=jsd_beta) for name in divergences}
    if "ce" in active:
        terms["ce"] = -at[:, -1]
    if "top1" in active:  # the top-k is stored most likely first
        terms["top1"] = -at[:, 0]
    return [terms[name] for name in active]


def combine(terms: list[Tensor], active: list[str], topk_ids: Tensor | None, labels: Tensor | None, mask: Tensor,
            weights: dict[str, float]) -> tuple[Tensor, dict[str, Tensor]]:
    """(weighted sum of the masked means of `position_terms`' (N,) terms, {name: detached mean})."""
    parts = {}
    for name, term in zip(active, terms):
        ids = labels if name == "ce" else topk_ids[:, 0] if name == "top1" else None
        parts[name] = masked_mean(term, mask if ids is None else mask & (ids >= 0))
    total = sum(weights[name] * parts[name] for name in active)
    return total, {name: v.detach() for name, v in parts.items()}


def combined_loss(
    student_logits: Tensor,
    topk_ids: Tensor,
    topk_logprobs: Tensor,
    labels: Tensor | None,
    mask: Tensor,
    weights: dict[str, float],
    jsd_beta: float = 0.5,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Weighted sum of losses, sharing one coarsening. Shapes as in the module docstring.

    Args:
        weights: {name: weight >= 0} with names among LOSS_NAMES; zero-weight terms are not computed.
        labels: (N,) long, needed only when weights["ce"] > 0 (top1 reads topk_ids[:, 0]).

    Returns:
        total: () float32 with gradient; parts: {name: () detached float32} for each term with weight > 0,
        in LOSS_NAMES order (log them as train/loss_<name>).
    """
    active = _check_weights(weights, topk_ids, labels)
    terms = position_terms(student_logits, topk_ids, topk_logprobs, labels, active, jsd_beta)
    return combine(terms, active, topk_ids, labels, mask, weights)


def chunked_loss(
    hidden: Tensor,
    head,
    topk_ids: Tensor | None,
    topk_logprobs: Tensor | None,
    labels: Tensor | None,
    mask: Tensor,
    weights: dict[str, float],
    jsd_beta: float = 0.5,
    chunk: int = 1024,
) -> tuple[Tensor, dict[str, Tensor]]:
    """combined_loss(head(hidden), ...) with the head and the loss run over `chunk` positions at a time.

    Args:
        hidden: (N, H) the draft's last hidden states at the trained positions.
        head: (n, H) -> (n, V) logits (the output layer, with any final soft-capping).
        chunk: positions per chunk; peak memory is a few (chunk, V) float32 tensors, not (N, V).

    Each chunk's logits and softmax are recomputed in the backward pass (activation checkpointing) instead of
    being kept, so every chunk's (chunk, V) tensors are freed before the next one. The terms are per position,
    so value and gradients equal the unchunked loss. With N <= chunk this is combined_loss itself.
    """
    n = hidden.shape[0]
    if n <= chunk:
        return combined_loss(head(hidden), topk_ids, topk_logprobs, labels, mask, weights, jsd_beta)
    from torch.utils.checkpoint import checkpoint

    active = _check_weights(weights, topk_ids, labels)

    def run(h, ids, lps, ys):  # (n, H) -> [(n,) per active term]
        return tuple(position_terms(head(h), ids, lps, ys, active, jsd_beta))

    pieces = []
    for s in range(0, n, chunk):
        rows = slice(s, s + chunk)
        pick = [t[rows] if t is not None else None for t in (topk_ids, topk_logprobs, labels)]
        pieces.append(checkpoint(run, hidden[rows], *pick, use_reentrant=False))
    terms = [torch.cat([p[i] for p in pieces]) for i in range(len(active))]
    return combine(terms, active, topk_ids, labels, mask, weights)
