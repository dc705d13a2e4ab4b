"""decode.drafting.lossless: the one rule for "lossless" (exact in float32; near-ties within a calibrated ε in bf16/fp16),
as a pure function on token lists and through decode.bench on tiny float32 and bfloat16 targets."""

from __future__ import annotations

import json

import pytest
import torch

from decode import bench
from decode.drafting import lossless

pytestmark = pytest.mark.usefixtures("torch_single_thread")  # bf16 matmuls on a few busy threads crawl


# --- the pure rule


def test_the_rule_follows_the_dtype():
    assert lossless.rule_for(torch.float32) == "exact"
    assert lossless.rule_for(torch.bfloat16) == lossless.rule_for(torch.float16) == "numeric"


def test_exact_rule_excuses_nothing_even_at_a_tie():
    one = lossless.judge([1, 2, 3], [1, 5, 3], "exact", 1.0, margin=lambda i, t: 0.0)
    assert not one["lossless"] and one["divergence"] == {"at": 1, "ref": [2, 3], "out": [5, 3], "margin": 0.0}
    assert lossless.judge([1, 2, 3], [1, 2, 3], "exact", 0.0)["lossless"]


def test_numeric_rule_excuses_near_ties_and_goes_on_from_the_reference_prefix():
    """ref and out part at token 2 (margin 0.01 <= ε): the check reruns from prompt + ref[:3]; that rerun parts at
    token 4 (margin 0.02, excused again) and the next one agrees: lossless, both margins reported."""
    ref = [1, 2, 3, 4, 5, 6]
    margins = {(2, 9): 0.01, (4, 8): 0.02}
    reruns = {3: [4, 8, 6], 5: [6]}
    asked = []

    def rerun(k):
        asked.append(k)
        return reruns[k]

    one = lossless.judge(ref, [1, 2, 9, 7, 7, 7], "numeric", 0.05, lambda i, t: margins[(i, t)], rerun)
    assert one == {"lossless": True, "excused": [0.01, 0.02], "divergence": None, "unchecked": 0} and asked == [3, 5]


def test_a_divergence_outside_epsilon_after_an_excused_one_is_caught():
    ref = [1, 2, 3, 4, 5, 6]
    margins = {(2, 9): 0.01, (4, 7): 3.0}  # the second is a clear winner the speculative run got wrong
    one = lossless.judge(ref, [1, 2, 9], "numeric", 0.05, lambda i, t: margins[(i, t)], lambda k: [4, 7, 6])
    assert not one["lossless"] and one["excused"] == [0.01]
    assert one["divergence"] == {"at": 4, "ref": [5, 6], "out": [7, 6], "margin": 3.0}
    v = lossless.Verdict("numeric", 0.05)
    assert v.add("p0", one)["prompt"] == "p0"
    d = v.as_dict()
    assert d["lossless"] is False and d["excused_divergences"] == 1 and d["excused_margins"] == [0.01]
    assert d["lossless_rule"] == "numeric" and d["epsilon"] == 0.05 and d["divergences"][0]["at"] == 4


def test_an_output_that_ended_first_is_never_a_near_tie_and_without_reruns_the_rest_is_counted():
    assert not lossless.judge([1, 2, 3], [1, 2], "numeric", 9.0, lambda i, t: 0.0)["lossless"]  # EOS vs a token
    assert not lossless.judge([1, 2, 3], [1, 5, 3], "numeric", 9.0)["lossless"]  # no margin: nothing excused
    one = lossless.judge([1, 2, 3, 4], [1, 5, 3, 4], "numeric", 0.1, lambda i, t: 0.05)  # no rerun (vLLM)
    assert one["lossless"] and one["excused"] == [0.05] and one["unchecked"] == 2


def test_epsilon_is_how_far_two_competing_logits_moved_between_paths():
    one = torch.tensor([[5.0, 4.0, 0.0]])  # one token at a time
    many = torch.tensor([[5.1, 3.8, 0.5]])  # the same position in a verification
    # Δ = one - many = [-0.1, 0.2, -0.5]; over the top 2 of `one` the range is 0.3, over all three 0.7
    assert lossless.epsilon_of([one, many], competing=2) == pytest.approx(0.3)
    assert lossless.epsilon_of([one, many], competing=3) == pytest.approx(0.7)
    assert lossless.epsilon_of([one, one.clone()]) == 0.0


# --- through decode.bench


PROMPTS = [[3, 4, 5, 6, 7], [10, 11, 12], [40, 41, 42, 43], [20, 4, 22, 6], [7, 8, 9]]
MAX_NEW = 16


@pytest.fixture
def no_latency(monkeypatch):
    """decode.bench.latency's timings (seconds of repeated forwards) are beside the point here: fixed c and v."""
    monkeypatch.setattr(bench.latency, "measure", lambda target, draft, gammas, **kw: {"c": 0.5, "v": {
        str(g): 1.0 + 0.1 * g for g in gammas}})


def _target(tmp_path, tiny_llama, tiny_tokenizer) -> tuple[str, str]:
    """A tiny llama folder (saved in float32; --dtype picks the precision) without EOS, and a prompt file."""
    tiny_llama(0).save_pretrained(tmp_path / "target")
    tiny_tokenizer(eos=None).save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "category": "chat", "prompt": " ".join(f"t{j}" for j in ids)})
                               + "\n" for i, ids in enumerate(PROMPTS)))
    return str(tmp_path / "target"), str(prompts)


def _bench(target: str, prompts: str, dtype: str, draft: str | None = None) -> dict:
    return bench.run(bench.parse_args(["--target", target, "--prompts", prompts, "--draft", draft or target,
                                       "--max-new-tokens", str(MAX_NEW), "--gamma", "3", "--schedule", "constant", "--dtype", dtype]))


def test_bf16_target_as_its_own_draft_is_lossless_under_the_numeric_rule(tmp_path, tiny_llama, tiny_tokenizer,
                                                                          no_latency):
    """γ + 1 tokens at a time round differently from one at a time in bf16, so greedy outputs may part at
    near-ties: each is excused within the ε measured on this target, and reported beside α; transformers'
    assisted generation is judged against transformers' own generate, which is timed as the anchor row."""
    target, prompts = _target(tmp_path, tiny_llama, tiny_tokenizer)
    r = _bench(target, prompts, "bfloat16")
    assert r["dtype"] == "bfloat16" and r["lossless"] is True and r["lossless_rule"] == "numeric"
    assert r["epsilon"] > 0 and r["divergences"] == [] and r["unchecked_tokens"] == 0
    assert r["excused_divergences"] == len(r["excused_margins"]) and all(m <= r["epsilon"] for m in r["excused_margins"])
    assert r["speculative"]["acceptance_rate"] > 0.9  # the target drafting for itself: only near-ties are rejected
    assert set(r["hf_generate"]) == {"tokens", "seconds", "tokens_per_s", "prefill_seconds", "decode_tokens_per_s",
                                     "outputs_matching_ours"} and r["hf_generate"]["tokens"] == 5 * MAX_NEW
    assert r["hf_assisted"]["lossless"] is True
    assert "lossless True (numeric: " in bench.summary(r) and "transformers generate" in bench.summary(r)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_wrong_accepted_token_is_flagged_in_either_precision(dtype, tmp_path, tiny_llama, tiny_tokenizer, no_latency,
                                                               monkeypatch, capsys):
    """A broken decoder (its third new token replaced by another) is not lossless: float32 excuses nothing, and in
    bf16 the replaced token's margin is far outside ε. The warning names the prompt and the token."""
    target, prompts = _target(tmp_path, tiny_llama, tiny_tokenizer)
    real = bench.measure.generate

    def broken(target_model, draft, ids, n, options=None, **kw):
        out, stats = real(target_model, draft, ids, n, options, **kw) if options else real(target_model, draft, ids, n, **kw)
        if draft is not None and len(out) > 2:
            out[2] = (out[2] + 50) % 97
        return out, stats

    monkeypatch.setattr(bench.measure, "generate", broken)
    r = _bench(target, prompts, dtype)
    assert r["lossless"] is False and r["lossless_rule"] == ("exact" if dtype == "float32" else "numeric")
    div = r["divergences"][0]
    assert div["prompt"] == "p0" and div["at"] == 2 and len(r["divergences"]) == len(PROMPTS)
    assert (r["epsilon"] == 0.0) if dtype == "float32" else div["margin"] > 3 * r["epsilon"]
    assert "warning: prompt p0: speculative output" in capsys.readouterr().err


# --- what the pipeline ships


def test_the_pipeline_ships_a_draft_whose_divergences_were_all_excused_and_no_other(tmp_path, capsys):
    from distill.pipeline import ship

    draft = tmp_path / "draft-src"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    best = {"draft": str(draft), "kind": "standalone", "speedup": 1.2, "acceptance_rate": 0.5, "tau": 2.0, "gamma": 3,
            "lossless": True, "lossless_rule": "numeric", "epsilon": 0.25, "excused_divergences": 2,
            "excused_margins": [0.03, 0.0312]}
    assert lossless.describe(best) == "True (numeric: 2 excused, worst 0.0312, ε 0.25)"
    shipped = ship(tmp_path / "bf16", {"best": best})
    assert shipped["excused_divergences"] == 2 and (tmp_path / "bf16" / "draft" / "config.json").is_file()
    assert ship(tmp_path / "outside", {"best": {**best, "lossless": False}}) is None
    assert not (tmp_path / "outside" / "draft").exists() and "ships no draft" in capsys.readouterr().out
