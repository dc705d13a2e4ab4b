"""The architectures users bring, each a tiny random target with the default tokenizer (tests/architectures.py):
the decoder is lossless, a draft equal to the target accepts everything, the default config's quick pipeline runs
end to end, and docs/architectures.md's table says what these tests check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from architectures import ARCHITECTURES, BF16, config, save_target
from transformers import AutoModelForCausalLM

from decode import DecodeOptions, generate
from decode.errors import UserError
from decode.models.layer_cut import draft_from_layers
from decode.models.targets import load_tokenizer
from decode.runners.fast import FastLlama
from decode.runners.hf import sliding_window
from distill import pipeline
from distill.train import copy_circuit
from distill.train.designs import DraftDesign

REPO = Path(__file__).resolve().parents[1]
PROMPT = [1, 504, 3458, 314, 260, 1789, 28, 2088, 253, 1789, 28, 2088, 253, 1789, 28]  # crosses a window of 8
N_NEW = 24


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """arch -> folder of its saved tiny random target (built on first use)."""
    root, tok, made = tmp_path_factory.mktemp("architectures"), load_tokenizer("default"), {}

    def get(arch: str) -> str:
        if arch not in made:
            made[arch] = save_target(arch, root / arch, tok)
        return made[arch]

    return get


def _hf_greedy(model, n: int) -> list[int]:
    out = model.generate(torch.tensor([PROMPT]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(PROMPT):].tolist()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_decoder_is_lossless_and_the_target_as_draft_accepts_everything(arch, targets):
    target = AutoModelForCausalLM.from_pretrained(targets(arch)).eval()
    want = _hf_greedy(target, N_NEW)
    cut = draft_from_layers(target, [0, 1])
    for gamma in (1, 3):
        out, _ = generate(target, cut, PROMPT, N_NEW, DecodeOptions(gamma=gamma))
        assert out == want, f"γ={gamma}: a two-layer cut as draft"
    out, stats = generate(target, target, PROMPT, N_NEW, DecodeOptions(gamma=3))
    assert out == want and stats.accepted == stats.proposed > 0
    if not sliding_window(target.config):  # a token tree through the model's own 4D-mask path (decode.drafting.tree)
        out, stats = generate(target, cut, PROMPT, N_NEW, DecodeOptions(gamma=3, tree_nodes=5))
        assert out == want and stats.tree_rounds > 0, "a 5-node tree with the two-layer cut"


# The quick preset cut to the least that still runs every stage of every design (collection with top-k, training
# past an eval and a save, evaluation of every checkpoint against the target alone and transformers' anchors): the
# architecture, not the draft's quality, is under test here (W&B is in test_train). A bf16 target runs in bf16 in
# every stage that runs it (`--dtype auto` would be float32 on a CPU).
def smallest(dtype: str) -> list[str]:
    return ["--designs", "all",  # every design, whatever the plan would say of a tiny target's costs
            "--collect", f"{{limit: 16, max_new_tokens: 16, dtype: {dtype}}}",
            "--heldout", f"{{limit: 4, max_new_tokens: 16, dtype: {dtype}}}",
            "--train", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1, report_to: none}",
            "--head", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1, report_to: none}",
            "--parallel", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1, report_to: none}",
            "--evaluate", f"{{limit: 2, max_new_tokens: 12, dtype: {dtype}}}"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", [*ARCHITECTURES, *BF16])
def test_the_default_quick_pipeline_runs_end_to_end(arch, targets, tmp_path):
    out = tmp_path / "run"
    pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--preset", "quick",
                   "--target", targets(arch), "--output", str(out),
                   *smallest("bfloat16" if arch in BF16 else "auto")])
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary["best"]["lossless"] is True
    assert (out / "eval" / "report.md").is_file()
    report = json.loads((out / "eval" / "report.json").read_text())
    assert report["entries"] and all(e["lossless"] for e in report["entries"]) and not report["errors"]
    # float32 targets are held to exact equality; bf16 ones excuse only near-ties of their own logits
    rule = "numeric" if arch in BF16 else "exact"
    assert {e["lossless_rule"] for e in report["entries"]} == {rule}
    assert (out / "draft" / "config.json").is_file(), "the pipeline shipped no draft"


# --- the table in docs/architectures.md --------------------------------------------------------------------


def _accepts(check, config) -> str:
    """'yes' when check(config) passes, 'no' when it refuses with a UserError (the docs give the reasons)."""
    try:
        check(config)
    except UserError:
        return "no"
    return "yes"


def table() -> str:
    """docs/architectures.md's table. The first two columns are this file's tests, which run on every
    architecture; the others are what the code accepts, each exercised by tests/test_layer_cut.py (prune, reduced
    vocabulary), tests/test_pipeline_checks.py (what the recipe leaves out) and the decoder's tests."""
    tok = load_tokenizer("default")
    rows = ["| architecture | decoder lossless, draft = target accepts all | default quick pipeline end to end "
            "| decoder runner | copy circuit | token trees | prune | reduced vocabulary |", "|" + " --- |" * 8]
    for arch in ARCHITECTURES:
        c = config(arch, tok)
        fast = FastLlama.supports_config(c)
        prune = DraftDesign(init="prune", hidden_size=c.hidden_size // 2).check
        rows.append(f"| {arch} | yes | yes | {'FastLlama' if fast else 'HF'} "
                    f"| {_accepts(copy_circuit.check_architecture, c)} | {'no: sliding window' if sliding_window(c) else 'yes'} "
                    f"| {_accepts(prune, c)} | yes |")
    return "\n".join(rows) + "\n"


def test_the_docs_table_is_what_the_code_does():
    doc = (REPO / "docs" / "architectures.md").read_text()
    assert table() in doc, "regenerate with: python -c 'import sys; sys.path.insert(0, \"tests\"); " \
                           "import test_architectures as t; print(t.table())'"
