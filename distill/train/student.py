"""The draft as training sees it: logits only at the positions that are trained."""

from __future__ import annotations

import torch


class Student(torch.nn.Module):
    """The draft, returning logits only at the positions that are trained: (N, V) for `sel` (N,) flat indices.

    Skipping the head at prompt positions saves most of a 49k-vocabulary head's cost. Wrapping (rather than
    calling submodules from outside) keeps DDP/DeepSpeed hooks on the forward path.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, sel):
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        h = base.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return base.get_output_embeddings()(h.flatten(0, 1)[sel])  # (N, V_draft)
