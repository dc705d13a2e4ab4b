"""Drafts built from the target's files on the 16 architectures of tests/architectures.py, checked against
transformers' own models: the layer cut (which layers, per-layer settings, reading only the kept tensors),
reduced vocabularies, and width pruning where it is supported (refused by DraftDesign.check elsewhere).
"""

from __future__ import annotations

import random

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from decode.errors import UserError
from decode.models import layer_cut
from decode.models.targets import load_tokenizer
from distill.train.designs import DraftDesign, build_draft_from_files
from distill.train.prune import PRUNE_TYPES, prune
from tests.architectures import ARCHITECTURES, save_target

pytestmark = pytest.mark.usefixtures("torch_single_thread")

IDS = [[5, 900, 33, 1200, 7, 8, 99, 100, 3000, 42, 11, 12]]  # crosses the tiny targets' sliding window of 8


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tok):
    """arch -> a saved tiny target of that architecture, built on first use."""
    cache = {}

    def get(arch: str) -> str:
        if arch not in cache:
            cache[arch] = save_target(arch, tmp_path_factory.mktemp(arch), tok)
        return cache[arch]

    return get


def _seqs(n: int = 6, vocab: int = 8000) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(vocab) for _ in range(24)] for _ in range(n)]


def _logits(model, ids=IDS) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(torch.tensor(ids)).logits


def _reloaded(model, tmp_path):
    model.save_pretrained(tmp_path)
    return AutoModelForCausalLM.from_pretrained(tmp_path).eval()


def _assert_copies(draft, target, layers: list[int]) -> None:
    """Draft layer d is target layer layers[d] (found through transformers' modules); embeddings and head too."""
    d_layers, t_layers = layer_cut.layer_list(draft)[1], layer_cut.layer_list(target)[1]
    assert len(d_layers) == len(layers)
    for d, s in enumerate(layers):
        want = dict(t_layers[s].named_parameters())
        got = dict(d_layers[d].named_parameters())
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got), (d, s)
    assert torch.equal(draft.get_input_embeddings().weight, target.get_input_embeddings().weight)
    assert torch.equal(draft.get_output_embeddings().weight, target.get_output_embeddings().weight)


# --- every architecture: the cut, a reduced vocabulary, prune supported or refused


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_target_layers_from_files(arch, folders, tok, tmp_path):
    folder = folders(arch)
    target = AutoModelForCausalLM.from_pretrained(folder).eval()
    for layers, chosen in ((2, [0, 1]), ([1, 3], [1, 3])):
        draft, vocab_map = build_draft_from_files(DraftDesign(layers=layers), folder, tok)
        assert vocab_map is None and type(draft) is type(target)
        _assert_copies(draft, target, chosen)
        from_memory = layer_cut.draft_from_layers(target, chosen).state_dict()  # `--draft layers:` in decode/
        assert all(torch.equal(v, from_memory[k]) for k, v in draft.state_dict().items())
        if getattr(target.config, "layer_types", None):  # sliding/full attention per layer follows the cut
            assert draft.config.layer_types == [target.config.layer_types[i] for i in chosen]
        reloaded = _reloaded(draft, tmp_path / f"cut{chosen}")
        torch.testing.assert_close(_logits(reloaded), _logits(draft), rtol=0, atol=0)
    whole, _ = build_draft_from_files(DraftDesign(layers=4), folder, tok)
    torch.testing.assert_close(_logits(whole), _logits(target), rtol=0, atol=0)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_reduced_vocab_from_files(arch, folders, tok, tmp_path):
    folder = folders(arch)
    full, _ = build_draft_from_files(DraftDesign(layers=[1, 3]), folder, tok)
    draft, vocab_map = build_draft_from_files(DraftDesign(layers=[1, 3], vocab=4096), folder, tok, _seqs())
    assert draft.config.vocab_size == 4096 == len(vocab_map)
    assert type(draft.get_input_embeddings()) is type(full.get_input_embeddings())  # e.g. Gemma's scaled one
    vm = torch.tensor(vocab_map)
    ids = [list(range(0, 4096, 341))]  # draft ids
    want = _logits(full, vm[torch.tensor(ids)].tolist())[..., vm]  # the full draft at the kept ids
    torch.testing.assert_close(_logits(draft, ids), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_logits(_reloaded(draft, tmp_path), ids), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_prune_reproduces_the_target_or_is_refused(arch, folders, tok):
    folder = folders(arch)
    design = DraftDesign(layers=4, init="prune")
    config = AutoModelForCausalLM.from_pretrained(folder).config
    if arch not in PRUNE_TYPES:
        with pytest.raises(UserError, match=rf"init=prune does not support '{arch}'.*use init=target_layers"):
            design.check(config)
        return
    target = AutoModelForCausalLM.from_pretrained(folder).eval()
    draft, _ = build_draft_from_files(design, folder, tok, _seqs(2))
    torch.testing.assert_close(_logits(draft), _logits(target), rtol=0, atol=1e-6)


def _silence(target, drop_ffn, drop_cols) -> None:
    """Zero the FFN channels drop_ffn and the attention-output columns drop_cols of every layer: pruning them
    away leaves the target's function unchanged."""
    with torch.no_grad():
        for layer in layer_cut.layer_list(target)[1]:
            mods = dict(layer.named_modules())
            out = mods.get("mlp.down_proj") or mods["mlp.c_proj"]
            out.weight[:, drop_ffn] = 0
            mods["self_attn.o_proj"].weight[:, drop_cols] = 0


@pytest.mark.parametrize("arch", PRUNE_TYPES)
def test_narrow_prune_keeps_the_function_of_what_it_keeps(arch, folders, tmp_path):
    """Half the FFN channels and (but for OLMo-2, whose q/k norms span all heads) the second KV group's query
    heads are made silent, and ranked last: the narrow draft computes exactly what the target does."""
    target = AutoModelForCausalLM.from_pretrained(folders(arch)).eval()
    hd = getattr(target.config, "head_dim", None) or 64 // 4  # 64 wide over 4 heads, unless head_dim is set
    inter = target.config.intermediate_size
    heads = 4 if arch == "olmo2" else 2  # 4 query heads over 2 KV groups; group 1 feeds heads 2 and 3
    _silence(target, list(range(1, inter, 2)), list(range(2 * hd, 4 * hd)) if heads == 2 else [])
    imp = {"hidden": torch.ones(64), "ffn": [(torch.arange(inter) % 2 == 0).float()] * 4,
           "heads": [torch.tensor([1.0, 1.0, 0.0, 0.0])] * 4}
    w = {"hidden_size": 64, "intermediate_size": inter // 2, "num_attention_heads": heads,
         "num_key_value_heads": heads // 2}
    draft = prune(target, [0, 1, 2, 3], w, imp)
    assert draft.config.intermediate_size == inter // 2 and draft.config.num_attention_heads == heads
    torch.testing.assert_close(_logits(draft), _logits(target), rtol=1e-5, atol=1e-5)
    narrow = DraftDesign(layers=[1, 3], init="prune", hidden_size=32, intermediate_size=64, num_attention_heads=2,
                         num_key_value_heads=1)
    small, _ = build_draft_from_files(narrow, folders(arch), load_tokenizer("default"), _seqs(2))
    assert small.config.hidden_size == 32
    torch.testing.assert_close(_logits(_reloaded(small, tmp_path)), _logits(small), rtol=0, atol=0)


# --- reading only what the draft needs


def test_sharded_files_read_only_the_kept_tensors(folders, tok, tmp_path, monkeypatch):
    """A sharded bf16 target: the draft reads its 2 layers, embeddings and final norm (the tied head is not in
    the files), in bf16, equal bitwise to the cut of the loaded target; the whole target is never loaded."""
    target = AutoModelForCausalLM.from_pretrained(folders("llama"), dtype=torch.bfloat16).eval()
    target.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / layer_cut.INDEX_FILE).is_file()
    read = []

    class Counting:
        def __init__(self, path, framework):
            self.f = real(path, framework)

        def __enter__(self):
            self.f.__enter__()
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def keys(self):
            return self.f.keys()

        def get_tensor(self, key):
            read.append(key)
            return self.f.get_tensor(key)

    real = layer_cut.safe_open
    monkeypatch.setattr(layer_cut, "safe_open", Counting)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", None)  # no whole-target load
    draft, _ = build_draft_from_files(DraftDesign(layers=[0, 2]), str(tmp_path), tok)
    per_layer = {k.split(".", 3)[3] for k in target.state_dict() if k.startswith("model.layers.0.")}
    want = {"model.embed_tokens.weight", "model.norm.weight"} | {f"model.layers.{i}.{k}" for i in (0, 2) for k in per_layer}
    assert sorted(read) == sorted(want)
    expected = layer_cut.draft_from_layers(target, [0, 2])
    assert draft.dtype == torch.bfloat16
    got, ref = draft.state_dict(), expected.state_dict()
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in got)


def test_a_missing_tensor_is_named(folders, tok, tmp_path):
    folder = folders("qwen3")
    state = load_file(f"{folder}/model.safetensors")
    del state["model.layers.1.self_attn.q_norm.weight"]
    for name in ("config.json", "generation_config.json"):
        (tmp_path / name).write_text(open(f"{folder}/{name}").read())
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    build_draft_from_files(DraftDesign(layers=[0, 2]), str(tmp_path), tok)  # layer 1 not needed
    with pytest.raises(UserError, match=r"lack \['model.layers.0.self_attn.q_norm.weight'\]"):
        build_draft_from_files(DraftDesign(layers=[1, 2]), str(tmp_path), tok)
