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


@torch.no_grad()
def pads_invisible(model) -> bool:
    """Whether `model` (an HF causal LM, or its base) gives the same hidden states at the real positions of a
    right-padded batch without the padding mask: then the trainer passes attention_mask=None, and transformers'
    mask builder neither reads the mask on the host (masking_utils: `fast_all(padding_mask)`, a device sync each
    forward) nor builds a (B, 1, T, T) mask (SDPA takes its causal kernel). True for causal decoders whose
    positions and layers never mix a later position into an earlier one (every tests/architectures.py target);
    measured on a small batch rather than assumed from the model type, so a model that reads the mask otherwise
    (positions from it, prefix attention) keeps it. Runs once, in eval mode, with the model's weights."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(base, "base_model", base)
    p = next(base.parameters())
    vocab = base.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (2, 8), generator=torch.Generator().manual_seed(0)).to(p.device)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # right padding, as batches.collate pads
    was_training = base.training
    base.eval()
    try:
        a = body(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        b = body(input_ids=ids, attention_mask=None).last_hidden_state.float()
    finally:
        base.train(was_training)
    real = mask.bool()
    tol = 1e-3 if p.dtype == torch.float32 else 5e-2  # kernel choice (masked vs causal SDPA) may round differently
    return torch.allclose(a[real], b[real], rtol=tol, atol=tol * float(a[real].abs().max()))


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
        self.needs_mask = not pads_invisible(model)  # False: forward passes attention_mask=None (no host read)

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
        """input_ids, attention_mask (B, T), right-padded (batches.collate); sel (N,) real positions only."""
        base = self._base()
        mask = attention_mask if self.needs_mask else None  # pads never reach a position in sel (pads_invisible)
        h = base.base_model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, T, H)
        h = h.flatten(0, 1)[sel]  # (N, H)
        rows = chunk_rows(base.get_output_embeddings().weight.shape[0], self.chunk_bytes)
        if targets is not None:
            mask = torch.ones(len(sel), dtype=torch.bool, device=h.device)
            return losses.chunked_loss(h, self.logits, targets.get("topk_ids"), targets.get("topk_logprobs"),
                                       targets.get("labels"), mask, self.weights, self.jsd_beta, rows)
        if argmax:
            return torch.cat([self.logits(h[s: s + rows]).argmax(-1) for s in range(0, len(h), rows)])  # (N,)
        return self.logits(h)  # (N, V_draft)
