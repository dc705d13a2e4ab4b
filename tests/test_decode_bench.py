"""decode.bench end to end on tiny model folders (fast): the result JSON, lossless flag, HF-assisted comparison."""

import json

import pytest

from decode import bench, generate

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# docs/architecture.md, "Evaluation folder and result JSON"
RESULT_KEYS = set(
    "target draft device dtype prompts max_new_tokens temperature gamma schedule baseline speculative hf_assisted"
    " speedup speedup_vs_hf_assisted lossless per_category cost_model"
    " hf_generate lossless_rule epsilon excused_divergences excused_margins".split()  # decode.drafting.lossless's verdict
)
SPEC_KEYS = set(
    "tokens seconds tokens_per_s acceptance_rate tau target_forwards draft_forwards accept_histogram".split()
)
BASELINE_KEYS = {"tokens", "seconds", "tokens_per_s", "prefill_seconds", "decode_tokens_per_s"}  # decode: after the 1st token
PROMPT_IDS = [[3, 4, 5, 6, 7, 8], [10, 11, 12], [40, 41, 42, 43]]
MAX_NEW = 12


def _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config: bool):
    """A tiny target folder whose tokenizer EOS is a token the target really emits for the first prompt."""
    target = tiny_llama(0)
    out, _ = generate(target, None, PROMPT_IDS[0], MAX_NEW)
    eos = out[4]
    tok = tiny_tokenizer(eos=f"t{eos}")
    assert tok.eos_token_id == eos
    if eos_in_generation_config:
        target.generation_config.eos_token_id = eos
    target.save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    cats = ["chat", "code", "chat"]
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "category": c, "prompt": " ".join(f"t{j}" for j in ids)}) + "\n"
            for i, (ids, c) in enumerate(zip(PROMPT_IDS, cats))
        )
    )
    return str(tmp_path / "target"), str(prompts), eos


def _run(target: str, prompts: str, draft: str, args: str = "") -> dict:
    argv = ["--target", target, "--prompts", prompts, "--draft", draft, "--max-new-tokens", str(MAX_NEW)]
    return bench.run(bench.parse_args(argv + args.split()))


@pytest.mark.parametrize("draft", ["layers:0", "same"])
def test_bench_result_schema_and_lossless(tmp_path, tiny_llama, tiny_tokenizer, draft):
    target, prompts, eos = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    r = _run(target, prompts, target if draft == "same" else draft)
    assert RESULT_KEYS <= r.keys()
    assert (
        r["prompts"] == 3 and r["max_new_tokens"] == MAX_NEW and r["gamma"] == 4 and r["dtype"] == "float32"
    )
    assert (
        set(r["baseline"]) == BASELINE_KEYS and SPEC_KEYS <= r["speculative"].keys()
    )
    assert r["lossless"] is True and (r["lossless_rule"], r["epsilon"], r["excused_divergences"]) == ("exact", 0.0, 0)
    assert r["hf_generate"]["tokens"] == r["baseline"]["tokens"]  # transformers' own target alone: the same outputs
    s = r["speculative"]
    assert s["tokens"] == r["baseline"]["tokens"] < 3 * MAX_NEW  # the first prompt stops at EOS
    assert sum(s["accept_histogram"]) == s["rounds"] and s["target_forwards"] == s["rounds"] + 3
    assert r["hf_assisted"]["outputs_matching_target"] == 3 and r["hf_assisted"]["tokens"] == s["tokens"]
    assert set(r["per_category"]) == {"chat", "code"} and r["per_category"]["chat"]["prompts"] == 2
    assert list(r["per_context"]) == ["<512"] and r["per_context"]["<512"]["prompts"] == 3
    cm = r["per_context"]["<512"]["cost_model"]  # the cost model at this length (decode.bench.context_cost)
    assert cm["target_prompt_steps"] > 0 and cm["v"] > 0 and cm["draft_prompt_steps"] >= 0
    assert s["target_prompt_seconds"] < s["target_seconds"] and s["draft_prompt_seconds"] <= s["draft_seconds"]
    # the first token comes after both prompt forwards, as engines count it
    assert s["prefill_seconds"] >= s["target_prompt_seconds"] + s["draft_prompt_seconds"]
    assert r["cost_model"]["alpha"] == s["acceptance_rate"]
    # v at every γ the cost model may read (paired with one-token forwards, decode.bench.latency.verify_ratio), and which
    # matmul the target took for single tokens and prompts on this machine
    assert {"1", "2", "3", "4", "5", "6", "8"} <= set(r["cost_model"]["v"]) and min(r["cost_model"]["v"].values()) > 0
    assert set(r["cost_model"]["target_matmul"]) == {"one_token", "prompt", "verify", "kernel_isa",
                                                     "kernel_prefetch_bytes"}
    ir = r["cost_model"]["in_run"]  # c and v from the run's own forward timings, and the model's prediction with them
    assert set(ir) == {"c", "v", "target_forward_ms", "predicted_speedup"} and min(ir.values()) > 0
    from decode.bench import costmodel

    assert ir["predicted_speedup"] == pytest.approx(
        costmodel.speedup(r["cost_model"]["alpha_iid"], r["gamma"], ir["c"], ir["v"]), abs=2e-4)
    if draft == "same":
        assert s["acceptance_rate"] == 1.0 and r["cost_model"]["c"] is not None


def test_bench_hf_assisted_stops_at_the_same_eos_as_ours(tmp_path, tiny_llama, tiny_tokenizer):
    """The tokenizer's EOS is not in the model's generation_config: both decoders must still stop at it.

    decode.models.targets.eos_ids adds the tokenizer's EOS for our decoder, so transformers must be given the same ids,
    or it runs past the EOS and its tokens/s and outputs_matching_target compare different outputs.
    """
    target, prompts, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=False)
    r = _run(target, prompts, "layers:0")
    assert r["lossless"] is True
    assert r["speculative"]["tokens"] < 3 * MAX_NEW  # our decoder stopped at the tokenizer's EOS
    assert r["hf_assisted"]["tokens"] == r["speculative"]["tokens"]
    assert r["hf_assisted"]["outputs_matching_target"] == 3


def test_bench_reduced_vocabulary_draft_skips_hf_assisted(tmp_path, tiny_llama, tiny_tokenizer):
    target, prompts, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    ids = sorted(set(range(0, 97, 2)) | {j for p in PROMPT_IDS for j in p})
    draft = tiny_llama(1, vocab=len(ids))
    draft.save_pretrained(tmp_path / "draft")
    tiny_tokenizer(len(ids)).save_pretrained(tmp_path / "draft")
    (tmp_path / "draft" / "draft_vocab.json").write_text(json.dumps({"draft_to_target": ids}))
    r = _run(target, prompts, str(tmp_path / "draft"), "--no-hf-assisted")
    assert r["lossless"] is True and r["hf_assisted"] is None and r["speedup_vs_hf_assisted"] is None
    r = _run(target, prompts, str(tmp_path / "draft"))
    assert r["hf_assisted"] is None  # transformers cannot run a reduced-vocabulary draft


def test_bench_sampling_run_reports_no_lossless_flag(tmp_path, tiny_llama, tiny_tokenizer):
    target, prompts, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    r = _run(target, prompts, "layers:0", "--temperature 0.8 --top-k 20 --limit 2 --schedule dynamic")
    assert (
        r["lossless"] is None and r["prompts"] == 2 and r["temperature"] == 0.8 and r["schedule"] == "dynamic"
    )


def test_bench_main_writes_out_and_prints_json_last(tmp_path, tiny_llama, tiny_tokenizer, capsys):
    target, prompts, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    out = tmp_path / "nested" / "result.json"
    bench.main(
        f"--target {target} --draft layers:1 --prompts {prompts} --max-new-tokens 5 --limit 1 --out {out}".split()
    )
    printed = capsys.readouterr()
    last = printed.out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(out.read_text())
    assert json.loads(last)["draft"] == "layers:1"
    r = json.loads(last)  # and the headline numbers in one line on stderr, as the README shows them
    assert printed.err.strip().splitlines()[-1] == bench.summary(r)
    assert f"target alone {r['baseline']['tokens_per_s']:.1f}" in bench.summary(r)


def test_bench_context_check_names_the_prompt(tmp_path, tiny_llama, tiny_tokenizer):
    target, _, _ = _folders(tmp_path, tiny_llama, tiny_tokenizer, eos_in_generation_config=True)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"id": "too-long", "prompt": " ".join(["t5"] * 500)}) + "\n")
    from decode.errors import UserError

    with pytest.raises(UserError, match="'too-long' has 500 tokens.*context of 512 positions"):
        _run(target, str(long), "layers:0", "--max-new-tokens 20")
