"""The student's log-probs at chosen ids and of the complement of a set, from one softmax pass (the losses'
shared inner step, losses.py): an autograd Function with a closed-form backward and no host read."""

from __future__ import annotations

import math

import torch
from torch import Tensor


class _SoftmaxGather(torch.autograd.Function):
    """log q at chosen ids and log q(complement of a set), q = softmax(z), from one exp pass over (N, V).

    The plain autograd version (log_softmax, gather, logsumexp over the masked complement, and a separate
    logsumexp for cross-entropy) made three passes of exp over the (N, V) logits forward and three back, ~30% of
    a training step of the 12,288-token draft on 2 CPU cores. Here the forward makes one and the backward
    writes the gradient in closed form: with G = sum of the id gradients + g_rest,
        dz_j = sum_{i: id_i = j} g_i - q_j G + [j in complement] g_rest q_j / q_rest.

    With a set (the teacher's valid top-k ids), the row splits into the set and its complement C:
        m_C = max_{j in C} z_j,  s_C = sum_{j in C} exp(z_j - m_C) >= 1    (the one exp pass, set entries 0)
        log Z_C = m_C + log s_C       exact however far below the row max C lies: never 0 / 0, no underflow
        log Z_S = logsumexp of z at the set's ids, each id once           ((N, k): ids may repeat in a row)
        lse = logaddexp(log Z_S, log Z_C),  log q_rest = log Z_C - lse
    so q_j = exp(z_j - m_C) exp(m_C - lse) on C (the pass's values times a per-row scale) and exp(z_j - lse) on
    the set (N, k), and q_j / q_rest = exp(z_j - m_C) / s_C. Nothing is read on the host: every row takes the same
    path. An empty complement (the set covers V) gives a finite rest value (unused: coarsen drops that bin) and
    no gradient through it.
    """

    @staticmethod
    def forward(ctx, z, ids, in_set, set_ids):
        # z (N, V) float; ids (N, m) long >= 0; in_set (N, V) bool and set_ids (N, k) long (-1 = none), or None
        if in_set is None:
            mx = z.amax(-1, keepdim=True)  # (N, 1)
            e = torch.exp(z - mx)  # (N, V), in (0, 1]
            s = e.sum(-1, keepdim=True)  # (N, 1) >= 1
            ctx.save_for_backward(e, s, ids)
            ctx.rest = False
            return z.gather(-1, ids) - (mx + s.log()), None
        e_c = z.masked_fill(in_set, -math.inf)  # (N, V), the complement's logits; becomes its exp in place
        m_c = e_c.amax(-1, keepdim=True)  # (N, 1), -inf for an empty complement
        empty = m_c == -math.inf
        e_c.sub_(torch.where(empty, 0.0, m_c)).exp_()  # (N, V): in (0, 1] on C, 0 on the set
        s_c = e_c.sum(-1, keepdim=True)  # (N, 1), >= 1 unless empty (then 0)
        log_c = torch.where(empty, -math.inf, m_c + s_c.clamp(min=1).log())  # (N, 1) log Z_C
        set_idx, first = _distinct(set_ids)  # (N, k) each row's ids sorted, True at the first of each valid id
        z_set = z.gather(-1, set_idx).masked_fill(~first, -math.inf)  # (N, k)
        lse = torch.logaddexp(torch.logsumexp(z_set, -1, keepdim=True), log_c)  # (N, 1); the set or C is non-empty
        q_set = (z_set - lse).exp()  # (N, k), 0 at repeats and -1 ids
        scale = torch.exp(log_c - lse)  # (N, 1) q_rest: q_j = e_c_j * scale / s_c on C
        rest = torch.where(empty, torch.finfo(z.dtype).min, log_c - lse)  # finite when empty (an unused value)
        ctx.rest = True
        ctx.save_for_backward(e_c, s_c, scale, set_idx, q_set, ids)
        return z.gather(-1, ids) - lse, rest

    @staticmethod
    def backward(ctx, g_ids, g_rest, *_):
        if not ctx.rest:
            e, s, ids = ctx.saved_tensors
            g_ids = torch.zeros_like(e[:, :1]).expand(ids.shape) if g_ids is None else g_ids
            grad = e * (-g_ids.sum(-1, keepdim=True) / s)  # not in place: a retained graph may run backward again
            return grad.scatter_add_(-1, ids, g_ids), None, None, None
        e_c, s_c, scale, set_idx, q_set, ids = ctx.saved_tensors
        g_ids = torch.zeros_like(s_c).expand(ids.shape) if g_ids is None else g_ids
        g_rest = torch.zeros_like(s_c) if g_rest is None else torch.where(s_c > 0, g_rest, 0.0)  # none if C is empty
        total = g_ids.sum(-1, keepdim=True) + g_rest  # (N, 1) G
        # on C: q_j (g_rest / q_rest - G) = e_c_j (g_rest / s_c - G scale / s_c); e_c is 0 on the set
        grad = e_c * ((g_rest - total * scale) / s_c.clamp(min=1))
        grad.scatter_add_(-1, set_idx, -total * q_set)  # on the set: -q_j G
        return grad.scatter_add_(-1, ids, g_ids), None, None, None


def _distinct(ids: Tensor) -> tuple[Tensor, Tensor]:
    """(N, k) long ids, -1 = none -> (the ids sorted per row with -1 read as 0 (N, k), (N, k) bool True at the
    first occurrence of each id >= 0): each id of a row counted once."""
    ids = ids.sort(-1).values
    first = torch.ones_like(ids, dtype=torch.bool)
    first[:, 1:] = ids[:, 1:] != ids[:, :-1]
    return ids.clamp(min=0), first & (ids >= 0)


def student_logprobs(z: Tensor, ids: Tensor, rest_of: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Student log-probs at ids, and of everything outside rest_of's ids, sharing one softmax.

    Args:
        z: (N, V) float student logits.
        ids: (N, m) long; -1 entries give an unused value (the caller masks them; their gradient must be 0).
        rest_of: (N, k) long ids (-1 = none) whose complement's log-mass to return, or None.

    Returns:
        (N, m) log q at ids, and (N, 1) log q(complement of rest_of), or None without rest_of.
    """
    in_set = None
    if rest_of is not None:
        n, v = z.shape
        spare = torch.where(rest_of >= 0, rest_of, v)  # -1 ids land in a spare column that is cut off
        in_set = torch.zeros(n, v + 1, dtype=torch.bool, device=z.device).scatter_(-1, spare, True)[:, :v]
    return _SoftmaxGather.apply(z, ids.clamp(min=0), in_set, rest_of)
