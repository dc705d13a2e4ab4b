"""The bundled speculative decoder: torch + transformers only (never distill/, accelerate, deepspeed, wandb)."""

from decode.options import DecodeOptions
from decode.sampling import SamplingParams
from decode.speculative import Stats, accept, accept_greedy, accept_sampled, generate, propose, verify

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
