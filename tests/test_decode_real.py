"""The real embedded default target (SmolLM2-135M-Instruct, 30 layers): lossless decoding and the bench end to end.

All slow: the first use converts the bundled GGUF (~40 s, once per machine), later loads take about a second.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decode import DecodeOptions, generate
from decode.models.targets import eos_ids as _eos_ids
from decode.models.targets import load_draft, load_target
from decode.prompts import encode_prompt, read_prompts

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "distill" / "data" / "heldout.jsonl"
N_NEW = 24


@pytest.fixture(scope="module")
def default_target():
    return load_target("default")


@pytest.fixture(scope="module")
def prompts(default_target):
    _, tok = default_target
    rows = read_prompts(HELDOUT)
    picked = [rows[0], rows[len(rows) // 2], rows[-1]]  # three categories' worth
    return [encode_prompt(tok, r) for r in picked]


def test_layer_draft_greedy_equals_target_alone_and_hf_generate(default_target, prompts):
    target, tok = default_target
    draft = load_draft("layers:0,1,28,29", target, tok)
    assert draft.model.config.num_hidden_layers == 4 and draft.vocab_map is None
    eos = _eos_ids(target, tok)
    for ids in prompts:
        alone, _ = generate(target, None, ids, N_NEW, eos_token_ids=eos)
        # constant γ: this checks the output with the draft in every round; the adaptive default may (rightly)
        # stop drafting for a draft that does not pay on this box, and then nothing here would be checked
        out, stats = generate(target, draft.model, ids, N_NEW, DecodeOptions(gamma=4, schedule="constant"),
                              eos_token_ids=eos)
        assert out == alone
        assert stats.proposed > 0
        x = torch.tensor([ids])
        with torch.inference_mode():
            y = target.generate(
                x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                max_new_tokens=N_NEW,
                eos_token_id=list(eos),
                pad_token_id=tok.pad_token_id or eos[0],
                temperature=None,
                top_p=None,
                top_k=None,
            )
        assert y[0, len(ids) :].tolist() == alone


def test_default_draft_is_the_target_and_accepts_everything(default_target, prompts):
    target, tok = default_target
    draft = load_draft("default", target, tok)
    assert draft.model is target
    gamma, k = 4, 3
    alone, _ = generate(target, None, prompts[0], 1 + k * (gamma + 1), eos_token_ids=())
    out, stats = generate(target, draft.model, prompts[0], 1 + k * (gamma + 1), DecodeOptions(gamma=gamma, schedule="constant"),
                            eos_token_ids=())
    assert out == alone
    assert stats.acceptance_rate == 1.0 and stats.tau == gamma + 1


# docs/architecture.md, "Evaluation folder and result JSON"
BENCH_KEYS = set(
    "target draft device dtype prompts max_new_tokens temperature gamma schedule baseline speculative hf_assisted"
    " speedup speedup_vs_hf_assisted lossless per_category cost_model".split()
)


def test_bench_end_to_end_json(tmp_path):
    out_file = tmp_path / "sub" / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "decode.bench", *f"--limit 2 --max-new-tokens 8 --out {out_file}".split()],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out_file.read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == result  # the last stdout line is the JSON

    assert BENCH_KEYS <= result.keys()
    assert result["target"] == "default" and result["draft"] == "layers:0,1,28,29"
    assert result["prompts"] == 2 and result["max_new_tokens"] == 8 and result["gamma"] == 4
    assert result["schedule"] == "adaptive" and result["temperature"] == 0.0 and result["dtype"] == "float32"
    assert set(result["baseline"]) == {"tokens", "seconds", "tokens_per_s", "prefill_seconds", "decode_tokens_per_s"}
    spec = result["speculative"]
    want = "tokens seconds tokens_per_s acceptance_rate tau target_forwards draft_forwards accept_histogram"
    assert set(want.split()) <= spec.keys()
    assert spec["tokens"] == result["baseline"]["tokens"] <= 2 * 8
    assert 0 <= spec["acceptance_rate"] <= 1 and 1 <= spec["tau"] <= 5
    assert sum(spec["accept_histogram"]) == spec["rounds"] and spec["target_forwards"] == spec["rounds"] + 2
    assert {"tokens", "seconds", "tokens_per_s"} <= result["hf_assisted"].keys()
    assert result["hf_assisted"]["outputs_matching_target"] == 2
    assert result["lossless"] is True
    assert result["speedup"] > 0 and result["speedup_vs_hf_assisted"] > 0
    assert sum(c["prompts"] for c in result["per_category"].values()) == 2
    cm = result["cost_model"]
    assert set("c v alpha predicted_tau predicted_speedup measured_speedup best_gamma".split()) <= cm.keys()
    assert cm["alpha"] == spec["acceptance_rate"]
