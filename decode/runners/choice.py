"""runner_for: the runner the decoder uses for a model (decode.runners has them; decode.runners.graphs the GPU one)."""

from __future__ import annotations

import sys

from decode.models.feature_head import FeatureHead
from decode.runners.fast import FastLlama
from decode.runners.graphs import GraphLlama, graphs_enabled
from decode.runners.head import HeadRunner
from decode.runners.hf import HFRunner, model_devices


def runner_for(model, fast: bool = True, weights: str = "float32"):
    """The fastest runner that computes this model exactly: FastLlama when supported, else HFRunner.
    weights: float16 / int8 give FastLlama with weights stored so (drafts; see FastLlama) where the kernel is usable.

    On a CUDA device FastLlama's steps are CUDA graph replays (decode.runners.graphs.GraphLlama; SPECDISTILL_CUDA_GRAPHS=0
    keeps them eager). FastLlama copies the weights on the CPU (and times its matmul paths), so it is built once
    and kept on the model, and rebuilt only when a weight has changed since (a training step bumps the parameters' version
    counters). A model spread over several devices takes HFRunner (one line on stderr says so).
    """
    if isinstance(model, (HFRunner, FastLlama, HeadRunner)):
        return model
    if isinstance(model, FeatureHead):
        return HeadRunner(model)
    if not (fast and FastLlama.supports(model)):
        _say_why_hf(model)
        return HFRunner(model)
    slots = model.__dict__.setdefault("_specdistill_fast", {})  # {weights: (key, runner)}: every kind kept
    if model.device.type != "cpu":
        weights = "float32"  # rounded weights are a CPU kernel's (FastLlama ignores them elsewhere): one runner
    cached = slots.get(weights)
    if cached is None or cached[0] != _param_key(model):
        runner = GraphLlama(model) if graphs_enabled(model.device) else FastLlama(model, weights)
        cached = slots[weights] = (_param_key(model), runner)  # after building: GraphLlama re-points parameters
    return cached[1]


def _param_key(model) -> tuple:
    """Where each parameter lives and how often it was written (a training step bumps the version counters)."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _say_why_hf(model) -> None:
    """One line, once per model, when a llama-family model takes the HF runner only because a device map spread
    it over several devices (FastLlama keeps every layer on one)."""
    devices = model_devices(model)
    if len(devices) > 1 and FastLlama.supports_config(model.config) and not model.__dict__.get("_specdistill_told"):
        model._specdistill_told = True
        print(f"specdistill: the model is spread over {', '.join(sorted(devices))} (device map): it runs on the HF "
              "runner (FastLlama needs one device)", file=sys.stderr)
