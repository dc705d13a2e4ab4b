"""The hand-built copy circuit (distill/train/copy_circuit.py): widening keeps the draft's function, the circuit
copies spans the draft alone cannot, training keeps its structural zeros, the widened draft saves, reloads
and stays lossless in the decoder, and impossible designs are refused.

Tiny Llama drafts here use head_dim 64 (the circuit's code needs 64 dims and 28 slowly-rotating RoPE slots).
"""

from __future__ import annotations

import random

import pytest
import torch

from decode.drafting.speculative import generate
from decode.errors import UserError
from decode.models.targets import load_draft
from decode.options import DecodeOptions
from distill.train import copy_circuit
from distill.train.designs import DraftDesign, build_draft

pytestmark = pytest.mark.usefixtures("torch_single_thread")

VOCAB = 97


@pytest.fixture(scope="module")
def draft(tiny_llama):
    # 2 layers, 2 query heads over 1 KV head, head_dim 64: the smallest shape the circuit fits
    return tiny_llama(seed=3, layers=2, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64)


def _seqs(n=6, length=40, seed=0):
    rng = random.Random(seed)
    return [[1] + [rng.randrange(2, VOCAB) for _ in range(length)] for _ in range(n)]  # every one starts with 1


def _span_copy(model, spans: int = 16, length: int = 12, seed: int = 1) -> float:
    """Top-1 agreement with the copy on the second showing of random spans (first token of it excluded)."""
    rng = random.Random(seed)
    hit = n = 0
    for _ in range(spans):
        span = [rng.randrange(2, VOCAB) for _ in range(length)]
        ids = torch.tensor([[1] + span + span])
        with torch.no_grad():
            pred = model(input_ids=ids).logits[0].argmax(-1)
        # position 1 + length + i holds span[i] (second showing); it predicts span[i + 1]
        got = pred[1 + length: 1 + 2 * length - 1]
        hit += int((got == torch.tensor(span[1:])).sum())
        n += length - 1
    return hit / n


def test_widening_keeps_the_function(draft):
    c = draft.config
    wide, _ = copy_circuit._widen(draft, 96, c.num_attention_heads + 2, c.num_key_value_heads + 1)
    ids = torch.tensor([_seqs(1)[0]])
    with torch.no_grad():
        a, b = draft(input_ids=ids).logits, wide(input_ids=ids).logits
    # equal up to float32 rounding (RMSNorm sums in float32; this fixture's activations reach ~100s)
    torch.testing.assert_close(a, b, atol=1e-4 * a.abs().max().item(), rtol=0)


@pytest.mark.parametrize("ngram", [1, 2])
def test_circuit_copies_spans_the_draft_alone_cannot(draft, ngram):
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1, ngram=ngram)
    assert wide.config.hidden_size > draft.config.hidden_size
    assert wide.config.hidden_size % wide.config.num_attention_heads == 0
    before, after = _span_copy(draft), _span_copy(wide)
    assert before < 0.15, before
    assert after > 0.8, after


def test_previous_token_head_attends_one_back(draft):
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1, ngram=2)
    wide.config._attn_implementation = "eager"
    ids = torch.tensor([_seqs(1, length=60, seed=5)[0]])
    with torch.no_grad():
        att = wide(input_ids=ids, output_attentions=True).attentions[0][0]  # (heads, T, T)
    nh = draft.config.num_attention_heads
    t = torch.arange(ids.shape[1])
    assert torch.equal(att[nh].argmax(-1)[1:], t[:-1])  # head nh: one back
    assert torch.equal(att[nh + 1].argmax(-1)[2:], t[:-2])  # head nh+1: two back (ngram 2)
    assert att[nh].max(-1).values[1:].min() > 0.99


def test_training_keeps_structural_zeros(draft):
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    zero = {n: (p.detach() == 0) & ~wide._copy_circuit_masks[n] for n, p in wide.named_parameters()
            if n in wide._copy_circuit_masks}
    assert copy_circuit.mask_gradients(wide) == len(wide._copy_circuit_masks)
    before = wide.model.layers[0].mlp.up_proj.weight.detach().clone()
    opt = torch.optim.AdamW(wide.parameters(), lr=1e-2, weight_decay=0.0)
    wide.train()
    for s in _seqs(3, seed=9):
        ids = torch.tensor([s])
        loss = torch.nn.functional.cross_entropy(wide(input_ids=ids).logits[0, :-1], ids[0, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
    p = dict(wide.named_parameters())
    moved = {n: int((p[n].detach()[z] != 0).sum()) for n, z in zero.items()}
    assert not any(moved.values()), moved
    assert not torch.equal(wide.model.layers[0].mlp.up_proj.weight.detach(), before)  # the rest does train


def test_a_reloaded_circuit_draft_trains_with_the_masks_it_was_built_with(draft, tmp_path):
    """--init pretrained: (an on-policy round) continues a saved draft: its masks are rebuilt from its weights and
    the final norm's private gain, which export calibrated, goes back to the 1 training runs with."""
    from transformers import AutoModelForCausalLM

    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    h = wide.config.copy_circuit["private"]
    with torch.no_grad():
        wide.model.layers[0].mlp.up_proj.weight[:, :h].add_(0.1)  # trained: the copied block moves, the zeros not
        wide.model.norm.weight[h:] = 2.5  # as export leaves it (calibrated)
    wide.save_pretrained(tmp_path / "d")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "d")
    assert not hasattr(back, "_copy_circuit_masks")
    assert copy_circuit.resume_training(back) and not copy_circuit.resume_training(back)  # once
    assert set(back._copy_circuit_masks) == set(wide._copy_circuit_masks)
    for name, m in wide._copy_circuit_masks.items():
        assert torch.equal(back._copy_circuit_masks[name], m), name
    assert torch.equal(back.model.norm.weight[h:], torch.ones_like(back.model.norm.weight[h:]))
    assert not copy_circuit.resume_training(draft)  # no circuit: nothing to do


def test_saved_circuit_draft_reloads_and_stays_lossless(draft, tiny_llama, tiny_tokenizer, tmp_path):
    target = tiny_llama(seed=3, layers=4, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    tok = tiny_tokenizer()
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    wide.save_pretrained(tmp_path / "d")
    tok.save_pretrained(tmp_path / "d")
    d = load_draft(str(tmp_path / "d"), target, tok)
    ids = torch.tensor([_seqs(1)[0]])
    with torch.no_grad():
        torch.testing.assert_close(d.model(input_ids=ids).logits, wide(input_ids=ids).logits)
    prompt = [1] + list(range(5, 25)) + list(range(5, 15))  # a repeat, so the circuit proposes copies
    want = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                           do_sample=False, max_new_tokens=24, pad_token_id=0)[0, len(prompt):].tolist()
    got, stats = generate(target, d.model, prompt, 24, DecodeOptions(gamma=3))
    assert got == want
    assert stats.proposed > 0


def test_decoder_fast_path_computes_the_circuit(draft):
    """The decoder's lean llama forward (biases, head_dim apart from hidden/heads, untied head) equals HF's."""
    from decode.runners.choice import runner_for
    from decode.runners.fast import FastLlama

    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    assert isinstance(runner_for(wide), FastLlama)
    ids = _seqs(1, length=30, seed=4)[0]
    runner = FastLlama(wide)
    cache = runner.new_cache(64)
    with torch.no_grad():
        ref = wide(input_ids=torch.tensor([ids])).logits[0]
    got = torch.cat([runner.forward(ids[:20], cache, 20), runner.forward(ids[20:], cache, len(ids) - 20)])
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


def test_impossible_designs_are_refused(draft, tiny_llama, tiny_tokenizer):
    target = tiny_llama(seed=3, layers=4, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    with pytest.raises(UserError, match="2 or more layers"):
        DraftDesign(layers=1, copy_circuit=True).check(target.config)
    with pytest.raises(UserError, match="collected data"):
        build_draft(DraftDesign(layers=2, copy_circuit=True), target, tiny_tokenizer(), sequences=None)
    small = tiny_llama(seed=0, layers=2)  # head_dim 8
    with pytest.raises(UserError, match="head_dim"):
        copy_circuit.add_copy_circuit(small, _seqs(), sink_id=1)


def test_train_config_refuses_lora_with_the_circuit():
    from distill.train import TrainConfig

    with pytest.raises(UserError, match="lora-r with --copy-circuit"):
        TrainConfig(copy_circuit=True, lora_r=4, init="pretrained:somewhere")


def test_build_draft_with_circuit_and_reduced_vocab(tiny_llama, tiny_tokenizer):
    target = tiny_llama(seed=3, layers=4, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    seqs = _seqs(8)
    d, vocab_map = build_draft(DraftDesign(layers=2, vocab=40, copy_circuit=True), target, tiny_tokenizer(), seqs)
    assert d.config.vocab_size == 40 and len(vocab_map) == 40
    assert hasattr(d, "_copy_circuit_masks")
    # the sink is the token every sequence starts with (id 1), in draft ids
    emb = d.get_input_embeddings().weight
    flag = emb[:, target.config.hidden_size + copy_circuit.CODE_DIMS:].abs().sum(-1)
    assert vocab_map[int(flag.argmax())] == 1


def test_calibrated_restores_the_boost_after_the_residual_grows(draft):
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1, ngram=2)
    seqs = _seqs()
    assert copy_circuit.output_gain(wide, seqs) == pytest.approx(1.0, abs=0.02)  # as built: nothing to resize
    h = draft.config.hidden_size
    with torch.no_grad():  # what training does to the copied layers: their output grows (here the last's, 30x)
        wide.model.layers[-1].self_attn.o_proj.weight[:h] *= 30
        wide.model.layers[-1].mlp.down_proj.weight[:h] *= 30
    before = wide.model.norm.weight.detach().clone()
    grown = _span_copy(wide)
    with copy_circuit.calibrated(wide, seqs) as gain:
        assert gain > 5, gain
        restored = _span_copy(wide)
    assert grown < 0.5 < 0.8 < restored, (grown, restored)
    assert torch.equal(wide.model.norm.weight, before)  # training continues on the uncalibrated weights
    # the reference scale travels in config.json, so a saved draft calibrates the same way
    assert set(wide.config.to_dict()["copy_circuit"]) == {"private", "r_final"}
    with copy_circuit.calibrated(draft, seqs) as none:  # a draft without the circuit: nothing to do
        assert none is None


# --- bf16 targets and Llama-3.x RoPE (issue 41) -------------------------------------------------------------------

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # rescales most of the fast pairs too


def test_circuit_builds_into_a_bf16_draft_with_grouped_query_attention(tiny_llama):
    """A bf16 target gives a bf16 cut: the circuit is built in float32 and handed back in bf16 (it wrote float32
    identities into bf16 weights and crashed: "Index put requires the source and destination dtypes match")."""
    draft = tiny_llama(seed=3, layers=2, hidden=64, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=64).to(torch.bfloat16)
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    assert wide.dtype == torch.bfloat16
    assert wide.config.num_attention_heads == 6 and wide.config.num_key_value_heads == 3  # one more KV group of 2
    assert wide.config.hidden_size % copy_circuit.ALIGN == 0 and wide.config.hidden_size % 6 == 0
    assert _span_copy(draft) < 0.15 < 0.8 < _span_copy(wide)


def test_circuit_reads_llama3_rope_frequencies_from_the_model(tiny_llama):
    """Llama-3.x RoPE: the circuit reads the frequencies the model applies (its rotary inv_freq), so its
    previous-token and induction heads work where the default formula's frequencies would be wrong."""
    draft = tiny_llama(seed=3, layers=2, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                       rope_parameters=dict(LLAMA3_ROPE))
    copy_circuit.check_architecture(draft.config)  # refused before: "copy_circuit assumes default RoPE"
    default = 1.0 / 10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    assert not torch.allclose(copy_circuit.rope_frequencies(draft)[:copy_circuit.PREV_PAIRS],
                              default[:copy_circuit.PREV_PAIRS])  # the fast pairs this test's rope rescales
    wide = copy_circuit.add_copy_circuit(draft, _seqs(), sink_id=1)
    wide.config._attn_implementation = "eager"
    ids = torch.tensor([_seqs(1, length=60, seed=5)[0]])
    with torch.no_grad():
        att = wide(input_ids=ids, output_attentions=True).attentions[0][0]  # (heads, T, T)
    t = torch.arange(ids.shape[1])
    assert torch.equal(att[2].argmax(-1)[1:], t[:-1])  # the previous-token head looks one back
    assert _span_copy(draft) < 0.15 < 0.8 < _span_copy(wide)


def test_widened_size_keeps_bf16_gemms_aligned():
    assert copy_circuit.widened_size(4096, 32 + 4) == 4320  # Llama-3.1-8B: 4284 before, not a multiple of 8
    assert copy_circuit.widened_size(576, 9 + 3) == 744  # the default target's draft, as measured


def test_rope_with_scaled_cos_sin_is_refused(tiny_llama):
    c = tiny_llama(seed=3, layers=2, hidden=64, num_attention_heads=2, num_key_value_heads=1, head_dim=64).config
    c.rope_parameters = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    with pytest.raises(UserError, match="fixed RoPE frequencies.*'dynamic'"):
        copy_circuit.check_architecture(c)
