"""A draft cut from the target: a model of the target's class with a chosen subset of its decoder layers.

`layers:0,1` as a --draft spec, and the `target_layers` draft design, both come from here.
"""

from __future__ import annotations

import copy

from transformers import AutoConfig, AutoModelForCausalLM

from decode.errors import UserError


def parse_layers(text: str, n_layers: int) -> list[int]:
    """'0,1,28,29' -> [0, 1, 28, 29], checked against the target's depth."""
    try:
        idx = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"layer list {text!r} must be comma-separated integers, e.g. layers:0,1,28,29") from None
    if not idx:
        raise UserError("layer list is empty; e.g. layers:0,1")
    bad = [i for i in idx if not 0 <= i < n_layers]
    if bad:
        raise UserError(f"layer indices {bad} out of range: the target has {n_layers} layers (0..{n_layers - 1})")
    if len(set(idx)) != len(idx):
        raise UserError(f"layer list {text!r} repeats an index")
    return idx


def draft_from_layers(target, layers: list[int]):
    """A draft of the target's class holding copies of the chosen target layers, embeddings, final norm and head.

    Built from a config with fewer layers and a renamed state dict (model.layers.{src} -> model.layers.{dst}),
    so every layer's cache index is right and the result is a plain HF model that saves and reloads.
    """
    config = AutoConfig.for_model(**target.config.to_dict())
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = [target.config.layer_types[i] for i in layers]
    draft = AutoModelForCausalLM.from_config(config, dtype=target.dtype)
    src = target.state_dict()
    dst = {}
    for key in draft.state_dict():
        parts = key.split(".")
        if "layers" in parts:
            i = parts.index("layers") + 1
            parts[i] = str(layers[int(parts[i])])
        dst[key] = src[".".join(parts)]
    draft.load_state_dict(dst, strict=True)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.to(target.device).eval()
