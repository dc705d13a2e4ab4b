"""Parallel drafts through the stages after training: the cost model (decode/bench/parallel_cost.py) against
hand-computed rounds, a bench run's entry (kind, c_block, prediction, no transformers anchor), evaluate's per-position
table and plot data, the pipeline's parallel stage wiring, and publish's expanded form, card and vLLM request."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from decode import DecodeOptions, bench, generate
from decode.bench import parallel_cost
from decode.drafting.stats import Stats
from distill.evaluate import positions
from tests.test_decode_bench import MAX_NEW, _folders, _run

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_a_round_costs_one_block_and_one_verification():
    # 10 draft rounds accepting 12 (τ 2.2) and 4 lookup rounds accepting 6 of their proposals (τ 2.5)
    spec = Stats(rounds=14, accepted=18, lookup_rounds=4, lookup_accepted=6, lookup_proposed=20,
                 accept_histogram=[3, 5, 4, 2])
    m = parallel_cost.model(spec, 4, 0, {"4": 0.06, "2": 0.05}, {4: 1.2, 5: 1.3, 1: 1.0})
    want = (4 / 14 * 2.5 + 10 / 14 * 2.2) / (4 / 14 * 1.3 + 10 / 14 * (0.06 + 1.2))  # lookup: v(5 tokens)
    assert m["predicted_speedup"] == pytest.approx(want, abs=1e-4) and m["draft_tau"] == 2.2
    assert m["position_acceptance"] == [round(11 / 14, 4), round(6 / 11, 4), round(2 / 6, 4)]
    assert parallel_cost.c_block_at({"2": 0.05, "4": 0.07}, 3) == pytest.approx(0.06)
    assert parallel_cost.c_block_at({"2": 0.05, "4": 0.07}, 8) == 0.07


def _parallel_folder(tmp_path, tiny_llama, target: str) -> str:
    """The tiny target itself as a parallel draft whose mask is its last id (accepts its first position always)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(target)
    model.config.mask_token_id = model.config.pard_token = model.config.vocab_size - 1
    model.save_pretrained(tmp_path / "parallel")
    AutoTokenizer.from_pretrained(target).save_pretrained(tmp_path / "parallel")
    return str(tmp_path / "parallel")


def test_bench_reports_a_parallel_draft_with_its_own_cost_model(tmp_path, tiny_llama, tiny_tokenizer):
    target, prompts, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    r = _run(target, prompts, _parallel_folder(tmp_path, tiny_llama, target), "--gamma 3 --schedule constant")
    cm, s = r["cost_model"], r["speculative"]
    assert r["draft_kind"] == "parallel" and r["lossless"] is True and r["hf_assisted"] is None
    assert "transformers' assisted generation runs a draft as a chain" in r["hf_assisted_skipped"]
    assert set(cm["c_block"]) >= {"1", "2", "3"} and set(cm["draft_block_ms"]) == set(cm["c_block"])
    assert s["draft_forwards"] <= s["rounds"] + r["prompts"] * 2  # prefill + one forward a round (+ warm-up none)
    p = cm["parallel"]
    assert cm["predicted_speedup"] == p["predicted_speedup"]
    tau = (s["accepted"] + s["rounds"]) / s["rounds"]
    v3 = cm["v"]["3"]
    assert p["predicted_speedup"] == pytest.approx(tau / (cm["c_block"]["3"] + v3), rel=1e-3)
    # the draft is the target, so its first position is accepted but where the round had no room to propose (a
    # prompt's last round) or the target's choice is the draft's mask id (never proposed)
    assert p["position_acceptance"][0] > 0.8


def test_the_table_and_plot_show_acceptance_by_position(tmp_path):
    def entry(label, kind, hist, lookup=0):
        return {"label": label, "kind": kind, "gamma": 3, "lookup": lookup, "tree_nodes": 0,
                "speculative": {"proposed": 30, "accept_histogram": hist}}

    entries = [entry("chain", "standalone", [4, 3, 2, 1]), entry("par", "parallel", [5, 4, 1, 0]),
               entry("par + lookup", "parallel", [1, 1, 1, 1], lookup=2)]
    rows = positions.rows(entries)
    assert [r["label"] for r in rows] == ["chain", "par"]  # lookup rounds would mix in
    assert rows[1]["alphas"] == [0.5, 0.2, 0.0]
    lines = positions.table(entries)
    assert "| par | parallel | 3 | 0.500 | 0.200 | 0.000 |" in lines
    assert positions.table(entries[:1]) == []  # no parallel draft: no section
    out = positions.plot({"entries": entries}, tmp_path / positions.PLOT_FILE)
    assert out is not None and out.stat().st_size > 0


def test_the_pipeline_continues_the_chain_draft(tmp_path):
    from distill.pipeline import DESIGNS
    from distill.train import TrainConfig, parallel

    assert parallel.wiring([2])["parallel"] == 2 and parallel.wiring([1])["parallel"] == 2  # a block is >= 2
    assert parallel.wiring([2, 4, 3])["parallel"] == 4  # the deepest round evaluate gives it
    t = TrainConfig(**parallel.wiring([2]), output=str(tmp_path / "p"))
    resolved = parallel.from_chain(t, tmp_path / "train", lambda run: run / "checkpoint-000550" / "hf")
    assert resolved.init == f"pretrained:{tmp_path / 'train' / 'checkpoint-000550' / 'hf'}"
    assert parallel.from_chain(TrainConfig(), tmp_path, None).init == "target_layers"
    assert "parallel" in DESIGNS


def test_the_pipeline_trains_the_block_its_evaluation_reads(tmp_path):
    from distill import pipeline

    def block(**sections):
        trains = pipeline.plan(pipeline.PipelineConfig(output=str(tmp_path), **sections), tmp_path)[2]
        return [t.parallel for t in trains if t.parallel]

    assert block(evaluate={"gamma": 2}) == [2]
    assert block(evaluate={"gamma": 2, "parallel_gamma": [2, 4]}) == [4]
    assert block(evaluate={"gamma": 2}, parallel={"parallel": 3}) == [3]  # the section overrides the wiring


def test_the_expanded_form_moves_the_mask_to_its_reserved_id(tmp_path, tiny_llama):
    from safetensors.torch import load_file

    from decode.models.draft_folder import VOCAB_MAP_FILE
    from distill.publish import servable

    draft = tiny_llama(2, vocab=6)  # a reduced draft of 5 ids + its mask (draft id 5 -> target id 9)
    draft.config.mask_token_id = draft.config.pard_token = 5
    d2t = [0, 2, 3, 4, 7, 9]
    reduced = tmp_path / "reduced"
    draft.save_pretrained(reduced)
    (reduced / VOCAB_MAP_FILE).write_text(json.dumps({"draft_to_target": d2t}))
    (tmp_path / "out").mkdir()
    servable.expand_folder(reduced, tmp_path / "out", SimpleNamespace(vocab_size=12))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    w = load_file(tmp_path / "out" / "model.safetensors")
    assert config["mask_token_id"] == config["pard_token"] == 9 and config["vocab_size"] == 12
    torch.testing.assert_close(w["model.embed_tokens.weight"][9], draft.model.embed_tokens.weight[5].detach())
    mean = draft.lm_head.weight.detach().mean(0)
    torch.testing.assert_close(w["lm_head.weight"][9], mean)  # never proposed: an OOV row
    torch.testing.assert_close(w["lm_head.weight"][7], draft.lm_head.weight[4].detach())


def test_the_card_and_the_vllm_request_name_parallel_drafting(tmp_path, monkeypatch):
    from distill.publish import card_parallel, usage, vllm_check

    config = {"mask_token_id": 9, "pard_token": 9, "architectures": ["LlamaForCausalLM"]}
    assert "`parallel_drafting: true`" in card_parallel.intro(config) and card_parallel.mask_of({"x": 1}) is None
    snippet = usage.section("org/d", "org/t", 4, reduced=False, parallel=True)
    assert '"num_speculative_tokens": 4, "parallel_drafting": True}' in snippet
    assert "parallel_drafting" not in usage.section("org/d", "org/t", 4, reduced=False)
    rows = dict(card_parallel.design_rows({"design": {"parallel": 4}, "train_config": {"parallel": 4,
                "parallel_keep": 0.5, "parallel_weight": "accepted"}}, config))
    assert "mask token id 9" in rows["kind"] and "accepted" in rows["mask-level training"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert vllm_check.is_parallel_folder(tmp_path) and not vllm_check.is_parallel_folder(tmp_path / "none")
    seen = {}
    monkeypatch.setattr(vllm_check, "vllm_installed", lambda python: True)
    monkeypatch.setattr(vllm_check, "check_prompts", lambda tok: [[1, 2, 3]])
    monkeypatch.setattr(vllm_check, "run_vllm", lambda python, req: seen.update(req) or (_ for _ in ()).throw(
        RuntimeError("stop here")))
    status, detail, _ = vllm_check.prove(tmp_path, "target", SimpleNamespace(dtype=torch.float32), None, 4)
    assert status == "fail" and seen["parallel_drafting"] is True and seen["method"] == "draft_model"


def test_greedy_generate_on_the_saved_parallel_folder(tmp_path, tiny_llama, tiny_tokenizer):
    from decode.models.targets import load_draft, load_model

    target_dir, _, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    target, tok = load_model(target_dir, "float32")
    draft = load_draft(_parallel_folder(tmp_path, tiny_llama, target_dir), target, tok)
    assert bench.draft_kind(draft) == "parallel"
    want, _ = generate(target, None, [3, 4, 5], MAX_NEW)
    out, st = generate(target, draft.model, [3, 4, 5], MAX_NEW, DecodeOptions(schedule="constant"))
    assert out == want and st.accepted >= st.rounds - 1
