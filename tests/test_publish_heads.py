"""distill.publish on a feature head (EAGLE-3 style, the speculators eagle3 folder decode.models.feature_head writes).

The target is tests/test_publish.py's tiny random llama (4 layers of width 64, a BPE tokenizer trained on the bundled
prompts); the head is a random FeatureHead of it with a reduced vocabulary (its embedding and head rows copied from
the target, as training builds one), written as distill/train/export.py writes a trained head. The fast tests
replace the vLLM run (vllm_check.prove) by a recorder; the vllm-marked one serves a head of the default target
through publish for real.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file
from test_publish import TOKEN, hub, make_tokenizer, run_main, write_report  # noqa: F401 - hub is a fixture
from transformers import LlamaConfig, LlamaForCausalLM

from decode.drafting.speculative import generate
from decode.models.feature_head import FeatureHead, default_layers, is_head_folder, layer_config
from decode.models.targets import eos_ids, load_draft
from decode.options import DecodeOptions
from distill.publish import redact, vllm_check
from distill.publish.job import DEFAULT_GAMMA

REPO = Path(__file__).resolve().parents[1]
TARGET_ID = "org/tiny-target"


def head_meta(target: str, head: FeatureHead, **extra) -> dict:
    """specdistill.json with the fields distill/train/export.py `record` writes for a trained head."""
    params = sum(p.numel() for p in head.parameters())
    return {
        "target": target,
        "target_name": TARGET_ID,
        "design": {"kind": "feature_head", "feature_layers": head.feature_layers, "head_layers": 1, "layers": 1,
                   "hidden_size": head.config.hidden_size, "vocab_size": head.draft_vocab_size, "params": params,
                   "trainable_params": params - head.embed_tokens.weight.numel(), "features": "stored",
                   "ttt_steps": 2, "step_ms": 0.2, "init": "random", "freeze": []},
        "init": "random",
        "loss": {"fkl": 1.0},
        "data": {"path": "runs/data", "rows": 10, "tokens": 1000, "prompts": "train.jsonl"},
        "step": 5,
        "metrics": {},
        "commands": ["python -m distill.collect --target T --output runs/data",
                     "python -m distill.train --design feature_head --target T --output runs/head"],
        "wandb": None,
        "train_config": {"design": "feature_head", "output": "runs/head", "spec_eval_gamma": 3},
        **extra,
    }


def make_head(target, draft_ids: list[int] | None, verifier: str, hidden: int | None = None) -> FeatureHead:
    """A random head of the target's shape (or `hidden` wide: a head of another target), with the target's
    embedding and head rows, as distill/train/head.py builds one before training."""
    tc = target.config if hidden is None else LlamaConfig(**{**target.config.to_dict(), "hidden_size": hidden})
    torch.manual_seed(1)
    head = FeatureHead(layer_config(tc), default_layers(tc.num_hidden_layers), draft_ids,
                       {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]})
    if hidden is None:
        with torch.no_grad():
            head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
            rows = target.get_output_embeddings().weight
            head.lm_head.weight.copy_(rows[torch.tensor(draft_ids)] if draft_ids is not None else rows)
    return head.eval()


def save_head(head: FeatureHead, tok, folder: Path, meta: dict) -> Path:
    head.save(folder, gamma=3)
    tok.save_pretrained(folder)
    (folder / "specdistill.json").write_text(json.dumps(meta, indent=2))
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("publish_heads")
    tok = make_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    target.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    # a reduced draft vocabulary: every other id, and the special ones
    ids = sorted(set(range(0, len(tok), 2)) | {tok.eos_token_id, tok.bos_token_id, tok.pad_token_id})
    head = make_head(target, ids, str(root / "target"))
    d = save_head(head, tok, root / "run" / "checkpoint-000005" / "hf", head_meta(str(root / "target"), head))
    write_report(root / "eval", d)
    return {"root": root, "target": target, "tok": tok, "head": head, "head_dir": d, "draft_ids": ids}


@pytest.fixture
def no_vllm(monkeypatch):
    """vllm_check.prove replaced by a recorder that skips (the vllm-marked test serves a head for real)."""
    calls = []

    def prove(folder, target_path, target, tok, gamma, python=None):
        calls.append({"folder": Path(folder), "target_path": target_path, "gamma": gamma,
                      "method": vllm_check.method(folder)})
        return "skip", "skipped in this test", None

    monkeypatch.setattr(vllm_check, "prove", prove)
    return calls


# --- the dry run: the folder, the checks, the card


def test_a_feature_head_publishes_as_its_speculators_folder(world, tmp_path, capsys, no_vllm):
    out = tmp_path / "out"
    code, stdout, err = run_main([world["head_dir"], "--repo-id", "org/tiny-head", "--eval", world["root"] / "eval",
                                  "--dry-run", out], capsys)
    assert code == 0, err
    # the checks: loaded and run by the bundled decoder, no transformers model anywhere
    assert re.search(r"check loads +ok +FeatureHead \(speculators eagle3\), [\d,]+ parameters, features from "
                     r"target layers \[1, 2\], draft vocabulary \d+ of 384 ids", stdout), stdout
    assert re.search(r"check lossless +ok +bundled decoder \(feature head, EAGLE-3\), γ=4, greedy: identical to "
                     r"the target on 2 prompts × 24 tokens", stdout), stdout
    assert re.search(r"check tokenizer +ok", stdout) and re.search(r"check random_init +ok", stdout)
    assert re.search(r"check vllm +skip", stdout)
    assert [(c["folder"], c["method"], c["gamma"]) for c in no_vllm] == [(out, "eagle3", 4)]  # vLLM got the head
    assert "servable" not in stdout and "AutoModelForCausalLM" not in stdout

    # the folder: the head as it was written, in bf16, γ and the verifier set, no transformers generation config
    names = {p.name for p in out.iterdir()}
    assert names >= {"config.json", "model.safetensors", "specdistill.json", "README.md", "tokenizer.json",
                     "tokenizer_config.json", "chat_template.jinja"}
    assert "generation_config.json" not in names and "draft_vocab.json" not in names and "reduced" not in names
    assert is_head_folder(out)
    config = json.loads((out / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and config["draft_vocab_size"] == len(world["draft_ids"])
    spec = config["speculators_config"]
    assert spec["proposal_methods"][0]["speculative_tokens"] == 4  # the measured best γ, not the trained-with 3
    assert spec["verifier"] == {"name_or_path": TARGET_ID, "architectures": ["LlamaForCausalLM"]}
    saved, src = load_file(out / "model.safetensors"), load_file(world["head_dir"] / "model.safetensors")
    assert saved.keys() == src.keys()
    for k, t in src.items():
        want = t.to(torch.bfloat16) if t.is_floating_point() else t
        assert saved[k].dtype == want.dtype and torch.equal(saved[k], want), k
    head = FeatureHead.load(out)
    assert head.draft_ids().tolist() == world["draft_ids"] and head.feature_layers == [1, 2]

    # the card: what it is, how to run it, the numbers, no local path
    card = ModelCard.load(out / "README.md")
    text = card.text
    assert card.data.base_model == TARGET_ID and card.data.library_name == "speculators"
    assert {"speculative-decoding", "eagle3", "speculators"} <= set(card.data.tags)
    assert {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results}[("all", "speedup")] == 1.52
    assert "EAGLE-3 style **feature head**" in text and "speculators" in text
    assert "transformers' `assistant_model=` cannot use it" in text
    assert '{"method": "eagle3", "model": "org/tiny-head",' in text and '"num_speculative_tokens": 4' in text
    assert "assistant_model=draft" not in text and "draft_model" not in text
    assert "| feature layers | 2 of the target's 4: [1, 2]" in text
    assert f"| vocabulary | {len(world['draft_ids']):,} of 384 (reduced" in text
    assert "**Best γ = 4: 1.52× the target alone**" in text
    assert "| lossless | pass | bundled decoder (feature head, EAGLE-3)" in text
    for f in ("README.md", "specdistill.json", "config.json"):
        assert str(world["root"]) not in (out / f).read_text() and "/tmp/" not in (out / f).read_text(), f


def test_the_published_head_decodes_losslessly_beside_its_target(world, tmp_path, capsys, no_vllm):
    """What the lossless check asserted, redone on the folder: load_draft, then generate equals the target alone."""
    out = tmp_path / "out"
    code, _, err = run_main([world["head_dir"], "--repo-id", "org/tiny-head", "--dry-run", out], capsys)
    assert code == 0, err
    target, tok = world["target"], world["tok"]
    draft = load_draft(str(out), target, tok)
    assert isinstance(draft.model, FeatureHead) and draft.model.dtype == torch.float32
    ids = tok.apply_chat_template([{"role": "user", "content": "Write a haiku about rain."}],
                                  add_generation_prompt=True, return_dict=False)
    eos = eos_ids(target, tok)
    ref, _ = generate(target, None, ids, 32, eos_token_ids=eos)
    got, stats = generate(target, draft.model, ids, 32, DecodeOptions(gamma=3), eos_token_ids=eos)
    assert got == ref and stats.proposed > 0


def test_the_cards_bundled_decoder_block_runs(world, tmp_path, capsys, monkeypatch, no_vllm):
    """The card's python blocks: vLLM's names method eagle3 (run in the vllm-marked test's environment only), the
    bundled decoder's runs as printed against the dry-run folder and the local target."""
    import huggingface_hub

    out = tmp_path / "out"
    code, _, err = run_main([world["head_dir"], "--repo-id", "org/tiny-head", "--dry-run", out], capsys)
    assert code == 0, err
    blocks = re.findall(r"```python\n(.*?)```", (out / "README.md").read_text(), flags=re.S)
    assert len(blocks) == 2 and "from vllm import" in blocks[0] and '"method": "eagle3"' in blocks[0]
    code = blocks[1].replace(f'"{TARGET_ID}"', repr(str(world["root"] / "target")))
    code = code.replace('"org/tiny-head"', repr(str(out)))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: repo_id)
    ns: dict = {"__name__": "__snippet__"}
    exec(compile(code, "<model card snippet>", "exec"), ns)  # noqa: S102 - the card's own code
    ref, _ = generate(ns["target"], None, ns["ids"], 128, eos_token_ids=eos_ids(ns["target"], ns["tok"]))
    assert list(ns["out"]) == ref and isinstance(ns["head"].model, FeatureHead)
    assert capsys.readouterr().out.strip()


def test_a_local_target_without_a_hub_id_is_named_nowhere(world, tmp_path, capsys, no_vllm):
    """No `target_name`: the verifier is left empty (a local path would mean nothing on the user's machine), said in
    a warning; neither config.json nor the card holds the target's folder."""
    d = tmp_path / "head"
    meta = head_meta(str(world["root"] / "target"), world["head"])
    del meta["target_name"]
    save_head(world["head"], world["tok"], d, meta)
    out = tmp_path / "out"
    code, stdout, err = run_main([d, "--repo-id", "org/tiny-head", "--dry-run", out], capsys)
    assert code == 0, err
    assert "warning: the target target has no Hub id" in stdout and "names no verifier" in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] is None
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == DEFAULT_GAMMA  # no --eval
    card = (out / "README.md").read_text()
    assert "no speed numbers were measured" in card and "alone also serves it" not in card
    for text in (card, (out / "config.json").read_text(), (out / "specdistill.json").read_text()):
        assert str(world["root"]) not in text and str(tmp_path) not in text


def test_redact_rewrites_a_head_config_and_leaves_an_hf_config(tmp_path):
    (tmp_path / "head").mkdir()
    (tmp_path / "head/config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3",
        "speculators_config": {"verifier": {"name_or_path": "/home/me/models/my-target"}}}))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf/config.json").write_text(json.dumps({"_name_or_path": "/home/me/models/x"}))
    for f in ("head", "hf"):
        redact.meta_files(tmp_path / f, {})
    head = json.loads((tmp_path / "head/config.json").read_text())
    assert head["speculators_config"]["verifier"]["name_or_path"] == "…/my-target"
    assert json.loads((tmp_path / "hf/config.json").read_text()) == {"_name_or_path": "/home/me/models/x"}


# --- heads the checks refuse


def test_a_head_of_another_target_fails_loads(world, tmp_path, capsys, no_vllm):
    d = save_head(make_head(world["target"], None, "x", hidden=32), world["tok"], tmp_path / "head",
                  head_meta(str(world["root"] / "target"), world["head"]))
    code, stdout, err = run_main([d, "--repo-id", "org/x", "--dry-run", tmp_path / "out"], capsys)
    assert code == 1 and "compatibility check failed" in err
    assert re.search(r"check loads +FAIL the bundled decoder's load_draft failed on the feature head: UserError: "
                     r".*a feature head for a 32-wide target", stdout), stdout
    assert re.search(r"check lossless +FAIL not run: the feature head does not load", stdout)
    assert not no_vllm


def test_a_head_with_a_missing_tensor_fails_loads(world, tmp_path, capsys, no_vllm):
    d = tmp_path / "head"
    save_head(world["head"], world["tok"], d, head_meta(str(world["root"] / "target"), world["head"]))
    sd = load_file(d / "model.safetensors")
    del sd["fc.weight"]
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    code, stdout, err = run_main([d, "--repo-id", "org/x", "--dry-run", tmp_path / "out"], capsys)
    assert code == 1 and re.search(r"check loads +FAIL .*missing \['fc.weight'\]", stdout), stdout


def test_a_head_vllm_would_read_differently_fails_before_any_engine(world, tmp_path, capsys, no_vllm):
    """Feature layers out of order: the bundled decoder runs them (lossless), vLLM's eagle3 would concatenate them
    in layer order, so the vllm check fails on the folder, even where vLLM is not installed."""
    d = tmp_path / "head"
    save_head(world["head"], world["tok"], d, head_meta(str(world["root"] / "target"), world["head"]))
    config = json.loads((d / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [2, 1]
    (d / "config.json").write_text(json.dumps(config))
    code, stdout, err = run_main([d, "--repo-id", "org/x", "--dry-run", tmp_path / "out"], capsys)
    assert code == 1 and re.search(r"check lossless +ok", stdout), stdout
    assert re.search(r"check vllm +FAIL vLLM's eagle3 would not serve this feature head as it was measured: "
                     r"eagle_aux_hidden_state_layer_ids \[2, 1\]", stdout), stdout
    assert not no_vllm  # refused before vLLM was asked


# --- the upload: one commit, a folder vLLM and the bundled decoder load


def test_a_head_uploads_in_one_commit(world, tmp_path, capsys, hub, no_vllm):  # noqa: F811 - the fixture
    code, out, err = run_main([world["head_dir"], "--repo-id", "org/tiny-head", "--eval", world["root"] / "eval"],
                              capsys)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["url"].endswith("/org/tiny-head")
    commits = [e for e in map(json.loads, (tmp_path / "hub_log.jsonl").read_text().splitlines())
               if e["event"] == "commit"]
    assert len(commits) == 1
    files = hub.files("org/tiny-head", "main")
    assert set(files) >= {"README.md", "config.json", "model.safetensors", "specdistill.json", "tokenizer.json"}
    local = tmp_path / "downloaded"
    local.mkdir()
    for name, data in files.items():
        (local / name).write_bytes(data)
    assert FeatureHead.load(local).draft_ids().tolist() == world["draft_ids"]
    assert TOKEN not in out + err


# --- for real: vLLM serves a published head of the default target


def _vllm_python() -> str:
    return os.environ.get("SPECDISTILL_VLLM_PYTHON", sys.executable)


def fitted_head(target, tokenizer, prompts: list[list[int]], max_tokens: int, verifier: str,
                steps: int = 40) -> FeatureHead:
    """A head of the target's shape (8,192-id vocabulary, default layers, the target's embedding, final norm and
    head rows) fitted for `steps` Adam steps on the target's own greedy continuations of `prompts`, step 0 only:
    it then drafts the next token right far more often than a random head (α 0), so α agreeing between vLLM and
    the bundled decoder says that both read the same features, token and positions."""
    cfg, vocab = target.config, 8192
    eos = eos_ids(target, tokenizer)
    torch.manual_seed(0)
    head = FeatureHead(layer_config(cfg), default_layers(cfg.num_hidden_layers), list(range(vocab)),
                       {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]})
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 2:  # not normal(0, 0.02), the target's init: 40 steps move a matrix little, and publish's
                p.normal_(0, 0.03)  # random_init check refuses one that still looks like the target's init
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[:vocab])
        head.norm.weight.copy_(target.model.norm.weight)
        data = []
        for p in prompts:
            seq = torch.tensor([p + generate(target, None, p, max_tokens, eos_token_ids=eos)[0]])
            hs = target(input_ids=seq, output_hidden_states=True).hidden_states
            f = torch.cat([hs[j] for j in head.feature_layers], -1)[0]  # (T, 3H): f_p
            data.append((seq[0, 1:-1], f[:-2], seq[0, 2:]))  # position p: x_{p+1}, f_p -> x_{p+2}
    head.embed_tokens.weight.requires_grad_(False)
    opt = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(steps):
        loss = 0.0
        for ids, f, y in data:
            out, _, _ = head(ids[None], head.fuse(f[None]), torch.arange(1, len(ids) + 1)[None])
            keep = y < vocab
            loss = loss + torch.nn.functional.cross_entropy(head.logits(out)[0][keep], y[keep])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval()


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not vllm_check.vllm_installed(_vllm_python()),
                    reason="vLLM is not importable by SPECDISTILL_VLLM_PYTHON (or this python)")
def test_publish_serves_a_default_target_head_in_vllm(tmp_path, capsys, monkeypatch):
    """publish --dry-run of a fitted head of SmolLM2-135M (8,192 ids, bf16 weights as published), its vllm check for
    real (4 prompts × 32 tokens, two engine loads; ~2.5 min on 2 cores): vLLM serves the head as `method: eagle3`,
    its greedy output equals vLLM's target alone, and its α is the bundled decoder's within tolerance (a fitted
    head drafts something right, so α compares something; a random head's is 0 in both)."""
    from decode.models.targets import DEFAULT_HUB_ID, load_target

    target, tok = load_target("default", "float32")
    prompts = vllm_check.check_prompts(tok, 4)
    monkeypatch.setattr(vllm_check, "check_prompts", lambda t: prompts)
    monkeypatch.setattr(vllm_check, "VLLM_NEW_TOKENS", 32)
    head = fitted_head(target, tok, prompts, 32, "default")
    d = save_head(head, tok, tmp_path / "head", head_meta("default", head, target_name=DEFAULT_HUB_ID))
    out = tmp_path / "out"
    code, stdout, err = run_main([d, "--repo-id", "org/smollm2-head", "--dry-run", out,
                                  "--vllm-python", _vllm_python()], capsys)
    assert code == 0, err + stdout[-3000:]
    assert re.search(rf"check vllm +ok +vLLM [\d.]+, γ={DEFAULT_GAMMA}, 4 prompts × 32 tokens: greedy output equals "
                     r"its target alone", stdout), stdout
    assert "(`method: eagle3`" in (out / "README.md").read_text()
    assert json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == \
        DEFAULT_HUB_ID
    n = json.loads(stdout.strip().splitlines()[-1])["vllm"]
    assert n["method"] == "eagle3" and n["lossless"] and n["drafted"] > 0, n
    assert n["ours_acceptance_rate"] > 0.1, n
    assert abs(n["acceptance_rate"] - n["ours_acceptance_rate"]) <= n["alpha_tolerance"], n
