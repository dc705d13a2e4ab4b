"""A feature head (decode.models.feature_head) in the runner protocol, as decode.bench.latency times a draft's step."""
from __future__ import annotations

import torch

from decode.models.feature_head import FeatureHead, HeadCache


class HeadRunner:
    """A head as decode.bench.latency times a draft step: one position from its own last output (runner protocol)."""

    def __init__(self, head: FeatureHead):
        self.head, self.config, self.device = head, head.config, head.device

    def new_cache(self, max_len: int) -> HeadCache:
        return self.head.new_cache(max_len)

    def forward(self, ids: list[int], cache: HeadCache, keep: int) -> torch.Tensor:
        hid = torch.zeros(len(ids), self.config.hidden_size, dtype=self.head.dtype, device=self.device)
        return self.head.step(ids, hid, cache)[1][None]
