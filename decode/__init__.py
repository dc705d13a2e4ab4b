"""The bundled speculative decoder: torch + transformers only (never distill/, accelerate, deepspeed, wandb)."""

from decode.speculative import Stats, accept, accept_greedy, accept_sampled, generate, propose, verify
from decode.sampling import SamplingParams

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
