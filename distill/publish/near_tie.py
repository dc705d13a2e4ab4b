"""When two greedy outputs of a low-precision target may part without a loss: a near-tie.

A bf16/fp16 target's logits move with the number of tokens in a forward (a verification of γ + 1 tokens against
one token), so two tokens whose logits differ by less than LOW_PRECISION_TIE of the largest logit may swap places.
Both publish checks (transformers' assisted generation in compat, vLLM in vllm_check) excuse such a divergence and
no other; a float32 target is never excused.
"""

from __future__ import annotations

import torch

LOW_PRECISION_TIE = 0.02


def near_tie(target, ids: list[int], ref: list[int], out: list[int], i: int) -> bool:
    """Whether new token i differs between ref and out only by a near-tie: the two tokens' logits after
    prompt + ref[:i] within LOW_PRECISION_TIE of the largest logit. Never in float32."""
    if target.dtype == torch.float32 or i >= min(len(ref), len(out)):
        return False
    x = torch.tensor([ids + ref[:i]], device=target.device)
    z = target(input_ids=x, logits_to_keep=1).logits[0, -1].float()  # (V,)
    return (z[ref[i]] - z[out[i]]).abs().item() <= LOW_PRECISION_TIE * z.abs().max().item()
