"""How many prompts a collection batch holds: a memory budget for the KV cache and the prefill, and batches planned
within it. Everything but auto_budget() is a pure function of numbers, so the CPU tests check the plan the GPU uses.

A batch of B rows whose longest prompt has L tokens, generating N new ones, holds for its whole life
    B * kv_row(L + N)          K and V of every layer at capacity(L + N) positions (+ the scratch columns)
and for a moment, while its prompts run through the model (llama_steps.LlamaSteps.prefill, `rows` at a time)
    rows * prefill(L)          their DynamicCache (K/V of L positions) and one layer's activations a token, plus
                               the (rows, 1, L, L) boolean padding mask of transformers' attention (below
                               ROW_PREFILL tokens: longer prompts prefill one row at a time, unmasked)
The plan (plan_batches) gives each batch of a length-sorted list the most rows, up to a cap, for which both fit in
the budget with at least one prompt prefilled at a time; the prefill then takes as many rows at a time as the
budget left beside the KV buffers holds (prefill_rows). Only one batch's buffers live at a time
(llama_steps.for_batch frees the others), so a collection never holds more than the budget: an 8K-token prompt
gets fewer rows, not an out-of-memory error.

auto_budget: AUTO_SHARE of the memory free once the target is loaded (CUDA: torch.cuda.mem_get_info; CPU: psutil's
available memory); the rest is for the logits, the top-k buffers, the captured graphs' temporaries and the
allocator's slack. AUTO_ROWS is the cap when --batch-size is 0 (auto).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decode.errors import UserError

AUTO_SHARE = {"cuda": 0.8, "cpu": 0.5}  # of free memory, for the KV cache and the prefill
AUTO_ROWS = {"cuda": 256, "cpu": 64}  # rows a batch at most (--batch-size 0): a GPU step is weight-bound up to ~256
GB = 2**30


@dataclass(frozen=True)
class RowCost:
    """Bytes a row costs. kv_position: K and V of every layer at one position. act_token: one layer's activations
    for one prompt token in the prefill. mask_byte: bytes a padding-mask entry (prompts shorter than mask_below
    prefill padded, under a (rows, 1, L, L) mask; longer ones one row at a time, unmasked). scratch: buffer
    columns past capacity. round_to: capacity's granularity (1: exact)."""

    kv_position: int
    act_token: int
    mask_byte: int = 1
    scratch: int = 0
    round_to: int = 1
    mask_below: int = 1024

    def capacity(self, positions: int) -> int:
        return -(-positions // self.round_to) * self.round_to

    def kv_row(self, positions: int) -> int:
        return self.kv_position * (self.capacity(positions) + self.scratch)

    def prefill(self, prompt_len: int) -> int:
        """One row's prefill temporaries at a prompt of prompt_len tokens."""
        mask = prompt_len * self.mask_byte if prompt_len < self.mask_below else 0
        return prompt_len * (self.kv_position + self.act_token + mask)


def cost_of(config, dtype: torch.dtype, scratch: int = 0, round_to: int = 1, mask_below: int = 1024) -> RowCost:
    """A model config's RowCost in `dtype` (any decoder config transformers maps onto num_hidden_layers etc.)."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    ffn = getattr(c, "intermediate_size", None) or 4 * c.hidden_size
    size = torch.finfo(dtype).bits // 8
    kv_dim = kv_heads * head_dim
    # a layer's widest moment: h, its norm, q|k|v, the attention output, gate|up and their product
    act = (3 * c.hidden_size + heads * head_dim + 2 * kv_dim + 3 * ffn) * size
    return RowCost(2 * c.num_hidden_layers * kv_dim * size, act, 1, scratch, round_to, mask_below)


def rows_that_fit(cost: RowCost, budget: int, prompt_len: int, new_tokens: int, cap: int) -> int:
    """The most rows (<= cap) whose KV buffers at prompt_len + new_tokens, and one row's prefill, fit in budget."""
    room = budget - cost.prefill(prompt_len)
    return max(0, min(cap, room // cost.kv_row(prompt_len + new_tokens)))


def prefill_rows(cost: RowCost, budget: int, rows: int, prompt_len: int) -> int:
    """Rows a batch of `rows` prefills at a time: as many as the budget left beside its KV buffers holds (>= 1)."""
    kv = rows * cost.kv_row(prompt_len)  # a lower bound on the buffers, whatever the new tokens
    return max(1, min(rows, (budget - kv) // max(cost.prefill(prompt_len), 1)))


def plan_batches(lengths: list[int], new_tokens: int, cap: int, cost: RowCost, budget: int) -> list[int]:
    """Batch sizes for prompts of these lengths, longest first (collection sorts them so): each batch the most rows
    that fit at its first (longest) prompt. A prompt that does not fit alone is an error naming the fixes."""
    sizes, i = [], 0
    while i < len(lengths):
        n = rows_that_fit(cost, budget, lengths[i], new_tokens, cap)
        if n == 0:
            need = cost.kv_row(lengths[i] + new_tokens) + cost.prefill(lengths[i])
            raise UserError(f"a prompt of {lengths[i]} tokens + {new_tokens} new ones needs {size(need)} of KV cache "
                            f"and prefill memory; the budget is {size(budget)}: raise --kv-budget-gb, lower "
                            "--max-new-tokens, or drop the longest prompts")
        n = min(n, len(lengths) - i)
        sizes.append(n)
        i += n
    return sizes


def size(n: int) -> str:
    for unit, scale in (("GB", GB), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def auto_budget(device: torch.device, gb: float = 0.0) -> int:
    """Bytes of KV cache and prefill a collection may hold on `device`: `gb` when given, else AUTO_SHARE of the
    memory free now (call it once the target is loaded)."""
    if gb > 0:
        return int(gb * GB)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        import psutil

        free = psutil.virtual_memory().available
    return int(AUTO_SHARE.get(device.type, AUTO_SHARE["cpu"]) * free)


def auto_rows(device: torch.device, batch_size: int) -> int:
    """--batch-size, or AUTO_ROWS for this device where it is 0 (auto)."""
    return batch_size or AUTO_ROWS.get(device.type, AUTO_ROWS["cpu"])


def batches(mine: list[dict], size: int, plan=None):
    """(batch, its offset in `mine`): batches that never mix first and sampled answers (one temperature per
    batch), of plan(their prompt lengths) rows each (plan_batches), else of `size`; the offset seeds the
    batch's sampling."""
    first = [r for r in mine if r["sample"] == 0]
    for offset, group in ((0, first), (len(first), [r for r in mine if r["sample"] > 0])):
        sizes = plan([len(r["prompt_ids"]) for r in group]) if plan else [size] * -(-len(group) // size)
        start = 0
        for n in sizes:
            yield group[start: start + n], offset + start
            start += n
