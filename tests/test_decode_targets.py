"""Target loading: atomic GGUF conversion (an interrupted one leaves nothing behind), the cached fast path, drafts."""

import json
import os
import re

import pytest
import torch

import decode.models.targets as targets
from decode import DecodeOptions, generate
from decode.models import layer_cut


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch, tiny_llama, tiny_tokenizer):
    """A private cache dir, a stand-in .gguf file, and _load_gguf returning a tiny model (calls are counted).

    `state["fail_saves"]` makes the next model.save_pretrained calls write a partial file and then raise.
    """
    monkeypatch.setenv("SPECDISTILL_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(targets, "default_gguf_path", lambda: gguf)
    state = {"loads": 0, "fail_saves": 0}

    def load(path, dtype=torch.float32):
        assert path == gguf
        state["loads"] += 1
        model, tok = tiny_llama(0), tiny_tokenizer()
        if state["fail_saves"]:
            state["fail_saves"] -= 1
            real_save = model.save_pretrained

            def interrupted_save(folder, **kw):
                real_save(folder, **kw)  # the weights land in the temp folder ...
                raise KeyboardInterrupt("simulated interruption")  # ... and then the process is interrupted

            model.save_pretrained = interrupted_save
        return model, tok

    monkeypatch.setattr(targets, "_load_gguf", load)
    return gguf, state


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


def test_interrupted_conversion_leaves_no_folder_and_a_retry_succeeds(fake_gguf, tmp_path):
    gguf, state = fake_gguf
    out = tmp_path / "cache" / "converted"
    state["fail_saves"] = 1
    with pytest.raises(KeyboardInterrupt):
        targets.convert_gguf(gguf, out)
    assert not out.exists()
    assert _leftovers(out.parent) == []  # no half-written temp folder either
    assert targets.convert_gguf(gguf, out) == out
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert json.loads((out / "specdistill_source.json").read_text()) == {"gguf": str(gguf)}
    assert _leftovers(out.parent) == ["converted"]
    assert state["loads"] == 2
    model, tok = targets.load_model(str(out))
    assert model.config.num_hidden_layers == 2 and len(tok) == 97


def test_default_is_converted_once_then_loaded_from_the_cache(fake_gguf, tmp_path):
    _, state = fake_gguf
    model, tok = targets.load_target("default")
    assert state["loads"] == 1
    assert model._specdistill_spec == "default" and not model.training
    path = targets.resolve("default")
    assert path == str(tmp_path / "cache" / targets.DEFAULT_NAME)
    model2, _ = targets.load_target("default")
    assert state["loads"] == 1  # the second load did not convert again
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)


def test_gguf_spec_converts_into_the_cache(fake_gguf, tmp_path):
    gguf, state = fake_gguf
    assert targets.resolve(str(gguf)) == str(tmp_path / "cache" / "gguf" / "tiny")
    assert targets.resolve(str(gguf)) == str(tmp_path / "cache" / "gguf" / "tiny")
    assert state["loads"] == 1


def test_cache_root_honours_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECDISTILL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert targets.cache_root() == tmp_path / "specdistill"
    monkeypatch.setenv("SPECDISTILL_CACHE", str(tmp_path / "x"))
    assert targets.cache_root() == tmp_path / "x"


def test_load_draft_variants(tiny_llama, tiny_tokenizer):
    target, tok = tiny_llama(0), tiny_tokenizer()
    target._specdistill_spec = "some/target"
    assert targets.load_draft("some/target", target, tok).model is target  # same spec: reuse the target
    target._specdistill_spec = "default"  # `default` is the embedded model: the target itself when it is the target
    assert targets.load_draft("default", target, tok).model is target
    d = targets.load_draft("layers:1", target, tok)
    assert d.model is not target and d.model.config.num_hidden_layers == 1 and d.vocab_map is None


def test_draft_from_layers_copies_the_chosen_layers(tiny_llama):
    target = tiny_llama(0, layers=3)
    draft = layer_cut.draft_from_layers(target, [0, 2])
    assert draft.config.num_hidden_layers == 2 and target.config.num_hidden_layers == 3
    sd_t, sd_d = target.state_dict(), draft.state_dict()
    assert torch.equal(sd_d["model.layers.1.mlp.up_proj.weight"], sd_t["model.layers.2.mlp.up_proj.weight"])
    assert torch.equal(
        sd_d["model.layers.0.self_attn.q_proj.weight"], sd_t["model.layers.0.self_attn.q_proj.weight"]
    )
    assert torch.equal(sd_d["lm_head.weight"], sd_t["lm_head.weight"])
    # all layers: the same function as the target; and the decoder stays lossless with a partial copy
    full = layer_cut.draft_from_layers(target, [0, 1, 2])
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(full(x).logits, target(x).logits)
    want, _ = generate(target, None, [1, 2, 3], 12)
    assert generate(target, draft, [1, 2, 3], 12, DecodeOptions(gamma=3, schedule="constant"))[0] == want
    out, stats = generate(target, full, [1, 2, 3], 1 + 3 * 4, DecodeOptions(gamma=3, schedule="constant"))
    assert out == generate(target, None, [1, 2, 3], 13)[0]
    assert stats.acceptance_rate == 1.0 and stats.tau == 4


@pytest.mark.slow
def test_real_default_second_load_takes_the_fast_path(monkeypatch):
    """Once converted (first use, ~40 s), loading `default` never converts again."""
    targets.resolve("default")  # converts if this machine has never done so

    def no_conversion(*a, **k):
        raise AssertionError("default was converted again")

    monkeypatch.setattr(targets, "_load_gguf", no_conversion)
    model, tok = targets.load_target("default")
    assert model.config.num_hidden_layers == 30 and len(tok) == model.config.vocab_size


# --- bad inputs: a device this machine lacks, a weights file cut short ------------------------------------------


@pytest.mark.parametrize("device, message", [
    ("cuda", "--device cuda: no CUDA GPU is visible on this machine; use --device cpu"),
    ("cuda:3", "--device cuda:3: no CUDA GPU is visible"),
    ("cdu", "--device 'cdu' is not a device; use auto, cpu, cuda or cuda:N"),
    ("meta", "--device meta: meta devices are not supported"),
])
def test_a_device_that_is_not_here_is_one_line(device, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(targets.UserError, match=re.escape(message)):
        targets.check_device(device)
    targets.check_device("cpu")
    targets.check_device("auto")


def test_a_gpu_index_past_the_visible_ones_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(targets.UserError, match=re.escape("--device cuda:3: only 2 CUDA GPU(s) are visible")):
        targets.check_device("cuda:3")
    targets.check_device("cuda:1")


def test_load_model_checks_the_device_before_loading(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(targets, "resolve", lambda spec: pytest.fail("resolved a model for a missing device"))
    with pytest.raises(targets.UserError, match="no CUDA GPU"):
        targets.load_model("some/model", device="cuda")


@pytest.mark.parametrize("keep", [0.5, 0.0001])  # cut in the tensor data, cut in the header
def test_a_truncated_weights_file_names_the_file_and_the_fix(keep, tmp_path, tiny_llama, tiny_tokenizer):
    """Before: safetensors' own traceback. evaluate relies on a UserError to skip such a draft and report it."""
    folder = tmp_path / "draft"
    tiny_llama(1).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    weights = folder / "model.safetensors"
    os.truncate(weights, int(weights.stat().st_size * keep))
    with pytest.raises(targets.UserError, match=re.escape(f"{weights} is damaged or incomplete (")) as e:
        targets.load_model(str(folder))
    assert "re-export the draft or re-download the model" in str(e.value)
    with pytest.raises(targets.UserError, match="damaged or incomplete"):
        targets.load_draft(str(folder), tiny_llama(0), tiny_tokenizer())
