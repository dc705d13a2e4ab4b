"""What one bench run is: BenchConfig (the decoding knobs and the run's), and what a draft allows."""

from __future__ import annotations

from dataclasses import dataclass, field

from decode.drafting.parallel import mask_token
from decode.errors import UserError
from decode.models.feature_head import FeatureHead
from decode.models.targets import (
    check_load_format,
    load_format_field,
    parse_dtype,
)
from decode.options import DecodeOptions


@dataclass
class BenchConfig(DecodeOptions):
    """The decoding knobs (DecodeOptions: γ, schedule, lookup, tree nodes, draft weights, sampling) and the run's."""

    target: str = field(default="default", metadata={"help": "target: default, an HF folder, a Hub id or a .gguf file"})
    draft: str = field(default="layers:0,1,28,29", metadata={"help": "draft folder, `default` (the target itself) or "
                                                                     "layers:I,J,... (cut from the target)"})
    prompts: str = field(default="distill/data/heldout.jsonl", metadata={"help": "JSONL prompt file"})
    out: str | None = field(default=None, metadata={"help": "write the result JSON here too"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per prompt"})
    seed: int = field(default=0, metadata={"help": "sampling seed (prompt i uses seed + i)"})
    limit: int = field(default=0, metadata={"help": "first N prompts only (0 = all)"})
    device: str = field(default="auto", metadata={"help": "auto (CUDA when present: a target too large for one GPU "
                                                          "is spread over all; else CPU) | cpu | cuda[:N]"})
    dtype: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | float16"})
    hf_assisted: bool = field(default=True, metadata={"help": "also time transformers' assisted generation"})
    hf_static: bool = field(default=True, metadata={"help": "on a GPU, also time transformers' generate with a static "
                                                           "cache, compiled (its warm-up compiles: minutes)"})
    chat_template: bool = field(default=True, metadata={"help": "apply the tokenizer's chat template"})
    load_format: str = load_format_field()

    def __post_init__(self):
        super().__post_init__()
        check_load_format(self.load_format)
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.limit < 0:
            raise UserError(f"--limit must be >= 0 (the first N prompts; 0 = all), got {self.limit}")
        parse_dtype(self.dtype)


def is_head(draft) -> bool:
    """A loaded draft (decode.models.targets.Draft) that is a feature head."""
    return draft is not None and isinstance(draft.model, FeatureHead)


def is_parallel(draft) -> bool:
    """A loaded draft that drafts in parallel from mask tokens (decode.drafting.parallel)."""
    return draft is not None and not is_head(draft) and mask_token(getattr(draft.model, "config", None)) is not None


def draft_kind(draft) -> str | None:
    """feature_head | parallel | other_tokenizer | standalone (None without a draft): the result's `draft_kind`."""
    return None if draft is None else "feature_head" if is_head(draft) else "parallel" if is_parallel(draft) else \
        "other_tokenizer" if draft.other is not None else "standalone"


def check_head_options(draft, cfg: DecodeOptions, name: str) -> None:
    """A feature head runs with its own weights: --draft-weights is for standalone drafts."""
    if not is_head(draft):
        return
    if cfg.draft_weights != DecodeOptions.draft_weights:
        raise UserError(f"{name} is a feature head: it runs with its own weights; --draft-weights {cfg.draft_weights} "
                        f"is for standalone (FastLlama) drafts, use --draft-weights {DecodeOptions.draft_weights}")


def hf_skip_reason(draft, cfg: DecodeOptions) -> str | None:
    """Why transformers' assisted generation cannot run this draft at these settings (None: it can)."""
    if draft is None:
        return "no draft"
    if is_head(draft):
        return ("a feature head (EAGLE-3 style) drafts from the target's hidden states; transformers' assisted "
                "generation takes only a standalone model")
    if is_parallel(draft):
        return ("a parallel draft proposes a whole round from mask tokens in one forward; transformers' assisted "
                "generation runs a draft as a chain")
    if draft.vocab_map is not None:
        return ("a reduced-vocabulary draft speaks other token ids than the target; transformers' assisted generation "
                "needs the target's")
    if cfg.tree_nodes:
        return "transformers' assisted generation verifies a chain, not a token tree"
    return None
