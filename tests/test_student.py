"""The draft as training sees it (distill/train/student.py): the model's own logits at the trained positions,
Gemma2's final soft-capping included, and a loss computed over chunks of positions."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

from distill.train import losses
from distill.train.student import Student, chunk_rows


def _gemma2(cap: float | None) -> Gemma2ForCausalLM:
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=16, sliding_window=8, final_logit_softcapping=cap,
                          initializer_range=0.5, attn_implementation="eager")
    return Gemma2ForCausalLM(config).eval()


def _batch(vocab: int, b: int = 2, t: int = 12):
    ids = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 9:] = 0
    sel = torch.tensor([2, 3, 4, 5, 6, t + 4, t + 5, t + 8])  # trained positions, flat over B*T
    return ids, mask, sel


@torch.no_grad()
def test_gemma2_logits_are_the_models_own_soft_capped_logits():
    model = _gemma2(cap=2.0)  # a low cap, so it bites: raw logits reach well past it
    ids, mask, sel = _batch(300)
    want = model(input_ids=ids, attention_mask=mask).logits.flatten(0, 1)[sel]  # (N, V)
    got = Student(model)(ids, mask, sel)
    raw = model.get_output_embeddings()(model.model(input_ids=ids, attention_mask=mask).last_hidden_state).flatten(0, 1)[sel]
    assert (raw - want).abs().max() > 0.5  # what calling the head directly used to give
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(Student(model)(ids, mask, sel, argmax=True), want.argmax(-1))


@torch.no_grad()
def test_without_soft_capping_the_logits_are_the_heads():
    model = _gemma2(cap=None)
    ids, mask, sel = _batch(300)
    want = model(input_ids=ids, attention_mask=mask).logits.flatten(0, 1)[sel]
    torch.testing.assert_close(Student(model)(ids, mask, sel), want, rtol=1e-5, atol=1e-5)


def test_the_training_loss_is_computed_in_chunks_of_positions_with_the_unchunked_value():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        rows_by_vocab = 0  # largest leading dim of a (rows, V) tensor made

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for x in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[1] in (V, V + 1):
                    self.rows_by_vocab = max(self.rows_by_vocab, x.shape[0])
            return out

    V = 1000
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    ids = torch.randint(0, V, (4, 64))
    mask = torch.ones_like(ids)
    sel = torch.arange(4 * 64)  # N = 256 positions
    targets = {"topk_ids": torch.randint(0, V, (256, 4)), "topk_logprobs": torch.log_softmax(torch.randn(256, 4), -1) - 1,
               "labels": torch.randint(0, V, (256,))}
    weights = {"fkl": 1.0, "ce": 0.5}
    chunk_bytes = 32 * 4 * V  # 32 positions of float32 logits
    assert chunk_rows(V, chunk_bytes) == 32
    student = Student(model, weights, chunk_bytes=chunk_bytes)
    with Largest() as seen:
        loss, parts = student(ids, mask, sel, targets=targets)
        loss.backward()
    assert 0 < seen.rows_by_vocab <= 32  # the old Student made (256, V) logits
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want, _ = losses.combined_loss(student(ids, mask, sel), targets["topk_ids"], targets["topk_logprobs"],
                                   targets["labels"], torch.ones(256, dtype=torch.bool), weights)
    want.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-7)


class _SeesPads(torch.nn.Module):
    """Not causal: every position adds the mean of the positions its mask lets in (as a prefix LM's encoder does)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 4)

    def get_input_embeddings(self):
        return self.emb

    @property
    def base_model(self):
        return self

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        x = self.emb(input_ids)
        m = (torch.ones_like(input_ids) if attention_mask is None else attention_mask)[..., None].float()
        return SimpleNamespace(last_hidden_state=x + (x * m).sum(1, keepdim=True) / m.sum(1, keepdim=True))


def test_the_padding_mask_is_dropped_only_where_pads_change_no_real_position():
    """Right padding is invisible to a causal decoder's real positions: the Student passes attention_mask=None
    (transformers' mask builder then reads nothing from the device), with the same logits at the trained
    positions; a model whose positions see the pads keeps its mask."""
    from distill.train.student import pads_invisible

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    seen = []
    model.model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs.get("attention_mask")),
                                          with_kwargs=True)
    student = Student(model)
    assert not student.needs_mask and pads_invisible(model)
    ids, mask, sel = _batch(300)
    seen.clear()
    with torch.no_grad():
        got = student(ids, mask, sel)
        want = model(input_ids=ids, attention_mask=mask).logits.flatten(0, 1)[sel]
    assert seen[0] is None and seen[1] is mask
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not pads_invisible(_SeesPads())
