"""A feature head's folder (decode.models.feature_head, FeatureHead.save) is the speculators eagle3 format, for real.

    speculators     (vllm-marked: the `speculators` package lives in .venv-vllm, scripts/setup.sh) its own
                    SpeculatorModelConfig / Eagle3DraftModel load the folder with every field and tensor as ours,
                    and its forward drafts what our head drafts: step 0 (target features) and its training-time
                    step 1 (the head's own output, teacher-forced token), logits equal to float32 rounding
    static check    servable.head_problems: what vLLM's eagle3 would read differently (layer order, a missing
                    norm_before_residual, d2t against t2d), and the vllm check's routing (method eagle3 for a head)
    vLLM            for real: tests/test_publish_heads.py (publish's vllm check on a fitted head of the default target)

The tiny target is a llama with head_dim 64 (vLLM's CPU attention refuses smaller ones).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from decode.models.feature_head import FeatureHead, default_layers, is_head_folder, layer_config
from distill.publish import servable, vllm_check

GAMMA = 3
H, V, LAYERS = 128, 300, 6
DRAFT_IDS = sorted(set(range(0, V, 3)) | {1, 2})  # 102 of the 300 ids


def tiny_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=2 * H, num_hidden_layers=LAYERS,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=256)


@pytest.fixture
def target_dir(tmp_path) -> Path:
    torch.manual_seed(0)
    LlamaForCausalLM(tiny_config()).save_pretrained(tmp_path / "target")
    return tmp_path / "target"


def save_head(folder: Path, verifier: str | None, variant: dict | None = None, window: int | None = None) -> FeatureHead:
    """A random head of the tiny target (weights std 0.2: peaked logits, no argmax near-ties), saved to folder;
    variant: speculators' eagle3 switches; window: a sliding-attention layer of that window."""
    cfg = layer_config(tiny_config())
    if window:
        cfg.layer_types, cfg.sliding_window = ["sliding_attention"], window
    torch.manual_seed(1)
    head = FeatureHead(cfg, default_layers(LAYERS), DRAFT_IDS,
                       {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}, variant)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.2)
    head.save(folder, gamma=GAMMA)
    return head.eval()


# --- speculators reads the folder as we wrote it


@pytest.fixture
def speculators():
    return pytest.importorskip("speculators", reason="speculators is installed in .venv-vllm (scripts/setup.sh)")


@pytest.mark.vllm
def test_speculators_loads_the_folder_with_our_fields_and_tensors(speculators, target_dir, tmp_path):
    """The verifier is the tiny target's folder: Eagle3DraftModel.from_pretrained opens whatever
    verifier.name_or_path names (its config, for the layer ids; its embedding and head where the folder has none),
    and with none at all (null) speculators 0.9.0 asks the Hub for a model named "None"."""
    head = save_head(tmp_path / "head", str(target_dir))
    cfg = speculators.SpeculatorModelConfig.from_pretrained(tmp_path / "head")
    assert isinstance(cfg, speculators.Eagle3SpeculatorConfig)
    assert cfg.draft_vocab_size == len(DRAFT_IDS) and cfg.target_vocab_size == V
    assert cfg.eagle_aux_hidden_state_layer_ids == head.feature_layers == [2, 3]
    assert not (cfg.norm_before_residual or cfg.norm_before_fc or cfg.fc_norm or cfg.norm_output)
    tl = cfg.transformer_layer_config
    assert (tl.model_type, tl.num_hidden_layers, tl.hidden_size, tl.intermediate_size, tl.num_attention_heads,
            tl.num_key_value_heads, tl.head_dim, tl.vocab_size) == ("llama", 1, H, 2 * H, 2, 1, 64, V)
    sc = cfg.speculators_config
    assert sc.algorithm == "eagle3" and sc.proposal_methods[0].speculative_tokens == GAMMA
    assert sc.verifier.name_or_path == str(target_dir)

    model = speculators.Eagle3DraftModel.from_pretrained(tmp_path / "head")
    saved, theirs = load_file(tmp_path / "head" / "model.safetensors"), model.state_dict()
    # speculators keeps the verifier's own head and norm for training; it never saves them
    assert set(theirs) - set(saved) == {"verifier_lm_head.weight", "verifier_norm.weight"}
    assert set(saved) <= set(theirs)
    for name, t in saved.items():
        assert torch.equal(theirs[name], t), name
    assert saved["t2d"].dtype == torch.bool and int(saved["t2d"].sum()) == len(DRAFT_IDS)
    assert torch.equal(saved["d2t"] + torch.arange(len(DRAFT_IDS)), torch.tensor(DRAFT_IDS))


# speculators' trainer writes eagle3 heads with norm_before_residual, norm_before_fc and norm_output on, and every
# layer sliding_attention (window 2048); fc_norm is its EAGLE-3.1 option
SPECULATORS_DEFAULT = {"norm_before_residual": True, "norm_before_fc": True, "norm_output": True}


@pytest.mark.vllm
@pytest.mark.parametrize("attn, variant, window", [
    ("sdpa", None, None), ("eager", None, None),  # flex attention (speculators' default) needs a GPU compile
    ("sdpa", SPECULATORS_DEFAULT, None), ("sdpa", SPECULATORS_DEFAULT, 5), ("sdpa", {"fc_norm": True}, None)])
def test_speculators_drafts_what_our_head_drafts(speculators, target_dir, tmp_path, attn, variant, window):
    """Head position p reads token x_{p+1} and features f_p. Step 0 over T positions, then speculators' step 1
    (its own step-0 output, the next token teacher-forced, attending to step 0's keys up to p and itself) against
    our decoding step: the cache holds positions 0..q, then one position with x_{q+2}'s id and our output at q.
    With a window of 5 (< T = 12) step 0 drops keys as speculators' does. Its training-time step 1 keeps one key more
    than decoding does (its window counts from the query's index, decoding's and vLLM's from its position, one
    further), so that step is compared without a window only."""
    save_head(tmp_path / "head", str(target_dir), variant, window)
    ours = FeatureHead.load(tmp_path / "head")
    assert ours.variant == {k: bool((variant or {}).get(k)) for k in ours.variant} and ours.window == window
    cfg = speculators.SpeculatorModelConfig.from_pretrained(tmp_path / "head")
    cfg.transformer_layer_config._attn_implementation = attn
    model = speculators.Eagle3DraftModel.from_pretrained(tmp_path / "head", config=cfg).eval()
    logits = []
    model.lm_head.register_forward_hook(lambda mod, args, out: logits.append(out.detach()))
    T = 12
    torch.manual_seed(2)
    ids, features = torch.randint(0, V, (1, T)), torch.randn(1, T, len(ours.feature_layers) * H)
    with torch.no_grad():
        tokens = model(hidden_states=features, input_ids=ids, document_ids=torch.zeros(1, T, dtype=torch.long),
                       ttt_steps=2)  # no verifier_last_hidden_states: draft tokens only, in draft ids
        out, _, _ = ours(ids, ours.fuse(features), torch.arange(1, T + 1)[None])  # rotary position p + 1
        z0 = ours.logits(out)[0]  # (T, V_draft)
        z1 = []
        for q in range(T - 1):
            cache = ours.new_cache(T + 1)
            h, _ = ours.step(ids[0, :q + 1].tolist(), ours.fuse(features[0, :q + 1]), cache)
            z1.append(ours.step([int(ids[0, q + 1])], h[-1:], cache)[1])
        z1 = torch.stack(z1)  # (T - 1, V_draft); speculators' last step-1 position reads a padding token
    torch.testing.assert_close(logits[0][0], z0, rtol=1e-5, atol=1e-5)
    assert torch.equal(tokens[0][0], z0.argmax(-1))
    if not window:
        torch.testing.assert_close(logits[1][0, :T - 1], z1, rtol=1e-5, atol=1e-5)
        assert torch.equal(tokens[1][0, :T - 1], z1.argmax(-1))
    assert len(set(tokens[0][0].tolist())) > 3  # the comparison saw varied drafts, not one constant token


# --- what vLLM's eagle3 would read differently (no vLLM needed)


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def _edit_tensors(folder: Path, **changes) -> None:
    sd = load_file(folder / "model.safetensors")
    save_file({**sd, **changes}, folder / "model.safetensors")


@pytest.mark.parametrize("edit, says", [
    (lambda d: _edit_config(d, eagle_aux_hidden_state_layer_ids=[3, 2]), "distinct ascending target layer ids"),
    (lambda d: _edit_config(d, eagle_aux_hidden_state_layer_ids=[2, 6]), "in 0..5"),
    (lambda d: _edit_config(d, norm_before_residual=None), "norm_before_residual is None"),
    (lambda d: _edit_tensors(d, d2t=torch.zeros(len(DRAFT_IDS), dtype=torch.long)), "d2t + draft id is not"),
    (lambda d: _edit_tensors(d, t2d=torch.ones(V, dtype=torch.bool)), "d2t + draft id is not"),
])
def test_head_problems_names_what_vllm_would_read_differently(tmp_path, edit, says):
    save_head(tmp_path / "head", None)
    assert servable.head_problems(tmp_path / "head", tiny_config()) == []
    edit(tmp_path / "head")
    problems = servable.head_problems(tmp_path / "head", tiny_config())
    assert len(problems) == 1 and says in problems[0], problems


def test_head_problems_for_another_target(tmp_path):
    save_head(tmp_path / "head", None)
    other = LlamaConfig(**{**tiny_config().to_dict(), "hidden_size": 256, "num_hidden_layers": 3})
    problems = servable.head_problems(tmp_path / "head", other)
    assert any("hidden_size 128 is not the target's 256" in p for p in problems)
    assert any("in 0..2" in p for p in problems)  # layer 3 does not exist in a 3-layer target


def test_the_vllm_check_serves_a_head_as_eagle3_and_a_draft_as_draft_model(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(vllm_check, "vllm_installed", lambda python: True)
    monkeypatch.setattr(vllm_check, "check_prompts", lambda tok: [[1, 2, 3]])

    def stop(python, request):
        seen.append({**request, "python": python})
        raise RuntimeError("stop here")

    monkeypatch.setattr(vllm_check, "run_vllm", stop)
    save_head(tmp_path / "head", None)
    torch.manual_seed(0)
    LlamaForCausalLM(tiny_config()).save_pretrained(tmp_path / "draft")
    target = SimpleNamespace(dtype=torch.float32, config=tiny_config())
    for folder in ("head", "draft"):
        status, detail, _ = vllm_check.prove(tmp_path / folder, str(tmp_path), target, None, GAMMA, sys.executable)
        assert status == "fail" and "stop here" in detail
    assert [r["method"] for r in seen] == ["eagle3", "draft_model"]
    monkeypatch.chdir(tmp_path)  # docs/publish.md's `prove(..., ".venv-vllm/bin/python")`: run from a temporary folder
    vllm_check.prove(tmp_path / "head", str(tmp_path), target, None, GAMMA, ".venv-vllm/bin/python")
    assert seen.pop()["python"] == str(tmp_path / ".venv-vllm" / "bin" / "python")
    assert is_head_folder(tmp_path / "head") and vllm_check.method(tmp_path / "draft") == "draft_model"

    _edit_config(tmp_path / "head", norm_before_residual=None)  # refused before any engine starts
    status, detail, numbers = vllm_check.prove(tmp_path / "head", str(tmp_path), target, None, GAMMA, sys.executable)
    assert (status, numbers, len(seen)) == ("fail", None, 2)
    assert detail.startswith("vLLM's eagle3 would not serve this feature head as it was measured: norm_before_res")


def test_the_card_names_the_method():
    numbers = {"vllm": "0.32.0", "gamma": 3, "dtype": "float32", "prompts": 4, "max_tokens": 32, "method": "eagle3",
               "acceptance_rate": 0.3, "tau": 1.9, "tokens_per_s": 10.0, "baseline_tokens_per_s": 9.0,
               "speedup": 1.11, "ours_acceptance_rate": 0.3, "ours_tau": 1.9, "alpha_tolerance": 0.05}
    assert "(`method: eagle3`, γ = 3, float32)" in vllm_check.card_section(numbers, None)
    older = {k: v for k, v in numbers.items() if k != "method"}  # numbers recorded before heads were served
    assert "(`method: draft_model`, γ = 3, float32)" in vllm_check.card_section(older, None)


# --- for real: vLLM serves the default target with a head
