"""distill/publish/servable.py: a reduced-vocabulary draft expanded to the target's vocabulary computes the same
proposals, never proposes an out-of-vocabulary token, and runs as transformers' assistant_model.

Tiny random models (conftest) for the properties and the folder round trip; the real default target (slow) for
real prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, PhiConfig, PhiForCausalLM

from decode.models.draft_folder import VOCAB_MAP_FILE, VocabMap
from decode.models.layer_cut import draft_from_layers
from distill.publish import servable
from distill.train.designs import reduce_vocab

V = 97
D2T = [5, 0, 3, 17, 96, 40, 41, 42, 60, 61, 62, 63, 70, 80, 90, 11]  # 16 of 97 ids, not sorted, 0 not first


# --- the two matrices


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_oov_logit_is_the_mean_of_the_kept_logits_and_never_wins(dtype):
    torch.manual_seed(0)
    vm = VocabMap(D2T, V)
    head, bias = torch.randn(len(D2T), 32).to(dtype), torch.randn(len(D2T)).to(dtype)
    for b in (None, bias):
        w, eb = servable.expand_head(head, vm, b)
        assert w.shape == (V, 32) and (eb is None) == (b is None)
        h = torch.randn(500, 32).to(dtype)  # (T, H) hidden states
        z = (h.float() @ w.float().T + (0 if eb is None else eb.float()))  # (T, V)
        kept = z[:, vm.d2t]  # (T, N): the reduced draft's logits, in its order
        ref = h.float() @ head.float().T + (0 if b is None else b.float())
        assert torch.allclose(kept, ref)  # kept rows in place
        oov = z[:, vm.t2d < 0]  # (T, V - N), all equal: one mean row
        tol = 1e-5 if dtype == torch.float32 else 0.05  # the mean row is rounded to the dtype
        assert torch.allclose(oov, kept.mean(-1, keepdim=True).expand_as(oov), atol=tol)
        assert (oov.max(-1).values < kept.max(-1).values).all()
        assert torch.equal(vm.targets(kept.argmax(-1)), z.argmax(-1))  # argmax is always a kept id


def test_all_equal_kept_logits_are_the_only_tie():
    """The documented exception: when all N kept logits are equal, an OOV logit equals them (a tie, not a win)."""
    vm = VocabMap(D2T, V)
    w, _ = servable.expand_head(torch.ones(len(D2T), 8), vm)
    z = torch.randn(8) @ w.T
    assert torch.allclose(z, z[0].expand(V))


def test_embedding_reads_oov_ids_as_draft_id_0():
    vm = VocabMap(D2T, V)
    emb = torch.randn(len(D2T), 8)
    big = servable.expand_embedding(emb, vm)
    ids = torch.arange(V)
    assert torch.equal(big[ids], emb[vm.inputs(ids)])
    assert torch.equal(big[1], emb[0]) and torch.equal(big[3], emb[2])  # 1 is OOV -> row 0; 3 is draft id 2


# --- a folder round trip


def _reduced_draft(model, tmp_path, d2t):
    """A reduced-vocabulary draft folder of `model` (rows d2t kept, as training's reduce_vocab does)."""
    reduce_vocab(model, d2t)
    path = tmp_path / "reduced"
    model.save_pretrained(path)
    (path / VOCAB_MAP_FILE).write_text(json.dumps({"draft_to_target": d2t}))
    return path


def _expand(target, reduced_path, tmp_path):
    out = tmp_path / "expanded"
    out.mkdir()
    servable.expand_folder(reduced_path, out, target.config, target.generation_config)
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), out


@pytest.mark.parametrize("tied", [True, False])
def test_expanded_tiny_llama_proposes_what_the_reduced_one_does(tiny_llama, tmp_path, tied):
    target = tiny_llama(0, layers=3, tie_word_embeddings=tied, bos_token_id=5, eos_token_id=0, pad_token_id=0)
    reduced_path = _reduced_draft(draft_from_layers(target, [0, 2]), tmp_path, D2T)
    reduced = AutoModelForCausalLM.from_pretrained(reduced_path, dtype=torch.float32).eval()
    assert reduced.config.eos_token_id == 1  # training renumbers special ids into draft ids ...
    expanded, out = _expand(target, reduced_path, tmp_path)
    config = json.loads((out / "config.json").read_text())
    assert (config["eos_token_id"], config["bos_token_id"], config["tie_word_embeddings"]) == (0, 5, False)  # ... undone
    assert expanded.generation_config.eos_token_id == 0
    assert expanded.lm_head.weight.data_ptr() != expanded.model.embed_tokens.weight.data_ptr()
    torch.manual_seed(1)
    seqs = [torch.randint(0, V, (40,)).tolist() for _ in range(3)]  # mostly OOV context tokens
    ok, detail = servable.same_proposals(expanded, reduced, torch.tensor(D2T), seqs)
    assert ok, detail
    assert "same token at all 120 positions" in detail


def test_expanded_draft_is_a_lossless_transformers_assistant(tiny_llama, tmp_path):
    target = tiny_llama(0, layers=3, eos_token_id=None)
    d2t = list(range(0, V, 2))  # half the ids: the target's greedy path leaves the draft's vocabulary often
    reduced_path = _reduced_draft(draft_from_layers(target, [0, 2]), tmp_path, d2t)
    expanded, _ = _expand(target, reduced_path, tmp_path)
    expanded.generation_config.num_assistant_tokens = 3
    x = torch.tensor([[3, 14, 15, 92, 65]])
    greedy = dict(do_sample=False, max_new_tokens=30, attention_mask=torch.ones_like(x))
    assert torch.equal(target.generate(x, assistant_model=expanded, **greedy), target.generate(x, **greedy))


def test_head_bias_is_expanded_too(tmp_path):
    """Phi's head has a bias: the OOV bias is the mean bias, so the OOV logit is still the mean kept logit."""
    torch.manual_seed(0)
    target = PhiForCausalLM(PhiConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=128)).eval()
    with torch.no_grad():
        target.lm_head.bias.normal_(0, 3.0)  # a bias large enough to matter
    reduced_path = _reduced_draft(draft_from_layers(target, [0, 1]), tmp_path, D2T)
    reduced = AutoModelForCausalLM.from_pretrained(reduced_path, dtype=torch.float32).eval()
    expanded, _ = _expand(target, reduced_path, tmp_path)
    oov = VocabMap(D2T, V).t2d < 0
    assert torch.allclose(expanded.lm_head.bias[oov], reduced.lm_head.bias.mean().expand(int(oov.sum())))
    seqs = [torch.randint(0, V, (30,)).tolist() for _ in range(2)]
    ok, detail = servable.same_proposals(expanded, reduced, torch.tensor(D2T), seqs)
    assert ok, detail


# --- the real default target


@pytest.mark.slow
def test_expanded_default_target_draft_on_real_prompts(tmp_path):
    """SmolLM2-135M-Instruct, a draft of its layers 0 and 29 with the 8,192 lowest ids (+ the specials): on real
    prompts, expanded and reduced propose the same, and transformers' assisted generation stays lossless."""
    from decode.models.targets import load_target
    from decode.prompts import encode_prompt, read_prompts

    target, tok = load_target("default", "float32")
    d2t = sorted(set(range(8192)) | {tok.eos_token_id, tok.pad_token_id})
    reduced_path = _reduced_draft(draft_from_layers(target, [0, 29]), tmp_path, d2t)
    reduced = AutoModelForCausalLM.from_pretrained(reduced_path, dtype=torch.float32).eval()
    expanded, _ = _expand(target, reduced_path, tmp_path)
    expanded.generation_config.num_assistant_tokens = 3
    seqs = []
    for row in read_prompts(Path(__file__).resolve().parents[1] / "distill/data/heldout.jsonl")[:3]:
        x = torch.tensor([encode_prompt(tok, row)])
        greedy = dict(do_sample=False, max_new_tokens=24, attention_mask=torch.ones_like(x))
        ref = target.generate(x, **greedy)
        assert torch.equal(target.generate(x, assistant_model=expanded, **greedy), ref)
        seqs.append(ref[0].tolist())
    assert any(t >= 8192 and t not in d2t for s in seqs for t in s)  # OOV context tokens were read
    ok, detail = servable.same_proposals(expanded, reduced, torch.tensor(d2t), seqs)
    assert ok, detail
