"""Batched generation and teacher-forced scoring that keep the target's top-k logprobs.

Top-k rows come from the *raw* logits (temperature 1, no top-k/top-p) of the very forward passes that
generate, so training sees the target's true distribution and the target never runs twice.
Batches are left-padded. Each step's tokens, top-k and ends stay on the device (outputs.Outputs) and the host
reads them once a batch; between steps it looks only at check points (check_policy): every step on the CPU, where
finished rows then leave the batch (and the KV cache) so a long straggler does not keep paying for the whole
batch; every CHECK_EVERY steps on a GPU, where a read stalls the queued work and a static batch keeps its graph.
A llama-family target steps in static shapes (llama_steps.py: CUDA graph replays on a GPU); any other model
through its own forward with a DynamicCache (HFSteps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from decode.drafting.sampling import SamplingParams
from decode.runners.hf import cache_arg
from distill.collect import kv_budget, llama_steps
from distill.collect.outputs import Outputs, topk_rows

CHECK_EVERY = 16  # GPU steps between host checks: ended rows, stop strings (a few wasted steps at most)
WARM_UP_STEPS = 3  # decode steps of collection's untimed warm-up: the prefill, an eager step, a captured one


@dataclass
class Generated:
    response_ids: list[int]
    topk_ids: list[list[int]] | None  # one row of k per response position
    topk_logprobs: list[list[float]] | None


def check_policy(device: torch.device) -> tuple[int, bool]:
    """(steps between host checks, whether finished rows leave the batch) on this device: on the CPU every step,
    dropping them (a read costs nothing there, a dropped row's compute is saved); on a GPU every CHECK_EVERY."""
    return (1, True) if device.type == "cpu" else (CHECK_EVERY, False)


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token id lists -> ids, attention mask and positions, each (B, L), left-padded (pads at position 0)."""
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p)
        mask[b, L - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids.to(device), mask.to(device), pos.to(device)


class HFSteps:
    """Any causal LM's decode steps through its own forward: a DynamicCache and the 2D mask grown a column a step."""

    def __init__(self, model, batch: int, max_new_tokens: int, k: int, eos: set[int]):
        self.model, self.kv = model, cache_arg(model)
        self.out = Outputs(batch, max_new_tokens, k, eos, model.device)
        self.gen = None

    def seed(self, generator: torch.Generator | None) -> torch.Generator | None:
        self.gen = generator  # drawn from as given
        return generator

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, rows: int = 0) -> torch.Tensor:
        self.cache, self.mask, self.next_pos = DynamicCache(config=self.model.config), mask, pos[:, -1:] + 1
        return self._logits(ids, pos, logits_to_keep=1)

    def _logits(self, ids: torch.Tensor, pos: torch.Tensor, **kw) -> torch.Tensor:
        # .to(): a target spread by a device map returns logits on its last GPU; sampling (and its generator) and the
        # outputs live on the first
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=pos, **{self.kv: self.cache},
                         use_cache=True, **kw)
        return out.logits[:, -1].to(self.model.device)  # (B, V)

    def advance(self, sampling: SamplingParams) -> None:
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.mask), 1))], dim=1)
        logits = self._logits(self.out.next[:, None], self.next_pos)
        self.next_pos = self.next_pos + 1
        self.out.record(logits, sampling, self.gen)

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.mask, self.next_pos = self.mask[keep], self.next_pos[keep]
        self.out.select(keep)


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], max_new_tokens: int, sampling: SamplingParams, k: int,
                   eos_ids: set[int], pad_id: int, stop_strings: tuple[str, ...] = (), tokenizer=None,
                   generator: torch.Generator | None = None, limit: int | None = None,
                   budget: int = 0) -> list[Generated]:
    """Generate for a batch of prompts (token id lists); return one Generated per prompt, in order. limit: stop
    after this many tokens (a warm-up), the batch still shaped for max_new_tokens. budget: bytes of KV cache and
    prefill the batch may hold (kv_budget; the caller planned its rows), which sets the rows prefilled at a time
    (0: all at once)."""
    B, L = len(prompts), max(len(p) for p in prompts)
    if llama_steps.supports(model):
        steps = llama_steps.LlamaSteps.for_batch(model, B, L + max_new_tokens, max_new_tokens, k, eos_ids)
    else:
        steps = HFSteps(model, B, max_new_tokens, k, eos_ids)
    out, gen = steps.out, None if sampling.greedy else steps.seed(generator)  # greedy rows draw nothing
    rows = kv_budget.prefill_rows(llama_steps.row_cost(model), budget, B, L) if budget else 0
    out.record(steps.prefill(*left_pad(prompts, pad_id, model.device), rows), sampling, gen)
    every, compact = check_policy(model.device)
    checked = 0  # tokens already searched for stop strings
    for step in range(1, min(max_new_tokens, limit or max_new_tokens)):
        if step % every == 0:
            if stop_strings:
                out.stop_strings(tokenizer, stop_strings, checked)
                checked = step
            going = (~out.done).nonzero()[:, 0]  # (B',) a host read: the rows still generating
            if not len(going):
                break
            if compact and len(going) < len(out.rows):  # drop finished rows from the batch and the cache
                steps.select(going)
        steps.advance(sampling)
    if stop_strings:
        out.stop_strings(tokenizer, stop_strings, checked)
    return [Generated(*g) for g in out.to_generated()]


def warm_up(model, prompts: list[list[int]], max_new_tokens: int, k: int, eos_ids: set[int], pad_id: int,
            budget: int = 0) -> None:
    """An untimed batch before the timed ones: on a GPU the first batch's own shape for a few steps (its graph is
    captured there; kernels load, cuBLAS and the allocator settle), on the CPU one prompt (nothing to capture)."""
    rows = prompts if model.device.type == "cuda" else prompts[-1:]
    generate_batch(model, rows, max_new_tokens, SamplingParams(0.0), k, eos_ids, pad_id, limit=WARM_UP_STEPS,
                   budget=budget)


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
        ti, tl = topk_rows(head_logits(model, h), k)
        results.append(Generated(list(r), ti.tolist(), tl.tolist()))
    return results
