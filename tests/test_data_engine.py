"""The data engine's training side (issue 25): nested data subsets for a scaling curve, the sweep's scaling
report, and the pipeline's on-policy round."""

from __future__ import annotations

import json

import datasets
import pytest

from decode.errors import UserError
from distill.train import TrainConfig
from distill.train.data import first_tokens


def _rows(lengths: dict[str, int]) -> datasets.Dataset:
    ids = list(lengths)
    return datasets.Dataset.from_dict({"id": ids, "prompt_ids": [[1, 2]] * len(ids),
                                       "response_ids": [[7] * lengths[i] for i in ids]})


def test_data_tokens_takes_first_answers_first_and_nests():
    ds = _rows({"a": 30, "b~s1": 40, "b": 20, "c": 25, "a~s1": 35, "c~s2": 10, "c~s1": 5})
    taken = {n: set(first_tokens(ds, n)["id"]) for n in (1, 50, 75, 76, 165)}
    assert taken[75] == {"a", "b", "c"}  # every first answer (75 tokens) before any sampled one
    assert all(taken[x] <= taken[y] for x, y in zip((1, 50, 75, 76), (50, 75, 76, 165)))  # nested
    assert taken[76] - taken[75] <= {"a~s1", "b~s1", "c~s1"} and len(taken[76]) == 4  # then second answers
    assert taken[165] == set(ds["id"])
    for n in (1, 50, 76):
        got = sum(len(r) for r in first_tokens(ds, n)["response_ids"])
        assert got >= n and got - n < 40  # rows up to the first that reaches n tokens
    with pytest.raises(UserError, match=r"--data-tokens 166: the training rows hold 165 response tokens"):
        first_tokens(ds, 166)


def test_data_tokens_must_not_be_negative():
    with pytest.raises(UserError, match="--data-tokens must be >= 0"):
        TrainConfig(data_tokens=-5)


def _ranked(name, kind, tokens, proxy, alpha):
    return {"name": name, "kind": kind, "tokens": tokens, "proxy": proxy, "alpha": alpha, "tau": 1 + alpha,
            "speedup": 1.0, "gamma": 2}


def test_scaling_report_draws_one_line_per_kind_fewest_tokens_first(tmp_path):
    from distill.evaluate import scaling

    ranking = [_ranked("s-all", "standalone", 228000, 0.5, 0.3), _ranked("s-28k", "standalone", 28000, 0.3, 0.2),
               _ranked("h-28k", "feature_head", 28000, 0.25, 0.18), _ranked("h-all", "feature_head", 228000, 0.4, 0.26),
               _ranked("s-all", "standalone", 228000, 0.5, 0.3) | {"gamma": 3},  # a second γ of one design: one point
               {"name": "broken", "error": "not run yet"}, _ranked("other", "standalone", None, 0.1, 0.1)]
    curves = scaling.points(ranking)
    assert [r["name"] for r in curves["standalone"]] == ["s-28k", "s-all"]
    assert [r["name"] for r in curves["feature_head"]] == ["h-28k", "h-all"]
    assert scaling.write(tmp_path, ranking) == tmp_path / "scaling.md"
    text = (tmp_path / "scaling.md").read_text()
    assert "| standalone | 28,000 | s-28k | 0.3 | 0.2 |" in text and "scaling.png" in text
    assert (tmp_path / "scaling.png").stat().st_size > 10_000
    assert scaling.write(tmp_path / "none", ranking[5:]) is None  # no design names two token counts of one kind


def test_final_proxy_is_the_last_logged(tmp_path):
    from distill.evaluate import scaling

    (tmp_path / "metrics.jsonl").write_text('{"step": 50, "eval/acceptance_proxy": 0.2}\n{"step": 60, "train/loss": 1}\n'
                                            '{"step": 100, "eval/acceptance_proxy": 0.31}\n')
    assert scaling.final_proxy(tmp_path) == 0.31 and scaling.final_proxy(tmp_path / "missing") is None


@pytest.mark.slow
def test_an_on_policy_round_continues_the_standalone_draft_on_its_own_text(tmp_path):
    from test_pipeline_checks import REPO, _target

    from distill import pipeline
    from distill.collect.shards import load_collected

    out = tmp_path / "run"
    argv = ["--config", str(REPO / "configs/pipeline/default.yaml"), "--preset", "quick", "--target",
            _target(tmp_path, "llama"), "--output", str(out), "--designs", "[standalone]",
            "--onpolicy", "{rounds: 1, collect: {temperature: 1.0}, train: {max_steps: 10, save_every: 10}}",
            "--evaluate", "{lookup: [0], anchors: none}"]
    pipeline.main(argv)
    summary = json.loads((out / "pipeline.json").read_text())
    first = out / "train" / "checkpoint-000040" / "hf"
    assert summary["onpolicy"][0]["from"] == str(first) and summary["onpolicy"][0]["tokens"] > 0
    written = load_collected(out / "onpolicy-1" / "collect")
    assert set(written["source"]) == {"on_policy"} and len(written) == 96  # every quick train prompt, once
    assert json.loads((out / "onpolicy-1" / "collect" / "collect.json").read_text())["settings"]["generator"] == str(first)
    continued = out / "onpolicy-1" / "train" / "checkpoint-000010" / "hf"
    assert (continued / "draft_vocab.json").read_text() == (first / "draft_vocab.json").read_text()  # its own vocabulary
    config = json.loads((out / "onpolicy-1" / "train" / "train.config.json").read_text())
    assert config["init"] == f"pretrained:{first}" and config["data"] == [str(out / "collect"), str(out / "onpolicy-1" / "collect")]
    report = json.loads((out / "eval" / "report.json").read_text())
    assert {e["draft"] for e in report["entries"]} == {str(continued)} and all(e["lossless"] for e in report["entries"])
    shards = sorted(p.name for p in (out / "onpolicy-1" / "collect" / "shards").iterdir())
    pipeline.main(argv)  # a rerun resumes: nothing is collected again
    assert sorted(p.name for p in (out / "onpolicy-1" / "collect" / "shards").iterdir()) == shards


@pytest.mark.parametrize("section, message", [
    ({"rounds": -1}, "rounds must be a whole number >= 0"),
    ({"round": 1}, "unknown key(s) ['round']"),
    ({"rounds": 1, "train": {"design": "feature_head"}}, "pipeline `onpolicy train` section: --design feature_head is one decoder layer"),
    ({"rounds": 1, "collect": {"mode": "score"}}, "--generator makes on-policy data by generating"),
])
def test_a_bad_onpolicy_section_is_refused_before_collection(tmp_path, section, message):
    import re

    from test_pipeline_checks import REPO

    from distill import pipeline

    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=re.escape(message)):
        pipeline.main(["--config", str(REPO / "configs/pipeline/default.yaml"), "--output", str(out),
                       "--onpolicy", json.dumps(section)])
    assert not (out / "collect").exists()


def test_a_round_continues_at_half_the_steps_and_lr_unless_the_section_says(tmp_path):
    from pathlib import Path

    from distill import collect, onpolicy
    from distill.pipeline import stage_config

    c = collect.CollectConfig(output=str(tmp_path / "collect"))
    t = TrainConfig(data=c.output, output=str(tmp_path / "train"), lr=3e-3, max_steps=550, warmup_steps=20)
    r1, r2 = onpolicy.plan({"rounds": 2, "train": {"lr": 1e-3}}, Path(tmp_path), c, t, stage_config)
    assert (r1.train.max_steps, r1.train.lr, r1.train.warmup_steps) == (275, 1e-3, 10)  # the section's lr wins
    assert r2.train.data == [c.output, r1.collect.output, r2.collect.output]
    (d,) = onpolicy.plan({"rounds": 1}, Path(tmp_path), c, t, stage_config)
    assert (d.train.max_steps, d.train.lr) == (275, 1.5e-3)
