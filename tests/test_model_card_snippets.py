"""Every python block of a published model card runs as printed and its generation stops at the target's EOS.

A card comes from a real `distill.publish --dry-run`; its blocks run with the repo id replaced by the dry-run folder
and the target's Hub id by the local target folder (snapshot_download of a local folder is the folder). The tiny
target's generation config names as EOS the token its greedy continuation emits fourth, so a snippet that passes
no EOS ids runs on to max_new_tokens instead of stopping there. vLLM's block runs only where vLLM is installed
(marked vllm); the real default target's card is the slow test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from decode.models.layer_cut import draft_from_layers
from decode.models.targets import load_tokenizer
from distill import publish

TARGET_ID, REPO_ID = "org/tiny-target", "org/tiny-draft"
STOP_AT = 3  # the new token (0-based) the tiny target's generation config names as EOS


def python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, flags=re.S)


def _target(root: Path, tok) -> tuple[Path, int]:
    """A tiny llama with the default tokenizer; its generation config's EOS ids: <|im_end|> and the token its greedy
    reply to the snippets' prompt emits at STOP_AT (so a stop there proves the snippet passed them)."""
    # head_dim 64: vLLM's CPU attention refuses smaller heads (head_dim 16 failed in the vLLM pass)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         initializer_range=0.3, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": "Hello!"}], add_generation_prompt=True,
                                  return_dict=False)
    x = torch.tensor([ids])
    reply = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=STOP_AT + 1, do_sample=False,
                           eos_token_id=None, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
    stop = reply[STOP_AT]
    assert stop not in reply[:STOP_AT] and tok.eos_token_id not in reply, reply  # the seed gives a clean case
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                                               eos_token_id=[tok.eos_token_id, stop])
    model.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    return root / "target", stop


def _reduced_draft(root: Path, target_dir: Path, tok, n: int = 2048) -> Path:
    """The target's layers 0 and 1 with its first n ids as a reduced vocabulary (publish expands it)."""
    target = LlamaForCausalLM.from_pretrained(target_dir).eval()
    full = draft_from_layers(target, [0, 1])
    reduced = LlamaForCausalLM(LlamaConfig(**{**full.config.to_dict(), "vocab_size": n})).eval()
    sd = full.state_dict()
    for k in ("model.embed_tokens.weight", "lm_head.weight"):
        sd[k] = sd[k][:n].clone()
    reduced.load_state_dict(sd)
    d = root / "draft"
    reduced.save_pretrained(d)
    tok.save_pretrained(d)
    (d / "draft_vocab.json").write_text(json.dumps({"draft_to_target": list(range(n))}))
    (d / "specdistill.json").write_text(json.dumps({
        "target": str(target_dir), "target_name": TARGET_ID, "step": 1,
        "design": {"layers": [0, 1], "vocab": n, "init": "target_layers"},
        "commands": ["python -m distill.train --target T --output runs/draft"]}))
    return d


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    root = tmp_path_factory.mktemp("snippets")
    tok = load_tokenizer("default")
    target_dir, stop = _target(root, tok)
    draft = _reduced_draft(root, target_dir, tok)
    # publish's own vLLM check serves the real default target in the README walk; here only the card
    # matters, so the check is skipped (it would serve this tiny pair in vLLM for minutes)
    from distill.publish import vllm_check

    with pytest.MonkeyPatch.context() as mp, _no_exit():
        mp.setattr(vllm_check, "prove", lambda *a, **k: ("skip", "skipped in this test", None))
        publish.main([str(draft), "--repo-id", REPO_ID, "--dry-run", str(root / "repo")])
    return {"text": (root / "repo" / "README.md").read_text(), "repo": root / "repo", "target": target_dir,
            "stop": stop}


class _no_exit:
    """publish.main exits only on an error: turn that into a failure that shows its line."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is SystemExit:
            pytest.fail(f"publish --dry-run failed: exit {value.code}")
        return False


def run_block(code: str, substitutions: dict[str, str], monkeypatch) -> dict:
    """Exec one block with the Hub ids replaced by local folders; its namespace afterwards."""
    for hub_id, local in substitutions.items():
        code = code.replace(f'"{hub_id}"', repr(str(local)))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: repo_id)
    namespace: dict = {"__name__": "__snippet__"}
    exec(compile(code, "<model card snippet>", "exec"), namespace)  # noqa: S102 - the card's own code
    return namespace


def new_tokens(namespace: dict) -> list[int]:
    """The generated ids of a transformers block (`out`, `inputs`) or a bundled-decoder block (`out`)."""
    out = namespace["out"]
    if "inputs" in namespace:
        return out[0, namespace["inputs"]["input_ids"].shape[1]:].tolist()
    return list(out)


def test_every_python_block_runs_and_stops_at_eos(card, monkeypatch, capsys):
    """Before, the bundled decoder's block handed apply_chat_template's dict to the decoder (RuntimeError: Could
    not infer dtype of tokenizers.Encoding) and passed no EOS ids, so it ran on to max_new_tokens."""
    blocks = python_blocks(card["text"])
    assert len(blocks) == 3  # transformers, vLLM, the bundled decoder on reduced/
    ran = 0
    for code in blocks:
        if "from vllm import" in code:
            continue  # test_the_vllm_block_runs, where vLLM is installed
        ns = run_block(code, {TARGET_ID: card["target"], REPO_ID: card["repo"]}, monkeypatch)
        got = new_tokens(ns)
        assert got[-1] == card["stop"] and len(got) == STOP_AT + 1, (got, code)
        ran += 1
    assert ran == 2 and capsys.readouterr().out.count("\n") >= 2


def test_the_card_says_how_to_get_the_bundled_decoder(card):
    m = re.search(r"```bash\n(pip install [^\n]+)\n```\n\n```python\nfrom huggingface_hub import snapshot_download",
                  card["text"])
    assert m and "specdistill" in m.group(1), card["text"]
    assert not re.search(r"//[^/\s]*@", m.group(1))  # a remote's user:token@ never reaches the card


@pytest.mark.vllm
def test_the_vllm_block_runs(card, monkeypatch, capsys):
    pytest.importorskip("vllm")
    code = next(b for b in python_blocks(card["text"]) if "from vllm import" in b)
    run_block(code, {TARGET_ID: card["target"], REPO_ID: card["repo"]}, monkeypatch)
    assert capsys.readouterr().out.strip()


@pytest.mark.slow
def test_the_default_targets_card_runs_and_stops_at_im_end(tmp_path, monkeypatch, capsys):
    """The real SmolLM2-135M-Instruct target: a greedy reply to "Hello!" ends with <|im_end|> well before 128 tokens."""
    from decode.models.targets import DEFAULT_HUB_ID, load_target, resolve

    target, tok = load_target("default", "float32")
    d = tmp_path / "draft"
    draft_from_layers(target, [0, 29]).save_pretrained(d)
    tok.save_pretrained(d)
    (d / "specdistill.json").write_text(json.dumps({"target": "default", "step": 1,
                                                    "design": {"layers": [0, 29], "init": "target_layers"}}))
    with _no_exit():
        publish.main([str(d), "--repo-id", REPO_ID, "--dry-run", str(tmp_path / "repo")])
    card = (tmp_path / "repo" / "README.md").read_text()
    code = python_blocks(card)[0]
    assert "from transformers import" in code and DEFAULT_HUB_ID in code
    ns = run_block(code, {DEFAULT_HUB_ID: resolve("default"), REPO_ID: tmp_path / "repo"}, monkeypatch)
    got = new_tokens(ns)
    assert got[-1] == tok.convert_tokens_to_ids("<|im_end|>") and len(got) < 128, tok.decode(got)
