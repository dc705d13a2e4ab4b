"""distill.peers: our drafts against speculators' own trainer at equal data.

    data            the hidden-state files hold what speculators reads: the target's hidden states entering the
                    feature layers and its last layer's output before the final norm (norm + head = its logits)
    rows            speculator-format rows are our head's examples, the loss mask on exactly its labels
    bad inputs      a folder without a collection, a peer that is not installed (recorded, not fatal)
    end to end      (vllm-marked: speculators lives in .venv-vllm) a tiny pipeline folder, our head trained 3 steps,
                    speculators' small-data recipe trained 3 steps on the same tokens through its own trainer, both
                    evaluated in one distill.evaluate run: both lossless, the peer's folder a feature head of
                    speculators' eagle3 switches
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from decode import cli
from decode.errors import UserError
from decode.models.targets import load_target
from distill.peers import PeersConfig, job, ours, speculators_data
from distill.train import TrainConfig, train

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def _head_run(setup, root: Path, steps: int = 3) -> Path:
    """A pipeline-shaped folder: the tiny collection, a pipeline.config.json, our head trained `steps` steps."""
    for name, src in (("collect", setup.data), ("heldout", setup.heldout)):
        shutil.copytree(src, root / name)
    (root / "pipeline.config.json").write_text(json.dumps({"target": setup.target, "evaluate": {
        "gamma": 2, "max_new_tokens": 8, "draft_weights": "float32"}}))
    argv = ["--target", setup.target, "--data", str(root / "collect"), "--eval-data", str(root / "heldout"),
            "--output", str(root / "train-head"), "--design", "feature_head", "--vocab", "512", "--batch-size", "4",
            "--max-steps", str(steps), "--save-every", str(steps), "--eval-every", "50", "--warmup-steps", "1",
            "--report-to", "none"]
    train(cli.parse(TrainConfig, argv), argv)
    return root


def test_hidden_state_files_hold_the_features_and_the_prenorm_last_layer(tiny_collected, tmp_path):
    target, _ = load_target(tiny_collected.target, "float32", "cpu")
    seqs = [[5, 9, 200, 31, 7], [11, 3, 3]]
    assert speculators_data.hidden_states(target, seqs, [1, 2], tmp_path) == 2
    assert speculators_data.hidden_states(target, seqs, [1, 2], tmp_path) == 0  # resumed: nothing left to write
    for i, s in enumerate(seqs):
        f = load_file(tmp_path / f"hs_{i}.safetensors")
        ids = torch.tensor([s])
        out = target(ids, output_hidden_states=True)
        assert f["token_ids"].tolist() == s and f["hidden_states"].shape == (len(s), 3, target.config.hidden_size)
        for k, j in enumerate([1, 2]):
            torch.testing.assert_close(f["hidden_states"][:, k], out.hidden_states[j][0], rtol=1e-4, atol=1e-4)  # batched
        # speculators computes the target's distribution as lm_head(verifier_norm(last)): the target's own logits
        logits = target.lm_head(target.model.norm(f["hidden_states"][:, -1]))
        torch.testing.assert_close(logits, out.logits[0], rtol=1e-4, atol=1e-4)


def test_rows_are_our_heads_examples_masked_on_its_labels(tiny_collected, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name, src in (("collect", tiny_collected.data), ("heldout", tiny_collected.heldout)):
        shutil.copytree(src, run / name)
    cfg = TrainConfig(target=tiny_collected.target, data=str(run / "collect"), eval_data=str(run / "heldout"),
                      design="feature_head", vocab=512)
    train_ex, _ = ours.examples(cfg, tiny_collected.tokenizer)
    counts = speculators_data.write_rows(train_ex, tmp_path / "rows.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert counts["rows"] == len(rows) == len(train_ex)
    for r, e in zip(rows, train_ex.take(range(len(train_ex)))):
        assert r["input_ids"] == [*map(int, e["input_ids"]), int(e["labels"][-1])]
        masked = [t for t, m in zip(r["input_ids"], r["loss_mask"]) if m]
        assert masked == [int(x) for x in e["labels"]]  # 1 exactly where our head is trained


def test_a_run_without_a_collection_is_one_line(tmp_path):
    (tmp_path / "pipeline.config.json").write_text("{}")
    with pytest.raises(UserError, match="no finished collection"):
        ours.check_run(tmp_path)
    with pytest.raises(UserError, match="not a pipeline folder"):
        ours.check_run(tmp_path / "nothing")


def test_a_missing_peer_is_recorded_not_fatal(tmp_path):
    cfg = PeersConfig(run=str(tmp_path), peer_python=str(tmp_path / "no-python"))
    rows = job.train_peers(cfg, tmp_path, None, None, None, None, 3, 100)
    assert [r["recipe"] for r in rows] == cfg.recipes
    assert all("install speculators" in r["error"] and "scripts/setup.sh" in r["error"] for r in rows)


@pytest.mark.vllm
def test_the_peer_trains_on_our_tokens_and_is_evaluated_beside_our_head(tiny_collected, tmp_path):
    pytest.importorskip("speculators", reason="speculators is installed in .venv-vllm (scripts/setup.sh)")
    import sys

    run = _head_run(tiny_collected, tmp_path / "run")
    cfg = PeersConfig(run=str(run), peer_python=sys.executable, recipes=["small-data"], prompts=["heldout"], limit=2,
                      anchors="none")
    result = job.run(cfg, ["--run", str(run)])
    peer = result["peers"][0]
    assert "error" not in peer, peer.get("error")
    assert peer["steps"] == result["steps"] == 3
    assert abs(peer["tokens"] - result["our_tokens"]) <= 0.25 * result["our_tokens"]
    head = json.loads((Path(peer["draft"]) / "config.json").read_text())
    assert head["norm_before_residual"] and head["norm_before_fc"] and head["norm_output"]  # speculators' eagle3
    assert head["draft_vocab_size"] == 512
    ours_row, theirs = result["rows"]
    for row in (ours_row, theirs):
        m = row["sets"]["heldout"]
        assert m["lossless"] is True and 0.0 <= m["alpha"] <= 1.0 and row["proxy"] is not None
    assert "speculators 0.9.0 (small-data)" in (run / "peers" / "report.md").read_text()
