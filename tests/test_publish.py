"""distill.publish: assemble, check, card, upload to a local Hub stand-in, download back, bad input.

The drafts here are cut from a tiny random llama that is its own target (a BPE tokenizer trained on the bundled
prompts, 4 layers of width 64), so everything but the one real-model test runs in seconds on CPU. The full
publish runs in a subprocess with HF_ENDPOINT set (huggingface_hub reads it at import); the in-process tests
point huggingface_hub.constants.ENDPOINT at the stand-in instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
import torch
from hub_standin import HubStandin
from huggingface_hub import ModelCard, hf_hub_download, snapshot_download
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from decode.models.draft_folder import VOCAB_MAP_FILE
from decode.models.layer_cut import draft_from_layers
from distill import publish
from distill.publish import behaviour, compat, modelcard

REPO = Path(__file__).resolve().parents[1]
TOKEN = "hf_standinSECRETtoken0123456789"
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# --- fixtures: a tiny target, drafts cut from it, an evaluation report


def make_tokenizer() -> PreTrainedTokenizerFast:
    lines = (REPO / "distill/data/train.jsonl").read_text().splitlines()[:300]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([json.loads(x)["messages"][0]["content"] for x in lines], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT
    return fast


def save_draft(model, tok, path: Path, meta: dict) -> Path:
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "specdistill.json").write_text(json.dumps(meta))
    return path


def draft_meta(target_spec: str, **extra) -> dict:
    return {
        "target": target_spec,
        "target_name": "org/tiny-target",
        "design": {
            "layers": [0, 3],
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "init": "target_layers",
            "vocab": "full",
        },
        "loss": {"fkl": 1.0},
        "data": {"path": "runs/data", "rows": 10, "tokens": 1000, "prompts": "train.jsonl"},
        "step": 5,
        "commands": [
            "python -m distill.collect --target T --output runs/data",
            "accelerate launch distill/train.py --target T --output runs/draft",
        ],
        **extra,
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("publish")
    tok = make_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    target.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    draft = draft_from_layers(target, [0, 3])
    save_draft(draft, tok, root / "draft", draft_meta(str(root / "target")))
    write_report(root / "eval", root / "draft")
    return {"root": root, "target": target, "tok": tok, "draft": draft}


def write_report(eval_dir: Path, draft_dir: Path, draft_name: str | None = None) -> Path:
    """A report in distill.evaluate's shape: entries per draft × γ (plus an untrained `layers:` anchor)."""
    entries = []
    runs = [
        (draft_name or str(draft_dir), True, g, s, a)
        for g, s, a in ((2, 1.31, 0.71), (4, 1.52, 0.66), (6, 1.40, 0.60))
    ]
    runs.append(
        ("layers:0,3", False, 4, 1.9, 0.8)
    )  # an anchor with a better speedup: never the published draft
    for draft, trained, gamma, speedup, alpha in runs:
        tau = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        entries.append(
            {
                "target": "t",
                "draft": draft,
                "trained": trained,
                "device": "cpu (2 cores)",
                "dtype": "float32",
                "prompts": 120,
                "max_new_tokens": 64,
                "temperature": 0.0,
                "gamma": gamma,
                "schedule": "constant",
                "baseline": {"tokens": 640, "seconds": 10.0, "tokens_per_s": 64.0},
                "speculative": {
                    "tokens": 640,
                    "seconds": 10 / speedup,
                    "tokens_per_s": 64 * speedup,
                    "acceptance_rate": alpha,
                    "tau": tau,
                },
                "speedup": speedup,
                "lossless": True,
                "cost_model": {},
                "per_category": {
                    "chat": {"acceptance_rate": alpha + 0.05, "tau": tau + 0.1, "speedup": speedup + 0.1},
                    "code": {"acceptance_rate": alpha - 0.1, "tau": tau - 0.3, "speedup": speedup - 0.2},
                },
            }
        )
    # the same draft decoded with the context lookup: faster, but not the draft's own number, never on the card
    entries.append({**entries[0], "lookup": 2, "label": "step 500 + lookup 2", "speedup": 2.5})
    eval_dir.mkdir(parents=True, exist_ok=True)
    (eval_dir / "report.json").write_text(json.dumps({"prompt_set": "heldout", "entries": entries}))
    return eval_dir


def copy_draft(world, name: str) -> Path:
    dst = world["root"] / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(world["root"] / "draft", dst)
    return dst


def run_main(argv, capsys) -> tuple[int, str, str]:
    try:
        publish.main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The stand-in, with in-process huggingface_hub pointed at it and no cached login."""
    with HubStandin(token=TOKEN, log=tmp_path / "hub_log.jsonl") as h:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", h.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield h


# --- the full publish, as a user runs it


def test_publish_roundtrip_against_standin(world, tmp_path):
    draft = copy_draft(world, "draft_tracked")
    meta = json.loads((draft / "specdistill.json").read_text())
    meta["wandb"] = {"project": "specdistill-test", "run_id": "pubtest01", "dir": str(tmp_path / "wandb")}
    (draft / "specdistill.json").write_text(json.dumps(meta))
    write_report(tmp_path / "eval", draft)
    log = tmp_path / "hub_log.jsonl"
    with HubStandin(token=TOKEN, log=log) as hub:
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": TOKEN,
            "HF_HOME": str(tmp_path / "hf_home"),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "distill.publish",
                str(draft),
                "--repo-id",
                "org/tiny-draft",
                "--eval",
                str(tmp_path / "eval"),
                "--private",
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["url"] == f"{hub.url}/org/tiny-draft" and result["gamma"] == 4  # best measured speedup
        assert hub.repos["org/tiny-draft"].private

        # one commit holds the whole draft
        events = [json.loads(x) for x in log.read_text().splitlines()]
        commits = [e for e in events if e["event"] == "commit"]
        assert len(commits) == 1 and commits[0]["commit"] == result["commit"]
        assert {f["path"] for f in commits[0]["files"]} >= {
            "README.md",
            "config.json",
            "model.safetensors",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "specdistill.json",
        }

        # download back through huggingface_hub, load with transformers
        local = Path(
            snapshot_download("org/tiny-draft", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "dl")
        )
        readme = hf_hub_download(
            "org/tiny-draft", "README.md", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "dl2"
        )
    model = AutoModelForCausalLM.from_pretrained(local)
    assert model.dtype == torch.bfloat16 and model.config.num_hidden_layers == 2
    assert AutoTokenizer.from_pretrained(local).get_vocab() == world["tok"].get_vocab()
    gc = json.loads((local / "generation_config.json").read_text())
    assert (gc["num_assistant_tokens"], gc["num_assistant_tokens_schedule"]) == (4, "constant")
    x = torch.tensor([world["tok"]("Hello there")["input_ids"]])
    draft_model = AutoModelForCausalLM.from_pretrained(local, dtype=torch.float32)
    greedy = dict(do_sample=False, max_new_tokens=12, attention_mask=torch.ones_like(x))
    assert torch.equal(
        world["target"].generate(x, assistant_model=draft_model, **greedy),
        world["target"].generate(x, **greedy),
    )

    # the card's model-index round-trips
    card = ModelCard.load(readme)
    assert card.data.base_model == "org/tiny-target"
    assert {"speculative-decoding", "draft-model"} <= set(card.data.tags)
    report = json.loads((tmp_path / "eval/report.json").read_text())
    best = modelcard.headline(modelcard.select_entries(report, tmp_path / "eval/report.json", draft))
    assert card.data.eval_results == modelcard.eval_results(best, "org/tiny-target")
    got = {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert got[("all", "speedup")] == 1.52 and got[("chat", "acceptance_rate")] == pytest.approx(0.71)
    assert all(
        r.metric_args["gamma"] == 4 and r.metric_args["device"] == "cpu (2 cores)"
        for r in card.data.eval_results
    )

    # W&B (offline): the run got the URL and numbers, and the folder as an artifact
    runs = list((tmp_path / "wandb").rglob("run-pubtest01.wandb"))
    assert runs, "no offline W&B run file"
    blob = b"".join(p.read_bytes() for p in runs)
    assert result["url"].encode() in blob and b"draft-org--tiny-draft" in blob and b"publish/speedup" in blob

    # the token never appears in output or logs
    logs = [proc.stdout, proc.stderr, log.read_text()] + [
        p.read_text(errors="replace") for p in (tmp_path / "wandb").rglob("*") if p.is_file()
    ]
    assert not any(TOKEN in text for text in logs)


def test_dry_run_writes_folder_without_network(world, tmp_path, capsys, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    out = tmp_path / "out"
    code, stdout, _ = run_main([world["root"] / "draft", "--repo-id", "org/x", "--dry-run", out], capsys)
    assert code == 0 and hub.requests == []
    assert {p.name for p in out.iterdir()} >= {
        "README.md",
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    }
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for t in load_file(out / "model.safetensors").values())
    card = (out / "README.md").read_text()
    assert "no speed numbers were measured" in card and "warning: no --eval" in stdout
    # --dtype float32 keeps full precision
    code, _, _ = run_main(
        [world["root"] / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "f32", "--dtype", "float32"],
        capsys,
    )
    assert code == 0 and all(
        t.dtype == torch.float32 for t in load_file(tmp_path / "f32/model.safetensors").values()
    )


def test_card_numbers_and_model_index(world):
    report = json.loads((world["root"] / "eval/report.json").read_text())
    entries = modelcard.select_entries(report, world["root"] / "eval/report.json", world["root"] / "draft")
    best = modelcard.headline(entries)
    checks = [compat.Check("loads", True, "ok")]
    card = modelcard.build_card(
        repo_id="org/d",
        target_id="org/t",
        target_spec="default",
        meta=draft_meta("default"),
        config={"vocab_size": 384, "architectures": ["LlamaForCausalLM"]},
        target_config={"num_hidden_layers": 4, "vocab_size": 384},
        n_params=1000,
        weights_dtype="bfloat16",
        entries=entries,
        checks=checks,
        gamma=best["gamma"],
        reduced=False,
    )
    text = str(card)
    assert (
        best["gamma"] == 4 and "Best γ = 4: 1.52×" in text and "cpu (2 cores)" in text and "float32" in text
    )
    for needle in (
        "| chat |",
        "| code |",
        "2 of the target's 4: [0, 3]",
        "1.0 × fkl",
        "accelerate launch distill/train.py",
        "assistant_model=draft",
        "speculative_config",
    ):
        assert needle in text
    again = ModelCard(text)
    assert again.data.eval_results == card.data.eval_results
    assert len(again.data.eval_results) == 3 * 3  # (all, chat, code) × (α, τ, speedup)


@pytest.mark.slow
def test_publish_with_a_real_evaluation_report(world, tmp_path, capsys):
    """The card's numbers come straight from a report distill.evaluate wrote for this draft."""
    from distill import evaluate

    draft = str(world["root"] / "draft")
    cfg = evaluate.EvalConfig(
        target=str(world["root"] / "target"),
        drafts=[draft],
        limit=2,
        max_new_tokens=8,
        gamma=[2, 3],
        output=str(tmp_path / "eval"),
        anchors=False,
    )
    evaluate.run(cfg, [])
    capsys.readouterr()
    code, _, err = run_main(
        [draft, "--repo-id", "org/x", "--eval", tmp_path / "eval", "--dry-run", tmp_path / "o"], capsys
    )
    assert code == 0, err
    report = json.loads((tmp_path / "eval/report.json").read_text())
    best = max((e for e in report["entries"] if e["draft"] == draft), key=lambda e: e["speedup"])
    card = ModelCard.load(tmp_path / "o/README.md")
    got = {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert got[("all", "speedup")] == round(best["speedup"], 4)
    assert got[("all", "acceptance_rate")] == round(best["speculative"]["acceptance_rate"], 4)
    for cat, row in best["per_category"].items():
        assert got[(cat, "tau")] == round(row["tau"], 4)
    assert f"γ = **{best['gamma']}**" in card.text and report["prompt_set"] in card.text
    assert (
        json.loads((tmp_path / "o/generation_config.json").read_text())["num_assistant_tokens"]
        == best["gamma"]
    )


# --- each compatibility check fails on a draft built to fail it


def _drop_embedding(d: Path, world) -> None:
    sd = load_file(d / "model.safetensors")
    sd.pop("model.embed_tokens.weight")
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})


def _other_tokenizer(d: Path, world) -> None:
    tok = AutoTokenizer.from_pretrained(d)
    tok.add_tokens(["<extra_token>"])
    tok.save_pretrained(d)


def _padded_vocab(d: Path, world) -> None:
    model = AutoModelForCausalLM.from_pretrained(d)
    model.resize_token_embeddings(model.config.vocab_size + 64)
    model.save_pretrained(d)


def _random_embedding(d: Path, world) -> None:
    model = AutoModelForCausalLM.from_pretrained(d)
    torch.manual_seed(123)
    torch.nn.init.normal_(model.model.embed_tokens.weight, 0.0, model.config.initializer_range)
    model.save_pretrained(d)


def _edit_config(**changes):
    def edit(d: Path, world) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(changes)
        (d / "config.json").write_text(json.dumps(cfg))

    return edit


@pytest.mark.parametrize(
    "name, breaker, check, detail",
    [
        ("no_embedding", _drop_embedding, "loads", "initialised them at random"),
        ("padded_vocab", _padded_vocab, "lossless", "transformers assisted generation failed"),
        ("random_embedding", _random_embedding, "random_init", "model.embed_tokens.weight"),
        ("unknown_arch", _edit_config(architectures=["MyDraftForCausalLM"]), "vllm", "not one vLLM serves"),
        (
            "short_context",
            _edit_config(max_position_embeddings=128),
            "vllm",
            "max_position_embeddings 128 < the target's 512",
        ),
        ("padded_vocab_vllm", _padded_vocab, "vllm", "vocab_size 448 differs from the target's 384"),
    ],
)
def test_check_fails_on_draft_built_to_fail_it(world, tmp_path, capsys, hub, name, breaker, check, detail):
    d = copy_draft(world, f"broken_{name}")
    breaker(d, world)
    code, stdout, err = run_main([d, "--repo-id", "org/broken", "--eval", world["root"] / "eval"], capsys)
    assert code == 1 and "Traceback" not in err
    assert "compatibility check failed, nothing uploaded" in err and f"{check}: " in err and detail in err, (
        err
    )
    assert f"check {check:<11} FAIL" in stdout
    assert not [r for r in hub.requests if r[0] == "POST"]  # stopped before any upload


def test_a_draft_with_another_tokenizer_is_refused_before_the_target_loads(world, capsys, hub, monkeypatch):
    """Before, the tokenizer mismatch surfaced as the `tokenizer` check, after the target had loaded and the folder
    was assembled (minutes on a large target); now publish compares the two tokenizers first."""
    import distill.publish.job as job

    d = copy_draft(world, "broken_other_tokenizer")
    _other_tokenizer(d, world)
    monkeypatch.setattr(job, "load_target", lambda *a: pytest.fail("the target loaded before the tokenizer check"))
    code, _, err = run_main([d, "--repo-id", "org/broken", "--eval", world["root"] / "eval"], capsys)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "vs target" in err and "vocabulary size 384 vs 385" in err and not hub.requests


def test_random_init_heuristic():
    torch.manual_seed(0)
    assert behaviour.looks_like_init(torch.randn(256, 64) * 0.02, 0.02)
    assert not behaviour.looks_like_init(torch.randn(256, 64) * 0.1, 0.02)  # trained-looking spread
    assert not behaviour.looks_like_init(
        torch.distributions.Laplace(0, 0.0141).sample((256, 64)), 0.02
    )  # heavy tails
    assert not behaviour.looks_like_init(torch.ones(4096), 0.02) and not behaviour.looks_like_init(
        torch.zeros(64, 64), 0.02
    )


# --- reduced vocabulary


def test_reduced_vocab_draft(world, tmp_path, capsys):
    vocab_map = list(range(200))
    cfg = LlamaConfig(**{**world["draft"].config.to_dict(), "vocab_size": len(vocab_map)})
    reduced = LlamaForCausalLM(cfg).eval()
    sd = world["draft"].state_dict()
    for k in ("model.embed_tokens.weight", "lm_head.weight"):
        sd[k] = sd[k][vocab_map].clone()
    reduced.load_state_dict(sd)
    d = save_draft(
        reduced,
        world["tok"],
        tmp_path / "reduced",
        draft_meta(
            str(world["root"] / "target"), design={"layers": [0, 3], "vocab": 200, "init": "target_layers"}
        ),
    )
    (d / VOCAB_MAP_FILE).write_text(json.dumps({"draft_to_target": vocab_map}))
    code, stdout, err = run_main([d, "--repo-id", "org/reduced", "--dry-run", tmp_path / "out"], capsys)
    assert code == 0, err
    out = tmp_path / "out"
    # the top level is the expanded, full-vocabulary draft; the trained form is in reduced/ with its map
    assert not (out / VOCAB_MAP_FILE).exists()
    assert json.loads((out / "reduced" / VOCAB_MAP_FILE).read_text())["draft_to_target"] == vocab_map
    config = json.loads((out / "config.json").read_text())
    assert (config["vocab_size"], config["tie_word_embeddings"]) == (384, False)
    assert "check lossless    ok   transformers assisted generation" in stdout
    assert "check servable    ok" in stdout and "check lossless_reduced ok   bundled decoder" in stdout
    assert "check vllm        skip skipped: vLLM is not installed" in stdout
    card = (out / "README.md").read_text()
    assert "reduced vocabulary" in card and "200 of 384" in card and "vocab_map=draft.vocab_map" in card
    assert '+ "/reduced"' in card and "assistant_model=draft" in card and "| vllm | skipped |" in card


# --- bad input


def test_not_a_checkpoint(world, tmp_path, capsys):
    code, _, err = run_main(
        [tmp_path / "nowhere", "--repo-id", "org/x", "--dry-run", tmp_path / "o1"], capsys
    )
    assert code == 1 and "is not a folder" in err
    run = tmp_path / "run"
    shutil.copytree(world["root"] / "draft", run / "checkpoint-5")
    code, _, err = run_main([run, "--repo-id", "org/x", "--dry-run", tmp_path / "o2"], capsys)
    assert (
        code == 1 and "is not a draft checkpoint" in err and "checkpoint-5" in err and "Traceback" not in err
    )
    plain = tmp_path / "plain"
    shutil.copytree(world["root"] / "draft", plain)
    (plain / "specdistill.json").unlink()
    code, _, err = run_main([plain, "--repo-id", "org/x", "--dry-run", tmp_path / "o3"], capsys)
    assert code == 1 and "no specdistill.json" in err


def test_missing_eval(world, tmp_path, capsys):
    code, _, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "o", "--require-eval"], capsys
    )
    assert code == 1 and "--require-eval" in err
    code, _, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "o", "--eval", tmp_path],
        capsys,
    )
    assert code == 1 and "no evaluation report" in err
    other = tmp_path / "other_eval"
    write_report(other, tmp_path / "a")
    report = json.loads((other / "report.json").read_text())
    report["entries"] += [{**e, "draft": str(tmp_path / "b")} for e in report["entries"]]
    (other / "report.json").write_text(json.dumps(report))
    code, _, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "o", "--eval", other], capsys
    )
    assert code == 1 and "has no entry for" in err and str(tmp_path / "b") in err


def test_a_pipelines_shipped_draft_takes_the_pipelines_own_evaluation(world, tmp_path, capsys):
    """publish RUN/draft with no --eval: the card's numbers are RUN/eval's for the folder the pipeline copied to
    RUN/draft (pipeline.json `shipped`), with the row confirmed on every prompt in place of the screen's, and
    publish says which numbers it used."""
    run = tmp_path / "run"
    src = run / "train" / "checkpoint-000004" / "hf"
    shutil.copytree(world["root"] / "draft", src)
    shutil.copytree(src, run / "draft")
    write_report(run / "eval", src)
    report = json.loads((run / "eval" / "report.json").read_text())
    confirmed = {**report["entries"][1], "prompts": 360, "speedup": 1.47, "confirmed": True}  # γ 4, all prompts
    report["entries"].append(confirmed)
    (run / "eval" / "report.json").write_text(json.dumps(report))
    shipped = {"from": str(src), "folder": str(run / "draft"), "speedup": 1.6, "gamma": 4}
    (run / "pipeline.json").write_text(json.dumps({"shipped": shipped}))
    code, stdout, err = run_main([run / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "out"], capsys)
    assert code == 0, err
    alpha, tau = confirmed["speculative"]["acceptance_rate"], confirmed["speculative"]["tau"]
    assert (f"publish: numbers from the pipeline's evaluation {run / 'eval' / 'report.json'} ({src}, shipped to "
            f"{run / 'draft'}): γ 4, α {alpha}, τ {tau}, speedup 1.47x on 360 prompts") in stdout
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Best γ = 4: 1.47×" in card and f"{alpha:.3f}" in card and f"{tau:.2f}" in card
    assert "no speed numbers were measured" not in card


@pytest.mark.parametrize(
    "repo_id", ["not a repo", "org/name/extra", "org/bad--name", "justaname", "org/.hidden"]
)
def test_invalid_repo_id(world, tmp_path, capsys, repo_id):
    code, _, err = run_main(
        [world["root"] / "draft", "--repo-id", repo_id, "--dry-run", tmp_path / "o"], capsys
    )
    assert code == 1 and err.startswith("error: invalid --repo-id") and "Traceback" not in err


def test_missing_token(world, capsys, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    code, _, err = run_main([world["root"] / "draft", "--repo-id", "org/x"], capsys)
    assert code == 1 and "no Hugging Face token" in err and hub.requests == []


def test_http_error_on_commit_leaves_remote_unchanged(world, capsys, hub):
    hub.fail["commit"] = 500
    code, out, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/fails", "--eval", world["root"] / "eval"], capsys
    )
    assert code == 1 and "Traceback" not in err
    assert "the commit of" in err and "500" in err and "remote repo is unchanged" in err
    assert set(hub.files("org/fails")) == {".gitattributes"}  # nothing half-committed
    assert TOKEN not in out + err + hub.log_path.read_text()
    del hub.fail["commit"]  # a re-run then succeeds
    code, out, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/fails", "--eval", world["root"] / "eval"], capsys
    )
    assert code == 0, err
    assert "model.safetensors" in hub.files("org/fails") and TOKEN not in out + err


def test_http_error_on_create_and_bad_token(world, capsys, hub, monkeypatch):
    hub.fail["create"] = 403
    code, _, err = run_main([world["root"] / "draft", "--repo-id", "org/nope"], capsys)
    assert code == 1 and "creating org/nope" in err and "403" in err and "Nothing was uploaded" in err
    del hub.fail["create"]
    monkeypatch.setenv("HF_TOKEN", "hf_wrongWRONGwrong")
    code, out, err = run_main([world["root"] / "draft", "--repo-id", "org/nope", "--revision", "exp"], capsys)
    assert code == 1 and "401" in err and "hf_wrongWRONGwrong" not in out + err
    assert hub.repos == {}


def test_revision_branch(world, capsys, hub):
    code, out, err = run_main(
        [world["root"] / "draft", "--repo-id", "org/branchy", "--revision", "exp-1"], capsys
    )
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["url"].endswith("/org/branchy/tree/exp-1")
    assert set(hub.files("org/branchy", "main")) == {".gitattributes"}
    assert "README.md" in hub.files("org/branchy", "exp-1")


# --- the real default target (SmolLM2-135M-Instruct): a draft of its first and last layers


@pytest.mark.slow
def test_publish_default_target_draft(tmp_path):
    from decode.models.targets import load_target

    target, tok = load_target("default", "float32")
    draft = draft_from_layers(target, [0, 29])
    meta = {
        **draft_meta("default"),
        "target_name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "design": {"layers": [0, 29], "init": "target_layers", "vocab": "full"},
    }
    d = save_draft(draft, tok, tmp_path / "draft", meta)
    write_report(tmp_path / "eval", d)
    with HubStandin(token=TOKEN, log=tmp_path / "hub_log.jsonl") as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "hf_home")}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "distill.publish",
                str(d),
                "--repo-id",
                "org/smollm2-draft",
                "--eval",
                str(tmp_path / "eval"),
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        local = Path(
            snapshot_download("org/smollm2-draft", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "dl")
        )
    assert "check lossless    ok" in proc.stdout and "check random_init ok" in proc.stdout
    assert ModelCard.load(local / "README.md").data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert AutoModelForCausalLM.from_pretrained(local).config.num_hidden_layers == 2
    assert TOKEN not in proc.stdout + proc.stderr + (tmp_path / "hub_log.jsonl").read_text()


# --- the target at users' scale: its own working dtype, with low precision's near-ties allowed


def test_checks_load_the_target_in_its_working_dtype(world, tmp_path, capsys, monkeypatch):
    """Before, the checks loaded the target in float32 (a 70B target: 280 GB); now "auto" (bf16 on a GPU, float32
    on this CPU) on the --device as given (placement may spread it over GPUs)."""
    import distill.publish.job as job

    seen, real = [], job.load_target

    def spy(spec, dtype, device):
        seen.append((dtype, device))
        return real(spec, dtype, device)

    monkeypatch.setattr(job, "load_target", spy)
    code, stdout, _ = run_main([world["root"] / "draft", "--repo-id", "org/x", "--dry-run", tmp_path / "o"], capsys)
    assert code == 0 and seen == [("auto", "auto")] and "check lossless    ok" in stdout


@pytest.mark.usefixtures("torch_single_thread")  # bf16 matmuls on a few threads of a busy CPU crawl
def test_the_lossless_check_takes_decode_lossless_rule_for_the_targets_dtype(world):
    """check_lossless in bf16: a verification's logits differ in rounding from one token's, so greedy outputs may
    part at a near-tie; decode.drafting.lossless's numeric rule (ε calibrated on this target) excuses those and no others
    (tests/test_lossless_rule.py), and float32 keeps the exact rule."""
    import copy

    for dtype, rule in ((torch.bfloat16, "numeric"), (torch.float32, "exact")):
        target = LlamaForCausalLM(world["target"].config).to(dtype).eval()
        target.load_state_dict(world["target"].state_dict())
        c = compat.check_lossless(target, world["tok"], copy.deepcopy(target), None, 3, max_new_tokens=12)
        assert c.ok, c.detail
        assert c.numbers["lossless_rule"] == rule and (c.numbers["epsilon"] > 0) == (rule == "numeric")
        assert c.numbers["excused_divergences"] == len(c.numbers["excused_margins"])
        assert all(m <= c.numbers["epsilon"] for m in c.numbers["excused_margins"])


# --- what leaves the machine: no local paths; what the user reads: warnings, not silent packaging


def test_the_card_and_specdistill_json_hold_no_local_absolute_path(world, tmp_path, capsys):
    """Before, the card and the uploaded specdistill.json carried the target's folder, the data's and the run's
    absolute paths (and the train config's); now a local path becomes relative to where publish runs, or its name."""
    d = copy_draft(world, "draft_with_paths")
    root = str(world["root"])
    meta = draft_meta(f"{root}/target", target_name=f"{root}/target", commands=[
        f"python -m distill.collect --target {root}/target --output {root}/runs/collect",
        f"python -m distill.train --data {root}/runs/collect --output {root}/runs/train"])
    meta["data"] = {"path": f"{root}/runs/collect", "rows": 10, "tokens": 1000, "prompts": "train"}
    meta["train_config"] = {"data": f"{root}/runs/collect", "output": f"{root}/runs/train", "lr": 0.003}
    (d / "specdistill.json").write_text(json.dumps(meta))
    write_report(tmp_path / "eval", d)
    out = tmp_path / "out"
    code, stdout, err = run_main([d, "--repo-id", "org/x", "--eval", tmp_path / "eval", "--dry-run", out], capsys)
    assert code == 0, err
    card, record = (out / "README.md").read_text(), (out / "specdistill.json").read_text()
    for text in (card, record):
        assert root not in text and str(tmp_path) not in text and "/tmp/" not in text
    assert "python -m distill.train --data …/collect --output …/train" in card  # the command as training recorded it
    assert "accelerate launch" not in card
    assert "`target`" in card and "| rows" not in card  # the local target by its folder name
    saved = json.loads(record)
    assert saved["data"] == {"path": "…/collect", "rows": 10, "tokens": 1000, "prompts": "train"}
    assert saved["train_config"]["lr"] == 0.003 and saved["target"] == "target"


def test_redact_keeps_urls_relative_paths_and_the_reduced_suffix():
    from distill.publish import redact

    text = ('see https://huggingface.co/org/x and runs/a/b; snapshot_download("org/x") + "/reduced"; '
            "data at /home/me/data/my-prompts.jsonl. Under /work/repo/runs/p/collect: ok; 12 tokens/s")
    got = redact.text(text, cwd=Path("/work/repo"))
    assert got == ('see https://huggingface.co/org/x and runs/a/b; snapshot_download("org/x") + "/reduced"; '
                   "data at …/my-prompts.jsonl. Under runs/p/collect: ok; 12 tokens/s")


def test_a_draft_slower_than_the_target_is_said_on_the_card_and_in_the_output(world, tmp_path, capsys):
    report = json.loads((world["root"] / "eval/report.json").read_text())
    for e in report["entries"]:
        e["speedup"] = round(e["speedup"] * 0.4 / 1.52, 3)  # the best γ measured 0.40×
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval/report.json").write_text(json.dumps(report))
    code, stdout, err = run_main([world["root"] / "draft", "--repo-id", "org/x", "--eval", tmp_path / "eval",
                                  "--dry-run", tmp_path / "o"], capsys)
    assert code == 0, err
    line = "the draft is SLOWER than the target alone in the bundled decoder: 0.40× at its best γ = 4"
    assert f"warning: {line}" in stdout and f"> **Warning: {line}" in (tmp_path / "o/README.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--repo-id", "org/x"], "no Hugging Face token"),
    (["--repo-id", "org/x", "--eval", "EVAL"], "no evaluation report"),
    (["--repo-id", "org/x/y"], "invalid --repo-id"),
    (["--repo-id", "org/x", "--dry-run", "FILE"], "is a file, not a folder"),
    (["--repo-id", "org/x", "--target", "NOWHERE"], "model not found"),
])
def test_the_command_line_is_checked_before_the_target_loads(world, tmp_path, capsys, hub, monkeypatch, argv, message):
    import distill.publish.job as job

    if message == "no Hugging Face token":
        monkeypatch.delenv("HF_TOKEN")
    (tmp_path / "FILE").write_text("x")
    paths = {"EVAL": str(tmp_path), "FILE": str(tmp_path / "FILE"), "NOWHERE": str(tmp_path / "nowhere")}
    monkeypatch.setattr(job, "load_target", lambda *a: pytest.fail("the target loaded before the inputs were checked"))
    code, _, err = run_main([world["root"] / "draft", *[paths.get(a, a) for a in argv]], capsys)
    assert code == 1 and message in err and err.count("\n") == 1 and not hub.requests


def test_offline_mode_is_one_line_before_any_work(world, capsys, hub, monkeypatch):
    """Before, HF_HUB_OFFLINE=1 let publish assemble and check everything, then died in create_repo with a
    traceback (OfflineModeIsEnabled)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    code, out, err = run_main([world["root"] / "draft", "--repo-id", "org/x"], capsys)
    assert code == 1 and "HF_HUB_OFFLINE is set, but uploading needs the Hub" in err and "--dry-run" in err
    assert "assembled" not in out and not hub.requests


def test_a_check_that_looked_at_nothing_says_skip_not_ok(world):
    from types import SimpleNamespace

    draft = SimpleNamespace(config=SimpleNamespace())  # a config without initializer_range
    check = compat.check_random_init(draft, world["target"])
    assert check.ok and check.skipped and "skipped" in check.detail


def test_a_heads_card_shows_its_measured_tree_and_a_static_tree_for_vllm(tmp_path):
    """Tree entries stay out of the card's chain numbers; the card shows them apart, and for a head the static
    tree their acceptance by rank suggests, in vLLM's speculative_token_tree form."""
    chain = {"draft": "d", "gamma": 2, "speedup": 1.10, "speculative": {"tau": 1.45}, "lossless": True}
    tree = {"draft": "d", "gamma": 2, "tree_nodes": 6, "speedup": 1.21, "speculative": {"tau": 1.92}, "lossless": True,
            "cost_model": {"tree": {"static_tree": "[(0,),(1,),(0,0)]"}}}
    entries = modelcard.select_entries({"entries": [chain, tree]}, tmp_path / "report.json", tmp_path / "d")
    assert [e.get("tree_nodes") for e in entries] == [None] and entries[0]["tree_variants"] == [tree]
    text = modelcard.tree_section(modelcard.headline(entries), head=True)
    assert "τ 1.92 (chain at γ=2: 1.45)" in text and '"speculative_token_tree": "[(0,),(1,),(0,0)]"' in text
    assert "speculative_token_tree" not in modelcard.tree_section(entries[0], head=False)
    assert modelcard.tree_section({**chain, "tree_variants": []}, head=True) == ""
