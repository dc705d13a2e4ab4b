"""Any HF causal LM as a decoder runner (a DynamicCache; also a model spread over several GPUs by a device
map), and what the other runners ask of a model's config and devices.

    HFRunner(model).new_cache(max_len) -> TreeCache; .forward(ids, cache, keep[, tree]) -> (keep, V) logits
    cache_arg(model)       the forward() keyword of the K/V cache in this transformers
    rope_type, sliding_window, model_devices   what a config or model holds
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

STATEFUL_ROPE = ("dynamic", "longrope")  # RoPE types whose frequencies depend on the sequence length (HFRunner)


def rope_type(config) -> str:
    """The RoPE type (transformers 5 calls the field rope_parameters; older configs rope_scaling)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else "default"


def sliding_window(config) -> int | None:
    """The attention window of a model that has one in effect (every layer or some), else None."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(c, "use_sliding_window", True) is False:
        return None
    return getattr(c, "sliding_window", None) or None


def model_devices(model) -> set[str]:
    """Every device holding one of the model's parameters (several when a device map spread it)."""
    return {str(p.device) for p in model.parameters()}


class HFRunner:

    def __init__(self, model):
        self.model, self.config, self.device = model, model.config, model.device
        self.cache_arg = cache_arg(model)
        self.capture, self.features = (), None

    def new_cache(self, max_len: int):
        # no config: a config-built cache gives sliding-window layers that cannot be cropped (rolled back)
        # once past the window; the model applies its window through the attention mask anyway
        return TreeCache()

    def forward(self, ids: list[int], cache, keep: int, tree=None) -> torch.Tensor:
        x = torch.tensor([ids], device=self.device)
        kw = {}
        if tree is not None:  # the model's own 4D-mask path: an additive float mask, returned by HF as given
            positions, mask = tree
            bias = torch.zeros(mask.shape, dtype=self.model.dtype, device=self.device)
            kw = {"position_ids": positions[None].to(self.device),
                  "attention_mask": bias.masked_fill_(~mask.to(self.device), torch.finfo(bias.dtype).min)[None, None]}
        out = self.model(input_ids=x, **{self.cache_arg: cache}, use_cache=True, logits_to_keep=keep,
                         output_hidden_states=bool(self.capture), **kw)
        if self.capture:  # (n, len(capture) * H), on the first device like the logits
            self.features = torch.cat([out.hidden_states[j][0].to(self.device) for j in self.capture], -1)
        # a model spread by a device map returns logits on its last GPU; the decoder and the draft work on the
        # first (self.device, where the inputs go): move the (keep, V) rows there (a no-op on one device)
        return out.logits[0].to(self.device)


def cache_arg(model) -> str:
    """The forward() keyword of the K/V cache: `cache` from transformers 5.24 on, where `past_key_values` is
    deprecated (a warning at every call); `past_key_values` before, and for models that still take it."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class TreeCache(DynamicCache):
    """HF's DynamicCache with keep(): an accepted tree path's entries (gathered per layer) and nothing after."""

    def keep(self, start: int, rows: list[int]) -> None:
        for layer in self.layers:
            if getattr(layer, "is_initialized", False):
                idx = torch.tensor(rows, dtype=torch.long, device=layer.keys.device) + start
                layer.keys = torch.cat([layer.keys[:, :, :start], layer.keys[:, :, idx]], 2)
                layer.values = torch.cat([layer.values[:, :, :start], layer.values[:, :, idx]], 2)
