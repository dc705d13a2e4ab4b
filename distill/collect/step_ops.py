"""The captured collection step's layer pieces in fewer kernels than the decoder's layer code (llama_steps, CUDA).

A CUDA graph replays every kernel of a step; what is left to save is kernels and the bytes they move. Per layer:
  rms_norm     F.rms_norm (aten.rms_norm): one op where torch dispatches it to a fused kernel, where the decoder's
               bf16 path makes eight (widen, square, mean, add, rsqrt, multiply, narrow, scale); on the CPU it
               decomposes into six. Whether this torch's CUDA build runs it as one kernel is not measured here (no
               GPU). It scales in float32 and rounds once, where LlamaRMSNorm rounds before the weight: bf16 results
               may differ in the last bit
  rope_qk      q and k rotated together, x * cos + rotate_half(x) * sin as flip(x) * signed_sin added onto x * cos
               by one addcmul: three kernels for both, where two rotations through torch.cat make ten
  add_linear   h + x @ W^T as addmm(h, x, W^T): the residual is the matmul's C, one kernel fewer a projection

On float32 the three give the decoder's values up to rounding (tests/test_collect_generation.py compares tokens and
top-k); the CPU collection path keeps the decoder's code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(eps: float):
    """(x (n, H), weight (H,)) -> F.rms_norm(x) * weight."""
    return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """(positions, hd) sin table -> [-sin[:, :hd/2], sin[:, hd/2:]]: flip(x) * it = rotate_half(x) * sin."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[:, :half], sin[:, half:]), -1)


def rope_qk(qk: torch.Tensor, cos: torch.Tensor, signed: torch.Tensor, n_heads: int):
    """qk (B, heads + kv_heads, hd) rotated at cos, signed (B, 1, hd) -> (q (B, heads, hd), k (B, kv_heads, hd)).
    flip swaps the halves: flip(x) = [x2, x1], and [x2, x1] * [-sin1, sin2] = [-x2 sin1, x1 sin2] =
    rotate_half(x) * sin."""
    B, n, hd = qk.shape
    swapped = qk.view(B, n, 2, hd // 2).flip(2).view(B, n, hd)
    out = torch.addcmul(qk * cos, swapped, signed)
    return out[:, :n_heads], out[:, n_heads:]


def add_linear(h: torch.Tensor, lin, x: torch.Tensor) -> torch.Tensor:
    """h + lin(x): one addmm where lin is one bias-free (out, in) weight (decode.runners.fast._Linear, "hf")."""
    parts = lin.parts
    if parts is not None and len(parts) == 1 and parts[0][1] is None:
        return torch.addmm(h, x, parts[0][0].t())
    return h + lin(x)
