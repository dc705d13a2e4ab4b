"""The bundled speculative decoder: torch + transformers only (never distill/, accelerate, deepspeed, wandb)."""

from decode.drafting.sampling import SamplingParams
from decode.drafting.speculative import (
    accept,
    accept_greedy,
    accept_sampled,
    generate,
    propose,
    verify,
)
from decode.drafting.stats import Stats
from decode.options import DecodeOptions

__all__ = [
    "DecodeOptions",
    "SamplingParams",
    "Stats",
    "accept",
    "accept_greedy",
    "accept_sampled",
    "generate",
    "propose",
    "verify",
]
