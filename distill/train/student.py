"""The draft as training sees it: the head only at the positions that are trained, run in chunks of positions."""

from __future__ import annotations

import torch

from distill.train import losses

CHUNK_BYTES = 256 * 2**20  # float32 logits of one chunk of positions; the loss keeps a few tensors of this size


def final_logits(config, z: torch.Tensor) -> torch.Tensor:
    """The model's own last step after its output layer: Gemma2's final_logit_softcapping, tanh(z / cap) * cap
    (as transformers' forward computes it), which code that calls the head directly would otherwise skip."""
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        z = torch.tanh(z / cap) * cap
    return z


def chunk_rows(vocab_size: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Positions per chunk: (rows, V) float32 logits of about chunk_bytes."""
    return max(1, chunk_bytes // (4 * vocab_size))


class Student(torch.nn.Module):
    """The draft, computing the head only at the positions that are trained, `sel` (N,) flat indices into B*T.

    forward(input_ids, attention_mask, sel) -> (N, V) logits; with targets={topk_ids, topk_logprobs, labels} ->
    (loss, parts) of losses.chunked_loss; with argmax=True -> (N,) argmax ids. The loss and the argmax run the head
    over chunks of positions, so no (N, V) tensor exists: at a 152k vocabulary a micro-batch of 8k positions
    would need 5 GB per float32 copy. Skipping the head at prompt positions saves most of a large head's cost.
    Wrapping (rather than calling submodules from outside) keeps DDP/DeepSpeed hooks on the forward path, which is
    why the loss is computed inside forward.
    """

    def __init__(self, model, weights: dict | None = None, jsd_beta: float = 0.5, chunk_bytes: int = CHUNK_BYTES):
        super().__init__()
        self.model = model
        self.weights, self.jsd_beta, self.chunk_bytes = weights or {"fkl": 1.0}, jsd_beta, chunk_bytes

    def _base(self):
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    def compile_layers(self) -> None:
        """torch.compile the decoder stack in place (nn.Module.compile: the state dict keeps its keys, so
        checkpoints and exports do not change); the head and the chunked loss stay eager."""
        self._base().base_model.compile()

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(n, H) last hidden states -> (n, V_draft) logits, as the model's forward would give them."""
        base = self._base()
        return final_logits(base.config, base.get_output_embeddings()(h))

    def forward(self, input_ids, attention_mask, sel, targets: dict | None = None, argmax: bool = False):
        base = self._base()
        h = base.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        h = h.flatten(0, 1)[sel]  # (N, H)
        rows = chunk_rows(base.get_output_embeddings().weight.shape[0], self.chunk_bytes)
        if targets is not None:
            mask = torch.ones(len(sel), dtype=torch.bool, device=h.device)
            return losses.chunked_loss(h, self.logits, targets.get("topk_ids"), targets.get("topk_logprobs"),
                                       targets.get("labels"), mask, self.weights, self.jsd_beta, rows)
        if argmax:
            return torch.cat([self.logits(h[s: s + rows]).argmax(-1) for s in range(0, len(h), rows)])  # (N,)
        return self.logits(h)  # (N, V_draft)
