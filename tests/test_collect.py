"""distill.collect (issue 3): schema, top-k = teacher-forced target, greedy = generate, resume, ranks, modes, bad input.

Every test runs a tiny random llama (hidden 32, 2 layers) with the real default tokenizer, saved to a session folder,
so a collection takes well under a second; the multi-process tests (`slow`) start real subprocesses.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM

from decode.errors import UserError
from decode.models.targets import load_tokenizer
from distill.collect import CollectConfig, job, main, run, shards, vllm_engine
from distill.collect.shards import load_collected, shard_dirs
from distill.prompts import load_prompts

VOCAB = 49152  # the default tokenizer's
K = 5
MAX_NEW = 8

# Ten prompts of very different lengths (so every batch of 4 is padded): chat, multi-turn with a system turn, raw text.
PROMPTS = [
    {"id": "chat-short", "category": "chat", "messages": [{"role": "user", "content": "Hi!"}]},
    {
        "id": "chat-long",
        "category": "chat",
        "messages": [
            {
                "role": "user",
                "content": "Explain, step by step and with an example, how a hash map handles "
                "collisions, and when open addressing beats chaining in practice.",
            }
        ],
    },
    {
        "id": "multi-turn",
        "category": "chat",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "Seven."},
            {"role": "user", "content": "And a larger one?"},
        ],
    },
    {
        "id": "code-1",
        "category": "code",
        "messages": [{"role": "user", "content": "Write a Python function that reverses a list."}],
    },
    {
        "id": "code-2",
        "category": "code",
        "messages": [{"role": "user", "content": "What does `git rebase -i` do?"}],
    },
    {"id": "math-1", "category": "math", "messages": [{"role": "user", "content": "2+2?"}]},
    {
        "id": "math-2",
        "category": "math",
        "messages": [
            {
                "role": "user",
                "content": "A train leaves at 3pm at 60 km/h; another at 4pm at 90 km/h. When does "
                "the second catch up with the first, and how far from the station?",
            }
        ],
    },
    {"id": "raw-1", "category": "raw", "prompt": "Once upon a time"},
    {
        "id": "raw-2",
        "category": "raw",
        "prompt": "The three laws of thermodynamics are, in short, the following:",
    },
    {"id": "raw-3", "category": "raw", "prompt": "def fib(n):"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat_ids(tok, messages: list[dict]) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if not isinstance(ids, list) else ids)


def by_id(ds: datasets.Dataset) -> dict[str, dict]:
    rows = ds.to_list()
    assert len({r["id"] for r in rows}) == len(rows), "a prompt id appears more than once"
    return {r["id"]: r for r in rows}


def snapshot(out: Path) -> dict[str, str]:
    """Every file under OUT/shards with a hash of its bytes: equal snapshots = shards untouched."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "shards").rglob("*"))
        if p.is_file()
    }


def collect(out: Path, prompts: Path, target: Path, **kw) -> dict | None:
    args = dict(
        target=str(target),
        prompts=str(prompts),
        output=str(out),
        batch_size=4,
        max_new_tokens=MAX_NEW,
        topk=K,
    )
    return run(CollectConfig(**{**args, **kw}))


def teacher_forced(model, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """(len(response), V) log-probs of the target at the positions that predict each response token, unpadded."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + response_ids])).logits[0].float()
    p = len(prompt_ids)
    return torch.log_softmax(logits, -1)[p - 1 : p + len(response_ids) - 1]


def assert_topk_is_target(row: dict, model, k: int = K) -> None:
    ref = teacher_forced(model, row["prompt_ids"], row["response_ids"])
    ids = torch.tensor(row["topk_ids"], dtype=torch.long)
    got = torch.tensor(row["topk_logprobs"], dtype=torch.float32)
    assert ids.shape == got.shape == (len(row["response_ids"]), k)
    # the stored values are the target's logprobs of the stored ids (fp16 rounding: ~5e-4 relative) ...
    torch.testing.assert_close(got, ref.gather(1, ids), atol=1e-2, rtol=2e-3)
    # ... and those ids are the k best: their values are the k largest (ties make ids ambiguous, values are not)
    torch.testing.assert_close(got, ref.topk(k, -1).values, atol=1e-2, rtol=2e-3)


# --- fixtures --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models spend their time in op overhead; one intra-op thread is faster on a shared 2-core box."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tok():
    t = load_tokenizer("default")
    assert len(t) == VOCAB and t.eos_token_id is not None
    return t


def _save_tiny(tiny_llama, tok, path: Path, seed: int, **kw) -> Path:
    model = tiny_llama(
        seed, vocab=VOCAB, tie_word_embeddings=True, **kw
    )  # hidden 32, 2 layers, 4/2 heads, ffn 64
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def target_dir(tmp_path_factory, tiny_llama, tok) -> Path:
    return _save_tiny(tiny_llama, tok, tmp_path_factory.mktemp("target"), seed=0, max_position_embeddings=512)


@pytest.fixture(scope="session")
def generator_dir(tmp_path_factory, tiny_llama, tok) -> Path:
    return _save_tiny(
        tiny_llama, tok, tmp_path_factory.mktemp("generator"), seed=1, max_position_embeddings=512
    )


@pytest.fixture(scope="session")
def short_ctx_dir(tmp_path_factory, tiny_llama, tok) -> Path:
    return _save_tiny(tiny_llama, tok, tmp_path_factory.mktemp("short"), seed=0, max_position_embeddings=64)


@pytest.fixture(scope="session")
def target_model(target_dir):
    return AutoModelForCausalLM.from_pretrained(target_dir).eval()


@pytest.fixture(scope="module")
def base(tmp_path_factory, target_dir):
    """One collection of PROMPTS through the command line (batch 4, 8 new tokens, k=5), shared read-only."""
    root = tmp_path_factory.mktemp("base")
    prompts = write_jsonl(root / "prompts.jsonl", PROMPTS)
    out = root / "out"
    main(
        [
            "--target",
            str(target_dir),
            "--prompts",
            str(prompts),
            "--output",
            str(out),
            "--batch-size",
            "4",
            "--max-new-tokens",
            str(MAX_NEW),
            "--topk",
            str(K),
        ]
    )
    info = json.loads((out / "collect.json").read_text())
    return SimpleNamespace(root=root, prompts=prompts, out=out, info=info, rows=by_id(load_collected(out)))


@pytest.fixture
def base_copy(base, tmp_path) -> Path:
    """A private copy of the base collection, for tests that try to damage it."""
    out = tmp_path / "out"
    shutil.copytree(base.out, out)
    return out


# --- schema, metadata and the content of the rows --------------------------------------------------------------


def test_schema_and_metadata(base, target_dir, tok):
    ds = load_collected(base.out)
    assert ds.features == shards.FEATURES
    assert ds.features["topk_logprobs"].feature.feature.dtype == "float16"
    assert sorted(ds["id"]) == sorted(p["id"] for p in PROMPTS)  # every prompt exactly once
    assert len(shard_dirs(base.out)) == 3  # 10 prompts in batches of 4
    eos = tok.eos_token_id
    for p in PROMPTS:
        row = base.rows[p["id"]]
        assert row["category"] == p["category"] and row["source"] == "target"
        r = row["response_ids"]
        assert 1 <= len(r) <= MAX_NEW
        assert eos not in r[:-1] and (len(r) == MAX_NEW or r[-1] == eos)  # stops at EOS, keeps it
        assert len(row["topk_ids"]) == len(row["topk_logprobs"]) == len(r)
        for t, (ids, lps) in enumerate(zip(row["topk_ids"], row["topk_logprobs"])):
            assert len(ids) == len(lps) == K and len(set(ids)) == K
            assert all(0 <= i < VOCAB for i in ids)
            assert lps == sorted(lps, reverse=True) and lps[0] <= 0
            assert ids[0] == r[t]  # greedy: the emitted token is the target's top-1 at that position

    info = base.info
    expected = CollectConfig(
        target=str(target_dir),
        prompts=str(base.prompts),
        output=str(base.out),
        batch_size=4,
        max_new_tokens=MAX_NEW,
        topk=K,
    )
    assert info["target"] == str(target_dir)
    assert info["tokenizer"] == shards.tokenizer_fingerprint(tok)
    assert info["settings"] == json.loads(json.dumps(expected.settings()))
    assert info["k"] == K
    assert info["prompts"] == info["rows"] == len(PROMPTS)
    assert info["tokens"] == sum(len(r["response_ids"]) for r in base.rows.values())
    assert info["tokens_per_s"] > 0 and info["bytes_per_token"] > 0
    # the settings guard and the resolved config are saved beside the data
    guard = json.loads((base.out / "collect.settings.json").read_text())
    assert guard["tokenizer"] == info["tokenizer"] and guard["max_new_tokens"] == MAX_NEW
    assert json.loads((base.out / "collect.config.json").read_text())["batch_size"] == 4


def test_prompt_ids_apply_the_chat_template(base, tok):
    for p in PROMPTS:
        ids = base.rows[p["id"]]["prompt_ids"]
        if "messages" in p:
            assert ids == chat_ids(tok, p["messages"])
        else:
            assert ids == tok(p["prompt"])["input_ids"]
    text = tok.decode(
        base.rows["multi-turn"]["prompt_ids"]
    )  # every turn, in order, ending in the assistant's turn
    positions = [text.index(m["content"]) for m in PROMPTS[2]["messages"]]
    assert positions == sorted(positions)
    assert text.rstrip().endswith("assistant")


def test_topk_logprobs_equal_teacher_forced_forward(base, target_model):
    for row in base.rows.values():
        assert_topk_is_target(row, target_model)


def test_greedy_equals_generate_one_prompt_at_a_time(base, target_model, hf_greedy, tok):
    # batches really were padded: every shard (= batch) mixes prompt lengths
    for s in shard_dirs(base.out):
        lengths = {len(x) for x in datasets.load_from_disk(str(s))["prompt_ids"]}
        assert len(lengths) > 1
    for row in base.rows.values():
        assert row["response_ids"] == hf_greedy(target_model, row["prompt_ids"], MAX_NEW, tok.eos_token_id), (
            row["id"]
        )


def test_main_prints_the_summary_and_rerun_is_a_no_op(base_copy, base, target_dir, capsys):
    before = snapshot(base_copy)
    main(
        [
            "--target",
            str(target_dir),
            "--prompts",
            str(base.prompts),
            "--output",
            str(base_copy),
            "--batch-size",
            "2",
            "--max-new-tokens",
            str(MAX_NEW),
            "--topk",
            str(K),
        ]
    )  # batch size may change on resume
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last)["rows"] == len(PROMPTS)
    assert snapshot(base_copy) == before  # nothing collected twice


def test_stop_string_ends_the_response(tmp_path, base, target_dir, tok):
    # a stop string taken from the greedy output itself: each response must end at its first occurrence
    stop = next(
        s
        for r in base.rows.values()
        for t in r["response_ids"][1:]
        if (s := tok.decode([t]).strip()).isalnum() and len(s) >= 2
    )
    collect(tmp_path / "out", base.prompts, target_dir, stop=[stop])
    rows = by_id(load_collected(tmp_path / "out"))
    cut = 0
    for i, ref in base.rows.items():
        r = ref["response_ids"]
        n = next((t + 1 for t in range(len(r)) if stop in tok.decode(r[: t + 1])), len(r))
        assert rows[i]["response_ids"] == r[:n] and rows[i]["topk_ids"] == ref["topk_ids"][:n], i
        cut += n < len(r)
    assert cut >= 1


def test_sampling_is_seeded_and_topk_stays_the_raw_target(tmp_path, base, target_dir, target_model):
    runs = []
    for name in ("a", "b"):
        collect(tmp_path / name, base.prompts, target_dir, temperature=1.5, top_p=0.9, seed=3)
        runs.append(by_id(load_collected(tmp_path / name)))
    assert {i: r["response_ids"] for i, r in runs[0].items()} == {
        i: r["response_ids"] for i, r in runs[1].items()
    }
    assert any(r["response_ids"] != base.rows[i]["response_ids"] for i, r in runs[0].items())  # not greedy
    for row in runs[0].values():
        assert_topk_is_target(
            row, target_model
        )  # temperature / top-p shape sampling, not the stored logprobs


# --- input forms -----------------------------------------------------------------------------------------------


def test_no_chat_template_changes_prompt_ids(tmp_path, base, target_dir, tok):
    chats = [p for p in PROMPTS if "messages" in p][:3]
    prompts = write_jsonl(tmp_path / "p.jsonl", chats)
    main(
        [
            "--target",
            str(target_dir),
            "--prompts",
            str(prompts),
            "--output",
            str(tmp_path / "out"),
            "--max-new-tokens",
            "2",
            "--topk",
            "0",
            "--no-chat-template",
        ]
    )
    rows = by_id(load_collected(tmp_path / "out"))
    for p in chats:
        ids = rows[p["id"]]["prompt_ids"]
        assert ids != base.rows[p["id"]]["prompt_ids"]
        assert ids == tok("\n".join(m["content"] for m in p["messages"]))["input_ids"]
        assert (
            rows[p["id"]]["topk_ids"] == [] and len(rows[p["id"]]["response_ids"]) == 2
        )  # topk 0 stores none


def test_hf_dataset_with_column_mapping(tmp_path, target_dir, tok):
    data = tmp_path / "qa"
    data.mkdir()
    questions = ["What is the capital of France?", "Why is the sky blue?", "Define entropy."]
    datasets.Dataset.from_dict(
        {"question": questions, "kind": ["geo", "physics", "physics"], "noise": [1, 2, 3]}
    ).to_parquet(str(data / "part-0.parquet"))
    out = tmp_path / "out"
    main(
        [
            "--target",
            str(target_dir),
            "--prompts",
            str(data),
            "--columns",
            "{prompt: question, category: kind}",
            "--output",
            str(out),
            "--max-new-tokens",
            "3",
            "--topk",
            "2",
        ]
    )
    rows = load_collected(out).to_list()
    assert len(rows) == 3 and len({r["id"] for r in rows}) == 3
    got = {tuple(r["prompt_ids"]): r["category"] for r in rows}
    assert got == {tuple(tok(q)["input_ids"]): c for q, c in zip(questions, ["geo", "physics", "physics"])}
    assert json.loads((out / "collect.json").read_text())["settings"]["columns"] == {
        "prompt": "question",
        "category": "kind",
    }


# --- scoring and on-policy modes -------------------------------------------------------------------------------


def test_score_mode(tmp_path, target_dir, target_model, tok):
    chats = [
        {
            "id": "s1",
            "category": "chat",
            "messages": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi there! How can I help?"},
            ],
        },
        {
            "id": "s2",
            "category": "chat",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Capital of Italy?"},
                {"role": "assistant", "content": "Rome."},
                {"role": "user", "content": "And of Spain?"},
                {"role": "assistant", "content": "Madrid, which is also its largest city."},
            ],
        },
        {
            "id": "s3",
            "category": "raw",
            "prompt": "The quick brown fox",
            "response": " jumps over the lazy dog.",
        },
    ]
    prompts = write_jsonl(tmp_path / "chats.jsonl", chats)
    info = collect(tmp_path / "out", prompts, target_dir, mode="score", topk=4, batch_size=2)
    assert info["rows"] == 3
    rows = by_id(load_collected(tmp_path / "out"))
    for c in chats:
        row = rows[c["id"]]
        assert row["source"] == "score"
        if "messages" in c:
            prompt_ids, text = chat_ids(tok, c["messages"][:-1]), c["messages"][-1]["content"]
        else:
            prompt_ids, text = tok(c["prompt"])["input_ids"], c["response"]
        assert row["prompt_ids"] == prompt_ids
        assert row["response_ids"] == tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert_topk_is_target(row, target_model, k=4)


def test_score_mode_needs_a_response(tmp_path, target_dir):
    prompts = write_jsonl(
        tmp_path / "p.jsonl", [{"id": "q", "messages": [{"role": "user", "content": "Hi"}]}]
    )
    with pytest.raises(UserError, match="no response to score"):
        collect(tmp_path / "out", prompts, target_dir, mode="score")
    assert not (tmp_path / "out").exists()


def test_on_policy_generator_writes_and_target_scores(
    tmp_path, base, target_dir, generator_dir, target_model, hf_greedy, tok
):
    generator = AutoModelForCausalLM.from_pretrained(generator_dir).eval()
    collect(tmp_path / "out", base.prompts, target_dir, generator=str(generator_dir))
    rows = by_id(load_collected(tmp_path / "out"))
    assert set(rows) == set(base.rows)
    for row in rows.values():
        assert row["source"] == "on_policy"
        assert row["response_ids"] == hf_greedy(generator, row["prompt_ids"], MAX_NEW, tok.eos_token_id), row[
            "id"
        ]
        assert_topk_is_target(row, target_model)  # the TARGET's distribution at the generator's positions
    assert any(
        rows[i]["response_ids"] != base.rows[i]["response_ids"] for i in rows
    )  # not the target's own text


# --- bad input: a clear UserError, and shards already written stay as they were ---------------------------------


def test_unknown_column_is_refused(tmp_path, base_copy, base, target_dir):
    data = tmp_path / "qa"
    data.mkdir()
    datasets.Dataset.from_dict({"question": ["a?", "b?"]}).to_parquet(str(data / "part-0.parquet"))
    before = snapshot(base_copy)
    with pytest.raises(UserError, match=r"\['nope'\] not found.*question"):
        collect(base_copy, data, target_dir, columns={"prompt": "nope"})
    with pytest.raises(UserError, match=r"unknown field.*bogus"):
        collect(base_copy, data, target_dir, columns={"bogus": "question"})
    assert snapshot(base_copy) == before and len(load_collected(base_copy)) == len(PROMPTS)


def test_empty_prompt_file_is_refused(tmp_path, base_copy, target_dir):
    before = snapshot(base_copy)
    for text in ("", "\n\n"):
        empty = tmp_path / "empty.jsonl"
        empty.write_text(text)
        with pytest.raises(UserError, match="empty"):
            collect(base_copy, empty, target_dir)
    assert snapshot(base_copy) == before


def test_prompt_longer_than_context_is_refused(tmp_path, base_copy, short_ctx_dir):
    prompts = write_jsonl(
        tmp_path / "long.jsonl",
        [
            {"id": "ok", "prompt": "short"},
            {"id": "too-long", "prompt": " ".join(["lorem ipsum dolor sit amet"] * 20)},
        ],
    )
    before = snapshot(base_copy)
    with pytest.raises(UserError, match=r"'too-long'.*context of 64"):
        collect(base_copy, prompts, short_ctx_dir)
    assert snapshot(base_copy) == before


@pytest.mark.parametrize("kw, message", [
    ({"limit": -1}, "--limit must be >= 0"),  # before: every prompt but the last, exit 0
    ({"max_new_tokens": 0}, "--max-new-tokens must be >= 1, got 0"),
    ({"batch_size": -4}, "--batch-size must be >= 0 (0 = auto), got -4"),
    ({"topk": -1}, "--topk must be >= 0"),
    ({"num_shards": -2}, "--num-shards must be >= 0"),
    ({"shard_index": -5}, "--shard-index >= 0 (or -1 = RANK)"),
    ({"num_shards": 2, "shard_index": 2}, "--shard-index 2 is outside 0..1"),
    ({"tensor_parallel_size": 0}, "--tensor-parallel-size must be >= 1"),
    ({"dtype": "float8"}, "unknown --dtype 'float8'"),
    ({"temperature": -1.0}, "temperature must be >= 0"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
])
def test_numbers_out_of_bounds_are_refused_before_any_work(kw, message):
    with pytest.raises(UserError, match=re.escape(message)):
        CollectConfig(**kw)


@pytest.mark.parametrize("spec", ["helduot", "data/prompts.parquet", "./mine", "a/b/c"])
def test_an_unknown_prompt_set_is_one_line_without_asking_the_hub(spec, monkeypatch):
    """Before: 30 s of Hub retries, then 'Couldn't reach ... on the Hub'. ORG/NAME stays a Hub id."""
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("asked the Hub"))
    with pytest.raises(UserError, match=re.escape(f"prompts not found: {spec!r} is neither a bundled set (train, "
                                                  "heldout, long, long-heldout, ood, long-ood), an existing file or folder, nor a "
                                                  "Hub dataset id")):
        load_prompts(spec)


def test_collect_bench_checks_its_numbers_with_one_line(capsys):
    from distill.collect import bench

    for argv, message in ((["--n", "0"], "--n must be >= 1"), (["--engine", "x"], "--engine must be hf or vllm"),
                          (["--topk", "-1"], "--topk must be >= 0"), (["--batch-size", "-1"], "--batch-size must be >= 0"),
                          (["--samples", "0"], "--samples must be >= 1"),
                          (["--samples", "2", "--engine", "vllm"], "--samples 2 times the HF collection")):
        with pytest.raises(SystemExit, match=re.escape(f"error: {message}")):
            bench.main(argv)


def test_a_bad_prompt_file_fails_before_the_target_loads(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "prompt": "caf\xe9"}\n')
    monkeypatch.setattr(job, "load_target", lambda *a: pytest.fail("the target loaded before the prompts"))
    with pytest.raises(UserError, match=re.escape(f"{bad}:1: not UTF-8 text")):
        run(CollectConfig(prompts=str(bad), output=str(tmp_path / "out")))


def test_topk_larger_than_vocabulary_is_refused(base_copy, base, target_dir):
    before = snapshot(base_copy)
    with pytest.raises(UserError, match=f"--topk {VOCAB + 1} is larger than the target's vocabulary"):
        collect(base_copy, base.prompts, target_dir, topk=VOCAB + 1)
    assert snapshot(base_copy) == before


def test_output_with_other_settings_is_refused(base_copy, base, target_dir, generator_dir):
    before = snapshot(base_copy)
    with pytest.raises(UserError, match=r"max_new_tokens: 8 there, 9 now.*new --output.*start fresh"):
        collect(base_copy, base.prompts, target_dir, max_new_tokens=9)
    with pytest.raises(UserError, match=r"target: .* there, .* now.*start fresh"):
        collect(base_copy, base.prompts, generator_dir)  # another target (same tokenizer)
    assert snapshot(base_copy) == before
    assert by_id(load_collected(base_copy)).keys() == base.rows.keys()


def test_collection_made_before_the_engine_setting_resumes(base_copy, base, target_dir, monkeypatch):
    """A collect.settings.json written before `engine` was a setting was made by transformers: it resumes with
    --engine hf (the default) and is refused with --engine vllm."""
    path = base_copy / "collect.settings.json"
    settings = json.loads(path.read_text())
    assert settings.pop("engine") == "hf" and base.info["settings"]["engine"] == "hf"
    path.write_text(json.dumps(settings))
    before = snapshot(base_copy)
    assert collect(base_copy, base.prompts, target_dir)["rows"] == len(PROMPTS)
    assert snapshot(base_copy) == before
    monkeypatch.setattr(vllm_engine, "available", lambda: True)  # refused by the settings, before any engine starts
    with pytest.raises(UserError, match="engine: 'hf' there, 'vllm' now"):
        collect(base_copy, base.prompts, target_dir, engine="vllm")


def test_full_disk_while_writing_a_shard(tmp_path, monkeypatch, base, target_dir):
    out = tmp_path / "out"
    save = datasets.Dataset.save_to_disk
    calls = []

    def disk_fills_on_second_shard(self, path, *a, **kw):
        calls.append(path)
        save(self, path, *a, **kw)  # the shard's files are (partly) there when the disk fills ...
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", disk_fills_on_second_shard)
    with pytest.raises(UserError, match=r"disk full.*1 shards already written are intact.*resume"):
        collect(out, base.prompts, target_dir)
    assert [
        p.name for p in (out / "shards").iterdir() if p.name.startswith(".")
    ] == []  # no temp folders left
    assert len(shard_dirs(out)) == 1 and len(load_collected(out)) == 4  # the first shard, whole and loadable
    assert not (out / "collect.json").exists()

    monkeypatch.undo()
    info = collect(out, base.prompts, target_dir)
    assert info["rows"] == info["prompts"] == len(PROMPTS)
    rows = by_id(load_collected(out))
    assert rows.keys() == base.rows.keys()
    assert all(rows[i]["response_ids"] == base.rows[i]["response_ids"] for i in rows)


def test_user_errors_exit_with_one_line(tmp_path, target_dir):
    with pytest.raises(SystemExit) as e:
        main(
            [
                "--target",
                str(target_dir),
                "--prompts",
                str(tmp_path / "missing.jsonl"),
                "--output",
                str(tmp_path),
            ]
        )
    assert str(e.value.code).startswith("error: prompt file not found")


# --- real processes: kill -9 and resume; two ranks under accelerate ---------------------------------------------


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.slow
def test_kill_and_resume_collects_every_prompt_exactly_once(tmp_path, target_dir):
    ids = [f"p{i:02d}" for i in range(40)]
    prompts = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": i, "category": "chat", "prompt": f"Prompt {i}: " + "tell me more " * (n % 7)}
            for n, i in enumerate(ids)
        ],
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "distill.collect",
        "--target",
        str(target_dir),
        "--prompts",
        str(prompts),
        "--output",
        str(out),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "32",
        "--topk",
        "4",
    ]
    with open(tmp_path / "log1", "w") as log:
        proc = subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and len(shard_dirs(out)) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert proc.poll() is None, (
                "the collection ended before it could be killed:\n" + (tmp_path / "log1").read_text()
            )
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed = {p.name for p in shard_dirs(out)}
    assert 2 <= len(killed) < 20
    partial = load_collected(out)  # whatever a kill leaves behind loads: no half-written shard is visible
    assert len(set(partial["id"])) == len(partial) < len(ids)

    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert killed <= {p.name for p in shard_dirs(out)}  # the rerun kept what was there
    ds = load_collected(out)
    assert sorted(ds["id"]) == ids  # every prompt exactly once
    info = json.loads((out / "collect.json").read_text())
    assert info["rows"] == info["prompts"] == len(ids)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_accelerate_launch_equals_one_process(tmp_path, base, target_dir):
    # `--cpu --num_processes 2` makes accelerate start ONE process without RANK/WORLD_SIZE (its simple launcher);
    # `--multi_gpu` on a CPU-only box starts real torchrun ranks, which is what a 2-GPU node does.
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        "-m",
        "distill.collect",
        "--target",
        str(target_dir),
        "--prompts",
        str(base.prompts),
        "--output",
        str(out),
        "--batch-size",
        "4",
        "--max-new-tokens",
        str(MAX_NEW),
        "--topk",
        str(K),
    ]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {m["rank"] for m in shards.shard_meta(out)} == {0, 1}  # both ranks took a share
    rows = by_id(load_collected(out))
    assert rows.keys() == base.rows.keys()
    for i, row in rows.items():
        ref = base.rows[i]
        for key in ("category", "source", "prompt_ids", "response_ids", "topk_ids"):
            assert row[key] == ref[key], (i, key)
        torch.testing.assert_close(
            torch.tensor(row["topk_logprobs"]), torch.tensor(ref["topk_logprobs"]), atol=1e-2, rtol=2e-3
        )
    info = json.loads((out / "collect.json").read_text())
    assert info["rows"] == info["prompts"] == len(PROMPTS)


def test_spread_limit_takes_prompts_in_turn_from_each_category():
    rows = load_prompts("heldout")
    cats = list(dict.fromkeys(r["category"] for r in rows))
    first = load_prompts("heldout", limit=len(cats) * 2)
    assert len({r["category"] for r in first}) < len(cats)  # the file's order: the first N are one or two categories
    spread = load_prompts("heldout", limit=len(cats) * 2, spread=True)
    assert [r["category"] for r in spread] == cats * 2
    assert spread[0] == rows[0] and len(load_prompts("heldout", limit=10_000, spread=True)) == len(rows)


# --- several answers per prompt (--samples) ----------------------------------------------------------------------


def test_samples_keep_the_greedy_answer_and_add_seeded_sampled_ones(tmp_path, base, target_dir, target_model):
    info = collect(tmp_path / "s", base.prompts, target_dir, samples=3, sample_temperature=1.5, seed=2)
    rows = by_id(load_collected(tmp_path / "s"))
    assert info["prompts"] == len(PROMPTS) and info["rows"] == 3 * len(PROMPTS)
    assert info["settings"]["samples"] == 3 and info["settings"]["sample_temperature"] == 1.5
    for pid, first in base.rows.items():
        assert rows[pid]["response_ids"] == first["response_ids"]  # the first answer is the greedy one
        sampled = [rows[shards.sample_id(pid, j)] for j in (1, 2)]
        assert all(s["prompt_ids"] == first["prompt_ids"] for s in sampled)
    differs = [rows[shards.sample_id(p, j)]["response_ids"] != base.rows[p]["response_ids"] for p in base.rows for j in (1, 2)]
    assert sum(differs) > len(differs) // 2  # sampled at 1.5, not greedy copies
    for row in list(rows.values())[::5]:
        assert_topk_is_target(row, target_model)  # the raw target's top-k for sampled answers too
    again = collect(tmp_path / "t", base.prompts, target_dir, samples=3, sample_temperature=1.5, seed=2)
    assert by_id(load_collected(tmp_path / "t")) == rows and again["tokens"] == info["tokens"]


def test_samples_resume_exactly_once_and_split_by_prompt(tmp_path, base, target_dir):
    out = tmp_path / "s"
    collect(out, base.prompts, target_dir, samples=2, sample_temperature=1.5)
    rows = by_id(load_collected(out))
    for lost in shard_dirs(out)[-2:]:  # a kill before these shards were written
        shutil.rmtree(lost)
    (out / "collect.json").unlink()
    with pytest.raises(UserError, match="samples: 2 there, 3 now"):
        collect(out, base.prompts, target_dir, samples=3, sample_temperature=1.5)
    assert collect(out, base.prompts, target_dir, samples=2, sample_temperature=1.5)["rows"] == 2 * len(PROMPTS)
    assert by_id(load_collected(out)).keys() == rows.keys()
    assert {shards.split_sample_id(i)[0] for i in rows} == set(base.rows)
    assert shards.split_sample_id("math-1~s2") == ("math-1", 2) and shards.split_sample_id("a~b") == ("a~b", 0)
    from distill.train.data import hash_id

    assert hash_id("math-1~s2") == hash_id("math-1")  # a prompt's answers share a side of the held-out split


@pytest.mark.parametrize("kw, message", [
    ({"samples": 0}, "--samples must be >= 1"),
    ({"samples": 2, "sample_temperature": 0.0}, "--sample-temperature > 0"),
    ({"samples": 2, "mode": "score"}, "--mode generate"),
])
def test_bad_samples_are_refused(kw, message):
    with pytest.raises(UserError, match=re.escape(message)):
        CollectConfig(**kw)


def test_collect_bench_times_the_steps_matmuls_alone(tiny_llama):
    """gemm_ceiling: every linear layer once at the batch's rows: 2 x their weights' elements an answer token, the
    head left out for prompt tokens; the answer tokens/s those matmuls alone would allow falls as prompts grow."""
    from distill.collect.bench import gemm_ceiling

    model = tiny_llama(0)
    g = gemm_ceiling(model, 8, 0, 100, reps=1)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert g["rows"] == 8 and g["gflop_per_token"] == round(2 * weights / 1e9, 3)
    assert g["tokens_per_s"] > 0 and g["gemm_gflop_per_s"] > 0
    body = 2 * (weights - model.lm_head.weight.numel())
    with_prompts = gemm_ceiling(model, 8, 1000, 100, reps=1)
    assert with_prompts["prompt_tokens"] == 1000
    expected = 100 / ((1000 * body + 100 * 2 * weights) / (with_prompts["gemm_gflop_per_s"] * 1e9))
    assert with_prompts["tokens_per_s"] == pytest.approx(expected, rel=0.05)  # from the rate rounded to 0.1 GFLOP/s
