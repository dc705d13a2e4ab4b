"""The bundled speculative decoder: torch + transformers only (never distill/, accelerate, deepspeed, wandb)."""

from decode.sampling import SamplingParams
from decode.speculative import Stats, accept, accept_greedy, accept_sampled, generate, propose, verify

__all__ = [
    "SamplingParams",
    "Stats",
    "accept",
    "accept_greedy",
    "accept_sampled",
    "generate",
    "propose",
    "verify",
]
