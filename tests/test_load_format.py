"""--load-format dummy: a config-only folder (the GPU check's tiny shape) loads with random weights of its shape and
dtype, in load_target and decode.bench; the folder-without-config and folder-without-weights errors name the fix."""

import json

import pytest
import torch

from decode import bench
from decode.errors import UserError
from decode.models import targets
from distill import gpu_check


@pytest.fixture
def tiny_shape(tmp_path, tiny_tokenizer):
    """gpu_check's `tiny` shape as the check writes it: config.json + tokenizer files, no weights."""
    tok = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(tok)
    folder = tmp_path / "target"
    cfg = gpu_check.write_target(folder, "tiny", tok)
    return folder, cfg


def test_dummy_target_has_the_shape_and_dtype_and_is_the_same_at_every_load(tiny_shape):
    folder, cfg = tiny_shape
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".safetensors") == []
    model, tok = targets.load_target(str(folder), "bfloat16", "cpu", load_format="dummy")
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
    assert model.config.num_hidden_layers == cfg.num_hidden_layers == 4 and model.config.rope_parameters["rope_type"] == "llama3"
    assert model.model.layers[0].self_attn.k_proj.weight.shape == (64, 256)  # GQA: 1 KV head of 64 for 4 query heads
    assert model.lm_head.weight.shape == (49152, 256) and not model.config.tie_word_embeddings
    w = model.model.layers[1].mlp.up_proj.weight.float()
    assert w.std().item() == pytest.approx(cfg.initializer_range, rel=0.05)  # transformers' normal init
    again, _ = targets.load_target(str(folder), "bfloat16", "cpu", load_format="dummy")
    assert torch.equal(again.model.layers[1].mlp.up_proj.weight, model.model.layers[1].mlp.up_proj.weight)
    assert targets.load_target(str(folder), load_format="dummy")[0].dtype == torch.float32  # auto on CPU


def test_dummy_ignores_weights_and_save_dummy_writes_a_loadable_target(tiny_shape, tmp_path):
    folder, _ = tiny_shape
    written = targets.save_dummy(str(folder), tmp_path / "run" / "target", "float32", "cpu")
    loaded, _ = targets.load_target(str(written))  # plain load of the written weights: the dummy model itself
    dummy, _ = targets.load_target(str(folder), "float32", load_format="dummy")
    assert torch.equal(loaded.lm_head.weight, dummy.lm_head.weight)
    with torch.no_grad():
        loaded.lm_head.weight.add_(1.0)
    loaded.save_pretrained(written)  # a folder with other weights: dummy still builds the random ones
    again, _ = targets.load_target(str(written), "float32", load_format="dummy")
    assert torch.equal(again.lm_head.weight, dummy.lm_head.weight)


def test_bench_loads_a_config_only_target_with_load_format_dummy(tiny_shape, tmp_path, monkeypatch):
    folder, _ = tiny_shape
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "category": "chat", "prompt": "t3 t4 t5 t6"}) + "\n")
    seen = {}  # what bench hands its measurement: the timing itself is decode.bench's own tests' business
    monkeypatch.setattr(bench.job, "measure_pair", lambda target, tok, draft, *a, **k: seen.update(target=target, draft=draft))
    cfg = bench.parse_args(["--target", str(folder), "--load-format", "dummy", "--draft", "layers:0,1", "--prompts",
                            str(prompts), "--dtype", "bfloat16", "--chat-template", "false", "--device", "cpu"])
    bench.run(cfg)
    assert seen["target"].dtype == torch.bfloat16 and seen["target"].config.hidden_size == 256
    assert seen["draft"].model.config.num_hidden_layers == 2


def test_missing_config_and_missing_weights_name_the_fix(tiny_shape, tmp_path):
    folder, _ = tiny_shape
    with pytest.raises(UserError, match=r"no weights .*add --load-format dummy"):
        targets.load_target(str(folder))
    empty = tmp_path / "empty"
    empty.mkdir()
    for fmt in ("auto", "dummy"):
        with pytest.raises(UserError, match=r"no config.json.*--load-format dummy"):
            targets.load_target(str(empty), load_format=fmt)
    with pytest.raises(UserError, match="--load-format must be one of auto, dummy"):
        bench.parse_args(["--load-format", "random"])


def test_pipeline_writes_the_dummy_target_once_and_wires_every_stage_to_it(tiny_shape, tmp_path, monkeypatch):
    from distill import pipeline

    folder, _ = tiny_shape
    seen = []
    monkeypatch.setattr(pipeline, "run_stages", lambda cfg, out, stages, command: seen.append(stages) or ({}, {}))
    monkeypatch.setattr(pipeline, "headline", lambda result: "")
    out = tmp_path / "run"
    argv = ["--target", str(folder), "--load-format", "dummy", "--output", str(out), "--designs", "[standalone]"]
    for _ in range(2):  # the rerun reuses RUN/target
        pipeline.main(argv)
    written = out / "target"
    assert (written / "model.safetensors").is_file() and (written / "tokenizer.json").is_file()
    for c, h, trains, _, e in seen:
        assert {c.target, h.target, e.target, *(t.target for t in trains)} == {str(written)}
        assert c.load_format == "auto"  # the stages read the written weights
    assert json.loads((out / "pipeline.config.json").read_text())["target"] == str(folder)


def test_evaluate_refuses_dummy_where_vllm_would_load_the_weights():
    from distill.evaluate.job import EvalConfig

    # (collect --engine vllm serves a dummy target from the folder its weights are written to: test_collect_vllm.py)
    with pytest.raises(UserError, match="use --anchors hf"):
        EvalConfig(drafts=["layers:0"], anchors="vllm", load_format="dummy")
