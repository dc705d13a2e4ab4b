"""Feature heads (EAGLE-3 style): decoding is lossless, training computes what decoding runs, a run exports a
head folder that decodes, and stored features resume."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from decode.drafting.speculative import generate
from decode.models.feature_head import FeatureHead, default_layers, is_head_folder, layer_config
from decode.options import DecodeOptions
from decode.runners.hf import HFRunner
from distill.train.head import HeadStudent, target_features


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    tc = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, initializer_range=0.3)
    target = LlamaForCausalLM(tc).eval()
    head = FeatureHead(layer_config(tc), default_layers(6), list(range(0, 300, 2))).eval()
    for p in head.parameters():  # large random weights: confident, varied proposals
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.3)
    return target, head


def test_default_layers_follow_vllm_and_stay_distinct():
    assert default_layers(30) == [2, 15, 27]
    assert default_layers(4) == [1, 2]
    assert default_layers(2) == [1]


@pytest.mark.parametrize("runner", ["fast", "hf"])
def test_greedy_with_a_head_is_the_target_alone(pair, runner):
    target, head = pair
    model = HFRunner(target) if runner == "hf" else target
    for seed in range(3):
        ids = torch.randint(0, 300, (9,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref, _ = generate(target, None, ids, 30)
        for opts in (DecodeOptions(gamma=3, schedule="constant"), DecodeOptions(gamma=2, lookup=2, schedule="constant"), DecodeOptions(gamma=4, schedule="heuristic"),
                     DecodeOptions(gamma=3, tree_nodes=5, schedule="constant")):
            out, st = generate(model, head, ids, 30, opts)
            assert out == ref
            assert st.proposed > 0


def test_the_runners_capture_the_same_features(pair):
    """FastLlama's features (hidden states entering the layers) equal HF's output_hidden_states[j]."""
    target, head = pair
    ids = list(range(5, 17))
    want = target_features(target, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), head.feature_layers)[0]
    from decode.runners.choice import runner_for
    for r in (runner_for(target), HFRunner(target)):
        r.capture = tuple(head.feature_layers)
        r.forward(ids, r.new_cache(32), 1)
        torch.testing.assert_close(r.features, want, atol=1e-3, rtol=1e-4)  # FastLlama multiplies in another order
        r.capture = ()


@pytest.mark.parametrize("variant", [None, {"norm_before_residual": True, "norm_before_fc": True, "norm_output": True}])
def test_training_unroll_is_what_decoding_computes(pair, variant):
    """TTT step 0 at head position p = the head reading the verified prefix; step 1 at p = the next drafted
    position, reading the head's own step-0 output (decoding's second draft step); with speculators' eagle3
    switches too (the next step reads the normed output)."""
    target, head = pair
    if variant:
        base = head
        head = FeatureHead(base.config, base.feature_layers, base.draft_ids().tolist(), variant=variant).eval()
        head.load_state_dict(base.state_dict(), strict=False)  # the input norm stays at its ones
    ids = torch.randint(0, 300, (1, 14), generator=torch.Generator().manual_seed(1))
    feats = target_features(target, ids, torch.ones_like(ids), head.feature_layers)  # (1, T, F)
    student = HeadStudent(head, {"fkl": 1.0}, 0.5, 2**20, 3, 0.8)
    with torch.no_grad():
        outs = list(student.unroll(ids, feats, 3))
    for p in (0, 4, 9):
        cache = head.new_cache(32)
        toks = ids[0, 1:p + 2].tolist()  # head positions 0..p read x_1..x_{p+1}
        out, logits = head.step(toks, head.fuse(feats[0, :p + 1]), cache)
        torch.testing.assert_close(out[-1], outs[0][0, p], atol=1e-4, rtol=1e-4)
        for k in (1, 2):  # drafted positions: the target's next token, the head's own last output
            out, logits = head.step([int(ids[0, p + 1 + k])], out[-1:], cache)
            torch.testing.assert_close(out[-1], outs[k][0, p], atol=1e-4, rtol=1e-4)


def test_a_head_that_copies_the_target_is_accepted(pair):
    """A head whose draft equals the target's greedy choice is accepted in full: the chain, the cache
    rollback and the pending features line up (any misalignment would show as rejections)."""
    target, head = pair
    ids = list(range(20, 31))
    ref, _ = generate(target, None, ids, 24)

    class Oracle(FeatureHead):  # drafts the target's own next tokens of `ref` by position
        def step(self, toks, hid, cache):
            out, _ = FeatureHead.step(self, toks, hid, cache)
            n = cache.length  # head position cache.length - 1 reads x_{n}; its draft is x_{n+1}
            nxt = ref[n + 1 - len(ids)] if 0 <= n + 1 - len(ids) < len(ref) else 0
            logits = torch.full((self.draft_vocab_size,), -1e9)
            logits[nxt] = 0.0
            return out, logits

    oracle = Oracle(head.config, head.feature_layers, None)
    out, st = generate(target, oracle.eval(), ids, 24, DecodeOptions(gamma=3, schedule="constant"))
    assert out == ref
    assert st.accepted == st.proposed


def test_sampling_with_a_head_runs_and_a_wrong_head_is_refused(pair):
    target, head = pair
    out, st = generate(target, head, list(range(9)), 20, DecodeOptions(gamma=3, temperature=0.8, schedule="constant"),
                       generator=torch.Generator().manual_seed(0))
    assert len(out) == 20 and st.proposed > 0
    out, st = generate(target, head, list(range(9)), 20, DecodeOptions(gamma=3, temperature=0.8, tree_nodes=4, schedule="constant"),
                       generator=torch.Generator().manual_seed(0))
    assert len(out) == 20 and st.tree_rounds > 0
    from decode.errors import UserError
    wrong = FeatureHead(head.config, [1, 9])  # reads layer 9 of a 6-layer target
    with pytest.raises(UserError, match="trained for this target"):
        generate(target, wrong.eval(), list(range(9)), 5, DecodeOptions(gamma=2, schedule="constant"))


def test_the_folder_round_trips(pair, tmp_path):
    _, head = pair
    head.save(tmp_path / "h", gamma=3)
    assert is_head_folder(tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == 150
    assert cfg["transformer_layer_config"]["tie_word_embeddings"] is False
    back = FeatureHead.load(tmp_path / "h")
    assert back.draft_ids().tolist() == list(range(0, 300, 2))
    for k, v in head.state_dict().items():
        torch.testing.assert_close(back.state_dict()[k], v)


# --- a training run on the tiny collected data ---------------------------------------------------------------


def _train(argv):
    from distill.train.job import main

    main(argv)


def _argv(tc: SimpleNamespace, out, *extra):
    return ["--target", tc.target, "--data", tc.data, "--eval-data", tc.heldout, "--output", str(out),
            "--design", "feature_head", "--vocab", "512", "--max-steps", "4", "--batch-size", "4", "--eval-every", "2",
            "--save-every", "2", "--log-every", "1", "--report-to", "none", "--eval-rows", "0", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("features, variant", [("stored", []), ("online", []),
                                               ("stored", ["norm_before_fc", "norm_before_residual", "norm_output"])])
def test_a_head_run_exports_a_folder_that_decodes_losslessly(tiny_collected, tmp_path, features, variant, capsys):
    from decode.models.targets import load_draft, load_target

    out = tmp_path / "run"
    _train(_argv(tiny_collected, out, "--features", features, *(["--head-variant", json.dumps(variant)] if variant else [])))
    hf = out / "checkpoint-000004" / "hf"
    assert is_head_folder(hf)
    meta = json.loads((hf / "specdistill.json").read_text())
    assert meta["design"]["kind"] == "feature_head" and meta["design"]["features"] == features
    config = json.loads((hf / "config.json").read_text())
    assert [k for k in ("norm_before_fc", "norm_before_residual", "norm_output") if config[k]] == variant
    assert (out / "features" / "features.json").is_file() == (features == "stored")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("train/loss_step2" in r for r in rows)  # the three TTT steps are each in the loss
    target, tok = load_target(tiny_collected.target)
    draft = load_draft(str(hf), target, tok)
    ids = tok("hello there, how are you", return_tensors="pt").input_ids[0].tolist()
    ref, _ = generate(target, None, ids, 16)
    got, st = generate(target, draft.model, ids, 16, DecodeOptions(gamma=3, schedule="constant"))
    assert got == ref and st.proposed > 0


@pytest.mark.slow
def test_stored_features_are_reused_when_a_run_resumes(tiny_collected, tmp_path, capsys):
    out = tmp_path / "run"
    _train(_argv(tiny_collected, out))
    first = capsys.readouterr().out
    assert "features: " in first
    _train(_argv(tiny_collected, out, "--max-steps", "6"))
    again = capsys.readouterr().out
    assert "features: " not in again and "resumed from" in again


def test_a_head_saves_its_draft_vocabulary_in_ascending_target_ids(pair, tmp_path):
    """vLLM's eagle3 reads d2t as the ascending list of t2d's ids: a head trained with its vocabulary in frequency
    order saves its lm_head rows in that order, and drafts the same tokens after loading."""
    target, head = pair
    shuffled = FeatureHead(head.config, head.feature_layers, list(range(298, -1, -2))).eval()
    shuffled.load_state_dict({k: v for k, v in head.state_dict().items() if k not in ("d2t", "t2d")}, strict=False)
    shuffled.save(tmp_path / "h")
    back = FeatureHead.load(tmp_path / "h")
    assert back.draft_ids().tolist() == list(range(0, 300, 2))
    ids = list(range(9))
    out, _ = generate(target, shuffled, ids, 12, DecodeOptions(gamma=3, schedule="constant"))
    assert generate(target, back, ids, 12, DecodeOptions(gamma=3, schedule="constant"))[0] == out
    h = torch.randn(64)
    want = dict(zip(shuffled.draft_ids().tolist(), shuffled.logits(h).tolist()))
    got = dict(zip(back.draft_ids().tolist(), back.logits(h).tolist()))
    assert all(abs(want[k] - got[k]) < 1e-5 for k in want)
