"""Draft construction (distill/train/designs.py): every init, the pruning importance ranking, reduced vocabularies,
freezing, impossible designs, and a reduced-vocabulary draft staying lossless in the bundled decoder.

Most tests cut drafts from conftest's tiny 97-token models (4 heads over 2 KV heads, head_dim 8); the
reduced-vocabulary decode test also uses the session's tiny target with the real 49,152-token tokenizer.
"""

from __future__ import annotations

import random

import pytest
import torch

from decode.drafting.speculative import generate
from decode.errors import UserError
from decode.options import DecodeOptions
from distill.train.designs import DraftDesign, apply_freeze, build_draft, describe, frequent_tokens
from distill.train.prune import importance, prune

pytestmark = pytest.mark.usefixtures("torch_single_thread")

HD = 8  # head_dim of conftest's tiny models: hidden 32 / 4 heads


@pytest.fixture(scope="module")
def tok(tiny_tokenizer):
    return tiny_tokenizer()  # 97 tokens, EOS = id 1, no PAD


@pytest.fixture(scope="module")
def target4(tiny_llama):
    return tiny_llama(seed=0, layers=4)


def _seqs(n: int = 8, length: int = 24, vocab: int = 97, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(n)]


def _match_rows(src: torch.Tensor, dst: torch.Tensor) -> list[int]:
    """For each row of dst, the index of the identical row of src (fails if there is none)."""
    out = []
    for row in dst:
        hits = [i for i in range(len(src)) if torch.equal(src[i], row)]
        assert hits, "a draft row is not a copy of any target row"
        out.append(hits[0])
    return out


def _layer_key(key: str, layers: list[int]) -> str:
    parts = key.split(".")
    if "layers" in parts:
        i = parts.index("layers") + 1
        parts[i] = str(layers[int(parts[i])])
    return ".".join(parts)


def _expected_shapes(
    V: int, H: int, inter: int, nh: int, nkv: int, n_layers: int, bias: bool = False
) -> dict:
    shapes = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for d in range(n_layers):
        q = f"model.layers.{d}."
        shapes.update(
            {
                q + "input_layernorm.weight": (H,),
                q + "post_attention_layernorm.weight": (H,),
                q + "self_attn.q_proj.weight": (nh * HD, H),
                q + "self_attn.k_proj.weight": (nkv * HD, H),
                q + "self_attn.v_proj.weight": (nkv * HD, H),
                q + "self_attn.o_proj.weight": (H, nh * HD),
                q + "mlp.gate_proj.weight": (inter, H),
                q + "mlp.up_proj.weight": (inter, H),
                q + "mlp.down_proj.weight": (H, inter),
            }
        )
        if bias:
            shapes.update(
                {
                    q + "self_attn.q_proj.bias": (nh * HD,),
                    q + "self_attn.k_proj.bias": (nkv * HD,),
                    q + "self_attn.v_proj.bias": (nkv * HD,),
                }
            )
    return shapes


# --- init: target_layers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers, expected", [(2, [0, 1]), ([1, 3], [1, 3]), (3, [0, 1, 2]), (1, [0])])
def test_target_layers_copies_the_chosen_layers(target4, tok, layers, expected):
    draft, vocab_map = build_draft(DraftDesign(layers=layers, init="target_layers"), target4, tok)
    assert vocab_map is None
    assert type(draft) is type(target4) and draft.config.num_hidden_layers == len(expected)
    src = target4.state_dict()
    for key, value in draft.state_dict().items():  # embeddings, final norm and head too
        assert torch.equal(value, src[_layer_key(key, expected)]), key
    ids = torch.tensor([[5, 9, 2, 40]])
    with torch.no_grad():  # a plain HF model that runs
        assert draft(ids).logits.shape == (1, 4, 97)


# --- init: prune ------------------------------------------------------------------------------------------------

H_DOM = [3, 17, 30]  # hidden channels made dominant
F_DOM = [5, 40, 41]  # FFN channels made dominant (every layer)
KV_DOM = {0: 1, 1: 0}  # layer -> KV group made dominant


@pytest.fixture(scope="module")
def dominant_target(tiny_llama):
    """A target whose importance ranking is known: some hidden channels, FFN channels and one KV group per layer
    carry much larger activations. FFN and head scalings are function-preserving (x30 into, /30 out of the
    channel), so only the activation magnitudes that `importance` measures change."""
    model = tiny_llama(seed=1, layers=2)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, H_DOM] *= 20
        for i, layer in enumerate(model.model.layers):
            layer.mlp.up_proj.weight[F_DOM] *= 30
            layer.mlp.down_proj.weight[:, F_DOM] /= 30
            g = KV_DOM[i]  # KV group g feeds query heads 2g, 2g+1
            layer.self_attn.v_proj.weight[g * HD : (g + 1) * HD] *= 30
            layer.self_attn.o_proj.weight[:, 2 * g * HD : (2 * g + 2) * HD] /= 30
    return model


def test_importance_ranks_the_dominant_channels(dominant_target):
    imp = importance(dominant_target, _seqs(4))
    assert sorted(torch.topk(imp["hidden"], len(H_DOM)).indices.tolist()) == H_DOM
    for i in range(2):
        assert sorted(torch.topk(imp["ffn"][i], len(F_DOM)).indices.tolist()) == F_DOM
        heads = imp["heads"][i]
        g = KV_DOM[i]
        assert heads.shape == (4,) and min(heads[2 * g : 2 * g + 2]) > max(heads[2 - 2 * g : 4 - 2 * g])


def test_prune_keeps_the_important_channels_and_heads(dominant_target, tok):
    design = DraftDesign(
        layers=2,
        init="prune",
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    draft, _ = build_draft(design, dominant_target, tok, _seqs(4))
    # every tensor has the design's shape (nothing more, nothing less)
    got = {k: tuple(v.shape) for k, v in draft.state_dict().items()}
    assert got == _expected_shapes(97, 16, 32, 2, 1, 2)
    c = draft.config
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads) == (
        16,
        32,
        2,
        1,
    )

    src, dst = dominant_target.state_dict(), draft.state_dict()
    hk = _match_rows(src["model.embed_tokens.weight"].T, dst["model.embed_tokens.weight"].T)
    assert set(H_DOM) <= set(hk) and hk == sorted(hk)
    for d in range(2):
        p = f"model.layers.{d}."
        fk = _match_rows(src[p + "mlp.up_proj.weight"][:, hk], dst[p + "mlp.up_proj.weight"])
        assert set(F_DOM) <= set(fk)
        assert torch.equal(dst[p + "mlp.down_proj.weight"], src[p + "mlp.down_proj.weight"][hk][:, fk])

        # whole KV group kept, with both of its query heads
        def heads(
            name: str, n_src: int, n_dst: int, p: str = p
        ) -> list[int]:  # target heads of the draft's rows
            return _match_rows(src[p + name][:, hk].reshape(n_src, -1), dst[p + name].reshape(n_dst, -1))

        kv, q = heads("self_attn.k_proj.weight", 2, 1), heads("self_attn.q_proj.weight", 4, 2)
        assert heads("self_attn.v_proj.weight", 2, 1) == kv
        g = KV_DOM[d]
        assert kv == [g] and q == [2 * g, 2 * g + 1]
        qr = [h * HD + j for h in q for j in range(HD)]
        assert torch.equal(dst[p + "self_attn.o_proj.weight"], src[p + "self_attn.o_proj.weight"][hk][:, qr])
    with torch.no_grad():
        assert torch.isfinite(draft(torch.tensor([[3, 4, 5]])).logits).all()


def test_prune_picks_query_heads_within_each_kept_group(tiny_llama):
    target = tiny_llama(seed=2, layers=1)
    imp = {
        "hidden": torch.arange(32.0),
        "ffn": [torch.arange(64.0)],
        "heads": [torch.tensor([1.0, 5.0, 3.0, 2.0])],
    }
    src = target.state_dict()
    hk = list(range(16, 32))
    for nh, nkv, q_heads in ((2, 2, [1, 2]), (1, 1, [1])):  # groups (0,1) sum 6 > (2,3) sum 5
        design = DraftDesign(
            layers=1,
            init="prune",
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=nh,
            num_key_value_heads=nkv,
        )
        draft = prune(target, [0], design.widths(target.config), imp)
        qr = [h * HD + j for h in q_heads for j in range(HD)]
        q = draft.state_dict()["model.layers.0.self_attn.q_proj.weight"]
        assert torch.equal(q, src["model.layers.0.self_attn.q_proj.weight"][qr][:, hk])


def test_prune_to_the_full_width_reproduces_the_target(tiny_llama, tok):
    target = tiny_llama(seed=3, layers=2)
    draft, _ = build_draft(DraftDesign(layers=2, init="prune"), target, tok, _seqs(2))
    ids = torch.tensor([_seqs(1, 12, seed=5)[0]])
    with torch.no_grad():
        torch.testing.assert_close(draft(ids).logits, target(ids).logits, rtol=0, atol=1e-6)


def test_prune_qwen2_keeps_biases(tiny_qwen2, tok):
    target = tiny_qwen2(seed=4, layers=2)
    design = DraftDesign(
        layers=[1], init="prune", hidden_size=16, intermediate_size=32, num_attention_heads=2
    )
    draft, _ = build_draft(design, target, tok, _seqs(2))
    got = {k: tuple(v.shape) for k, v in draft.state_dict().items()}
    assert got == _expected_shapes(
        97, 16, 32, 2, 2, 1, bias=True
    )  # KV heads default to min(target's 2, heads 2)
    src, dst = target.state_dict(), draft.state_dict()
    hk = _match_rows(src["model.embed_tokens.weight"].T, dst["model.embed_tokens.weight"].T)
    q_heads = _match_rows(
        src["model.layers.1.self_attn.q_proj.weight"][:, hk].reshape(4, -1),
        dst["model.layers.0.self_attn.q_proj.weight"].reshape(2, -1),
    )
    qr = [h * HD + j for h in q_heads for j in range(HD)]
    assert torch.equal(
        dst["model.layers.0.self_attn.q_proj.bias"], src["model.layers.1.self_attn.q_proj.bias"][qr]
    )
    with torch.no_grad():
        assert torch.isfinite(draft(torch.tensor([[3, 4, 5]])).logits).all()


# --- init: random and pretrained --------------------------------------------------------------------------------


def test_random_init_follows_the_design(target4, tok):
    design = DraftDesign(
        layers=3,
        init="random",
        hidden_size=48,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    a, _ = build_draft(design, target4, tok, seed=0)
    b, _ = build_draft(design, target4, tok, seed=0)
    c, _ = build_draft(design, target4, tok, seed=1)
    cfg = a.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.head_dim) == (3, 48, 96, 12)
    assert a.state_dict()["model.layers.0.self_attn.k_proj.weight"].shape == (24, 48)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))  # seeded
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    # the target's width with the target's heads: not a copy of the target
    d, _ = build_draft(DraftDesign(layers=2, init="random"), target4, tok)
    assert not torch.equal(d.model.layers[0].mlp.up_proj.weight, target4.model.layers[0].mlp.up_proj.weight)


def test_random_heads_default_to_grouped_kv(target4, tok):
    """num_attention_heads alone: KV heads = min(target's 2, heads), the same rule check() validates."""
    draft, _ = build_draft(DraftDesign(layers=1, init="random", num_attention_heads=8), target4, tok)
    assert (draft.config.num_attention_heads, draft.config.num_key_value_heads) == (8, 2)
    with torch.no_grad():
        assert draft(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 97)


def test_pretrained_init_loads_the_model(tmp_path, tiny_llama, tiny_tokenizer, target4, tok):
    small = tiny_llama(seed=7, layers=1, hidden=16)
    small.save_pretrained(tmp_path / "small")
    tiny_tokenizer().save_pretrained(tmp_path / "small")
    draft, _ = build_draft(DraftDesign(init=f"pretrained:{tmp_path / 'small'}"), target4, tok)
    assert draft.config.hidden_size == 16
    for (k, v), (k2, v2) in zip(draft.state_dict().items(), small.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    # another tokenizer (two ids swapped) is refused, naming what differs
    tiny_tokenizer(swap=(3, 4)).save_pretrained(tmp_path / "small")
    with pytest.raises(UserError, match="tokenizer differs"):
        build_draft(DraftDesign(init=f"pretrained:{tmp_path / 'small'}"), target4, tok)


# --- reduced vocabulary -----------------------------------------------------------------------------------------


def test_frequent_tokens():
    seqs = [[5, 5, 3, 3, 9, 7, 7, 7]]
    assert frequent_tokens(seqs, 3, [2, 2, None]) == [2, 7, 3]  # EOS = PAD counted once; ties by id
    assert frequent_tokens(seqs, 4, [9]) == [9, 7, 3, 5]
    assert frequent_tokens([[4]], 4, [1]) == [1, 4, 0, 2]  # too few tokens in the data: lowest unused ids


@pytest.mark.parametrize("tied", [False, True])
def test_reduced_vocab_keeps_the_target_rows(tiny_llama, tok, tied):
    target = tiny_llama(seed=5, layers=2, tie_word_embeddings=tied)
    rng = random.Random(1)
    seqs = [[int(rng.expovariate(0.15)) % 97 for _ in range(40)] for _ in range(10)]
    draft, vocab_map = build_draft(DraftDesign(layers=2, vocab=20), target, tok, seqs)
    assert len(vocab_map) == 20 == draft.config.vocab_size and len(set(vocab_map)) == 20
    assert vocab_map[0] == tok.eos_token_id  # EOS always in, even if the data never shows it
    assert vocab_map == frequent_tokens(seqs, 20, [tok.eos_token_id])
    idx = torch.tensor(vocab_map)
    assert torch.equal(draft.get_input_embeddings().weight, target.get_input_embeddings().weight[idx])
    assert torch.equal(draft.get_output_embeddings().weight, target.get_output_embeddings().weight[idx])
    if tied:
        assert draft.get_output_embeddings().weight is draft.get_input_embeddings().weight
    with torch.no_grad():
        assert draft(torch.tensor([[0, 5, 19]])).logits.shape == (1, 3, 20)


def test_reduced_vocab_remaps_special_ids(tiny_collected):
    from decode.models.targets import load_target
    from distill.collect.shards import load_collected

    target, tok = load_target(tiny_collected.target, "float32")
    ds = load_collected(tiny_collected.data)
    seqs = [p + r for p, r in zip(ds["prompt_ids"], ds["response_ids"])]
    draft, vocab_map = build_draft(DraftDesign(layers=2, vocab=64), target, tok, seqs)
    assert len(set(vocab_map)) == 64  # EOS and PAD are the same id here: kept once
    assert vocab_map[0] == tok.eos_token_id and draft.config.eos_token_id == 0


# --- freeze and describe ----------------------------------------------------------------------------------------


def _frozen(model) -> set[str]:
    return {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def test_freeze(tiny_llama, tok):
    untied = tiny_llama(seed=6, layers=2)
    draft, _ = build_draft(DraftDesign(layers=2), untied, tok)
    apply_freeze(draft, ["embed"])
    assert _frozen(draft) == {"model.embed_tokens.weight"}
    apply_freeze(draft, ["head"])
    assert _frozen(draft) == {"lm_head.weight"}
    apply_freeze(draft, ["norm"])
    assert (
        _frozen(draft) == {n for n, _ in draft.named_parameters() if "norm" in n} and len(_frozen(draft)) == 5
    )
    apply_freeze(draft, [])
    assert _frozen(draft) == set()
    # a tied head freezes with the embeddings (the documented default: embeddings tied to the target stay frozen)
    tied = tiny_llama(seed=6, layers=2, tie_word_embeddings=True)
    draft, _ = build_draft(DraftDesign(layers=2), tied, tok)
    apply_freeze(draft, ["embed"])
    assert not draft.get_output_embeddings().weight.requires_grad
    assert all(p.requires_grad for n, p in draft.named_parameters() if "layers" in n)


def test_describe(target4, tok):
    draft, _ = build_draft(DraftDesign(layers=2), target4, tok)
    apply_freeze(draft, ["embed"])
    info = describe(draft)
    assert info["params"] == sum(p.numel() for p in draft.parameters())
    assert info["trainable_params"] == info["params"] - 97 * 32
    assert (info["layers"], info["hidden_size"], info["vocab_size"]) == (2, 32, 97)
    assert info["step_ms"] > 0
    assert "step_ms" not in describe(draft, device_latency=False)


# --- impossible designs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(init="random", num_attention_heads=4, num_key_value_heads=3),
            "not a multiple of num_key_value_heads=3",
        ),
        (dict(init="random", num_attention_heads=3), "not a multiple of num_key_value_heads=2"),
        (dict(init="random", hidden_size=30), "hidden_size=30 is not divisible by num_attention_heads=4"),
        (dict(layers=[0, 4]), r"within 0\.\.3"),
        (dict(layers=5), r"1\.\.4 layers"),
        (dict(layers=[1, 1]), "distinct"),
        (dict(vocab=98), "target's 97"),
        (dict(hidden_size=48), r"target_layers.*hidden_size"),
        (dict(init="prune", hidden_size=64), r"narrow.*hidden_size"),
        (dict(init="prune", intermediate_size=128), r"narrow.*intermediate_size"),
        (dict(init="prune", num_attention_heads=4, num_key_value_heads=1), "query heads per KV group"),
        (dict(init="magic"), "init='magic'"),
        (dict(init="pretrained:/nonexistent/model"), "model not found"),
        (dict(freeze=["layers"]), "unknown part"),
    ],
)
def test_impossible_designs_are_refused(target4, tok, kw, message):
    with pytest.raises(UserError, match=message):
        build_draft(DraftDesign(**kw), target4, tok, _seqs(2))


@pytest.mark.parametrize("kw", [dict(init="prune"), dict(vocab=10)])
def test_data_driven_designs_need_data(target4, tok, kw):
    with pytest.raises(UserError, match="--data"):
        build_draft(DraftDesign(**kw), target4, tok)


# --- a reduced-vocabulary draft stays lossless in decode/ -------------------------------------------------------


def test_reduced_vocab_draft_is_lossless(tiny_llama, tok):
    target = tiny_llama(seed=8, layers=2)
    prompts = _seqs(10, 6, seed=9)
    seqs = [p + generate(target, None, p, 24)[0] for p in prompts[:6]]  # "collected" target outputs
    draft, vocab_map = build_draft(DraftDesign(layers=2, vocab=24), target, tok, seqs)
    vm = torch.tensor(vocab_map)
    proposed = accepted = 0
    for prompt in prompts[6:]:  # unseen prompts: some target tokens are outside the draft's 24
        want = generate(target, None, prompt, 24)[0]
        for gamma in (1, 3, 5):
            got, stats = generate(target, draft, prompt, 24, DecodeOptions(gamma=gamma, schedule="constant"), vocab_map=vm)
            assert got == want, (prompt, gamma)
            proposed, accepted = proposed + stats.proposed, accepted + stats.accepted
    assert 0 < accepted < proposed  # both paths ran: accepted proposals and rejected ones


def test_reduced_vocab_draft_is_lossless_on_the_real_tokenizer(tiny_collected):
    from decode.models.targets import load_target
    from distill.collect.shards import load_collected

    target, tok = load_target(tiny_collected.target, "float32")
    ds = load_collected(tiny_collected.data)
    seqs = [p + r for p, r in zip(ds["prompt_ids"], ds["response_ids"])]
    draft, vocab_map = build_draft(DraftDesign(layers=2, vocab=512), target, tok, seqs)
    vm = torch.tensor(vocab_map)
    eos = (tok.eos_token_id,)
    for prompt in load_collected(tiny_collected.heldout)["prompt_ids"][:3]:
        want = generate(target, None, prompt, 16, eos_token_ids=eos)[0]
        for gamma in (2, 4):
            assert generate(target, draft, prompt, 16, DecodeOptions(gamma=gamma, schedule="constant"), eos_token_ids=eos, vocab_map=vm)[0] == want


def test_a_reduced_vocabulary_keeps_special_ids_in_draft_ids_lists_included(tiny_llama):
    """Llama-3.1 lists several EOS ids: each kept one is renumbered, in the config and the generation config."""
    from distill.train.designs import reduce_vocab

    draft = tiny_llama(0, eos_token_id=[5, 7, 90], bos_token_id=3)
    draft.generation_config.eos_token_id, draft.generation_config.bos_token_id = [5, 7, 90], 3
    reduce_vocab(draft, [0, 7, 3, 5, 11])
    for cfg in (draft.config, draft.generation_config):
        assert cfg.eos_token_id == [3, 1] and cfg.bos_token_id == 2  # 90 is not in the draft's vocabulary
