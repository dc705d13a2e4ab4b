"""Batched generation and teacher-forced scoring that keep the target's top-k logprobs.

Top-k rows come from the *raw* logits (temperature 1, no top-k/top-p) of the very forward passes that
generate, so training sees the target's true distribution and the target never runs twice.
Batches are left-padded; rows that finish are dropped from the batch (and the KV cache) so a long straggler
does not keep paying for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from decode.runners import cache_arg
from decode.sampling import SamplingParams, logits_to_probs


@dataclass
class Generated:
    response_ids: list[int]
    topk_ids: list[list[int]] | None  # one row of k per response position
    topk_logprobs: list[list[float]] | None


def _topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) raw logits -> (B, k) ids (int32) and logprobs (float16)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    vals, ids = torch.topk(logp, k, dim=-1)
    return ids.to(torch.int32), vals.to(torch.float16)


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], max_new_tokens: int, sampling: SamplingParams, k: int,
                   eos_ids: set[int], pad_id: int, stop_strings: tuple[str, ...] = (), tokenizer=None,
                   generator: torch.Generator | None = None) -> list[Generated]:
    """Generate for a batch of prompts (token id lists); return one Generated per prompt, in order."""
    dev = model.device
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, L), pad_id, dtype=torch.long, device=dev)
    mask = torch.zeros((B, L), dtype=torch.long, device=dev)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p, device=dev)
        mask[b, L - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    cache, kv = DynamicCache(config=model.config), cache_arg(model)
    out = [[] for _ in range(B)]
    tk_ids = [[] for _ in range(B)]
    tk_lp = [[] for _ in range(B)]
    active = list(range(B))  # original row of each batch row
    # .to(dev): a target spread by a device map returns logits on its last GPU; sampling (and its generator) and
    # the kept rows live on the first
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, **{kv: cache},
                   use_cache=True, logits_to_keep=1).logits[:, -1].to(dev)  # (B, V)
    next_pos = pos[:, -1:] + 1
    for _ in range(max_new_tokens):
        if k:
            ti, tl = _topk(logits, k)
        if sampling.greedy:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(logits_to_probs(logits, sampling), 1, generator=generator)[:, 0]
        nxt_l = nxt.tolist()
        keep = []
        for j, b in enumerate(active):
            out[b].append(nxt_l[j])
            if k:
                tk_ids[b].append(ti[j].tolist())
                tk_lp[b].append(tl[j].tolist())
            done = nxt_l[j] in eos_ids or len(out[b]) >= max_new_tokens
            if not done and stop_strings:
                tail = tokenizer.decode(out[b][-16:])
                done = any(s in tail for s in stop_strings)
            if not done:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(active):  # drop finished rows from the batch and the cache
            sel = torch.tensor(keep, device=dev)
            cache.batch_select_indices(sel)
            mask, next_pos, nxt = mask[sel], next_pos[sel], nxt[sel]
            active = [active[j] for j in keep]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=dev)], dim=1)
        logits = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=next_pos,
                       **{kv: cache}, use_cache=True).logits[:, -1].to(dev)
        next_pos = next_pos + 1
    return [Generated(out[b], tk_ids[b] if k else None, tk_lp[b] if k else None) for b in range(B)]


def head_logits(model, h: torch.Tensor) -> torch.Tensor:
    """(n, H) final hidden states -> (n, V) logits, as the model's own forward makes them past its head: the
    head alone computes the full (B, L, V) logits' rows for just the response positions, but some
    architectures then rescale them, and so must we:
      final_logit_softcapping (Gemma2, Gemma3): tanh(z / cap) * cap
      logit_scale (Cohere): z * scale;  logits_scaling (Granite): z / scaling
    """
    z = model.get_output_embeddings()(h)
    c = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(c, "logit_scale", None) is not None and c.model_type.startswith("cohere"):
        z = z * c.logit_scale
    if getattr(c, "logits_scaling", None) is not None:
        z = z / c.logits_scaling
    cap = getattr(c, "final_logit_softcapping", None)
    if cap is not None:
        z = torch.tanh(z / cap) * cap
    return z


@torch.inference_mode()
def score_batch(model, prompts: list[list[int]], responses: list[list[int]], k: int, pad_id: int) -> list[Generated]:
    """Teacher-forced top-k logprobs of the target at every response position (no generation).

    Row b is prompt + response, right-padded; position t predicts token t+1, so the rows for the response
    are positions len(prompt)-1 .. len(prompt)+len(response)-2. The head runs only on those positions.
    """
    dev = model.device
    seqs = [p + r for p, r in zip(prompts, responses)]
    B, L = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((B, L), pad_id, dtype=torch.long, device=dev)
    mask = torch.zeros((B, L), dtype=torch.long, device=dev)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, device=dev)
        mask[b, : len(s)] = 1
    hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
    results = []
    for b, (p, r) in enumerate(zip(prompts, responses)):
        h = hidden[b, len(p) - 1: len(p) + len(r) - 1]  # (len(r), H)
        ti, tl = _topk(head_logits(model, h), k)
        results.append(Generated(list(r), ti.tolist(), tl.tolist()))
    return results
