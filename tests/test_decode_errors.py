"""Bad input gives one decode.errors.UserError whose message names the problem (and the CLI prints one line)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decode import bench
from decode.errors import UserError
from decode.models.targets import check_tokenizers, load_draft, load_model, parse_dtype, parse_layers, resolve
from decode.prompts import check_context, encode_prompt, read_prompts

REPO = Path(__file__).resolve().parents[1]


def _raises(fn, *args, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        fn(*args, **kwargs)
    return str(e.value)


# --- model specs


def test_missing_model_path(tmp_path):
    missing = tmp_path / "no-such-model"
    msg = _raises(load_model, str(missing))
    assert "model not found" in msg and str(missing) in msg
    assert "not found" in _raises(resolve, "./relative/missing")
    assert "not found" in _raises(resolve, "just-a-name")


def test_folder_without_config_json(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    msg = _raises(load_model, str(tmp_path))
    assert "no config.json" in msg and str(tmp_path) in msg


def test_missing_gguf_file(tmp_path):
    msg = _raises(resolve, str(tmp_path / "model.gguf"))
    assert msg.startswith("GGUF file not found") and "model.gguf" in msg


def test_unknown_dtype():
    assert "unknown --dtype 'float8'" in _raises(parse_dtype, "float8")
    assert parse_dtype("auto", "cpu") == torch.float32 and parse_dtype("bf16") == torch.bfloat16


@pytest.mark.parametrize(
    "text, words",
    [
        ("0,x", "comma-separated integers"),
        ("", "layer list is empty"),
        ("0,30", "out of range: the target has 30 layers"),
        ("1,1", "repeats an index"),
    ],
)
def test_bad_layer_lists(text, words):
    assert words in _raises(parse_layers, text, 30)


# --- prompt files


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"id": "a", "category": "chat", "messages": [{"role": "user", "content": "hi"}]})


def test_malformed_prompt_line_names_the_line(tmp_path):
    f = _write(tmp_path / "p.jsonl", [GOOD, "", '{"id": "b", "prompt": "x"', GOOD])
    msg = _raises(read_prompts, f)
    assert f"{f}:3:" in msg and "malformed JSON" in msg


@pytest.mark.parametrize(
    "row, words",
    [
        ({"category": "x", "prompt": "hi"}, "missing field 'id'"),
        ({"id": "b", "prompt": "hi", "messages": [{"role": "user", "content": "x"}]}, "exactly one of"),
        ({"id": "b"}, "exactly one of"),
        ({"id": "b", "prompt": "  "}, "'prompt' must be a non-empty string"),
        ({"id": "b", "messages": []}, "'messages' must be a non-empty list"),
        ({"id": "b", "messages": [{"role": "robot", "content": "x"}]}, "message 0 must be"),
        ([1, 2], "expected a JSON object, got list"),
        ({"id": "a", "prompt": "dup"}, "duplicate id 'a'"),
    ],
)
def test_invalid_prompt_records_name_the_line(tmp_path, row, words):
    f = _write(tmp_path / "p.jsonl", [GOOD, json.dumps(row)])
    msg = _raises(read_prompts, f)
    assert f"{f}:2:" in msg and words in msg


@pytest.mark.parametrize("data, line", [
    (GOOD.encode() + b"\n" + '{"id": "b", "prompt": "café"}'.encode("latin-1") + b"\n", 2),  # Latin-1
    ('{"id": "b", "prompt": "x"}\n'.encode("utf-16"), 1),  # Windows' "Unicode"
])
def test_a_prompt_file_that_is_not_utf8_names_the_line_and_the_fix(tmp_path, data, line):
    f = tmp_path / "p.jsonl"
    f.write_bytes(data)
    msg = _raises(read_prompts, f)
    assert msg.startswith(f"{f}:{line}: not UTF-8 text") and msg.endswith("save the file as UTF-8")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_prompt_file(tmp_path, content):
    f = tmp_path / "empty.jsonl"
    f.write_text(content)
    msg = _raises(read_prompts, f)
    assert "prompt file is empty" in msg and str(f) in msg


def test_missing_prompt_file(tmp_path):
    assert "prompt file not found" in _raises(read_prompts, tmp_path / "nope.jsonl")


def test_good_prompt_file_reads_and_encodes(tmp_path, tiny_tokenizer):
    f = _write(tmp_path / "p.jsonl", [GOOD, json.dumps({"id": 7, "prompt": "t3 t4 t5"})])
    rows = read_prompts(f)
    assert [r["id"] for r in rows] == ["a", "7"] and rows[1]["category"] == "default"
    tok = tiny_tokenizer()
    assert encode_prompt(tok, rows[1]) == [3, 4, 5]


def test_bundled_heldout_prompts_are_valid():
    rows = read_prompts(REPO / "distill" / "data" / "heldout.jsonl")
    assert len(rows) >= 3 and len({r["category"] for r in rows}) > 1


def test_prompt_longer_than_context():
    msg = _raises(check_context, 2000, 64, 2048, "long-1")
    assert "'long-1'" in msg and "2000 tokens" in msg and "max_new_tokens=64" in msg and "2048" in msg
    check_context(1984, 64, 2048, "fits")  # exactly fills the window: fine
    check_context(10**6, 64, None, "no limit known")


# --- tokenizers


def test_draft_tokenizer_with_different_token_ids(tiny_tokenizer):
    msg = _raises(check_tokenizers, tiny_tokenizer(), tiny_tokenizer(swap=(5, 9)))
    assert "draft's tokenizer differs" in msg and "token-to-id maps differ" in msg
    assert "t5" in msg or "t9" in msg


def test_draft_tokenizer_with_different_size_and_eos(tiny_tokenizer):
    msg = _raises(check_tokenizers, tiny_tokenizer(97), tiny_tokenizer(50, eos="t2"))
    assert "vocabulary size 97 vs 50" in msg and "eos_token_id 1 vs 2" in msg


def test_same_tokenizer_passes_and_vocab_map_is_range_checked(tiny_tokenizer):
    check_tokenizers(tiny_tokenizer(), tiny_tokenizer())
    check_tokenizers(tiny_tokenizer(), tiny_tokenizer(10), vocab_map=[0, 5, 96])
    msg = _raises(check_tokenizers, tiny_tokenizer(), tiny_tokenizer(10), vocab_map=[0, 5, 97])
    assert "outside the target vocabulary (size 97)" in msg and "97" in msg


def _save_draft(folder: Path, model, tok, vocab_map=None) -> str:
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if vocab_map is not None:
        (folder / "draft_vocab.json").write_text(json.dumps({"draft_to_target": vocab_map}))
    return str(folder)


def test_load_draft_folder_with_mismatched_tokenizer(tmp_path, tiny_llama, tiny_tokenizer):
    """Two ids swapped, one size: a specdistill draft (it speaks the target's ids) is refused naming them; a plain
    folder is a draft with its own tokenizer."""
    target, tok = tiny_llama(0), tiny_tokenizer()
    path = _save_draft(tmp_path / "d", tiny_llama(1), tiny_tokenizer(swap=(3, 4)))
    assert load_draft(path, target, tok).other is not None
    (tmp_path / "d" / "specdistill.json").write_text(json.dumps({"target": "tiny"}))
    msg = _raises(load_draft, path, target, tok)
    assert "built by specdistill for tiny" in msg and "token-to-id maps differ" in msg and "'t3'" in msg


def test_load_draft_folder_with_vocab_map(tmp_path, tiny_llama, tiny_tokenizer):
    target, tok = tiny_llama(0), tiny_tokenizer()
    ids = list(range(0, 97, 3))  # 33 entries
    path = _save_draft(tmp_path / "ok", tiny_llama(1, vocab=len(ids)), tiny_tokenizer(len(ids)), ids)
    draft = load_draft(path, target, tok)
    assert draft.vocab_map.tolist() == ids and draft.vocab_map.dtype == torch.long
    bad = _save_draft(tmp_path / "bad", tiny_llama(1, vocab=len(ids)), tiny_tokenizer(len(ids)), ids[:-1])
    assert "32 entries but the draft has vocab_size 33" in _raises(load_draft, bad, target, tok)
    # a plain draft folder sharing the tokenizer loads without a map
    plain = load_draft(_save_draft(tmp_path / "plain", tiny_llama(2), tiny_tokenizer()), target, tok)
    assert plain.vocab_map is None


# --- bench configuration


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--gamma", "0"], "--gamma must be in 1..64"),
        (["--gamma", "-2"], "--gamma must be in 1..64"),
        (["--gamma", "100000"], "--gamma must be in 1..64"),  # before: a 9.2 GB cache for a 135M target
        (["--gamma", "four"], "--gamma: cannot parse 'four'"),
        (["--tree-nodes", "1000"], "--tree-nodes must be in 0..64"),
        (["--limit", "-1"], "--limit must be >= 0"),
        (["--dtype", "float8"], "unknown --dtype 'float8'"),
        (["--temperature", "-0.5"], "temperature must be >= 0"),
        (["--schedule", "fastest"], "--schedule must be one of"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--top-p", "0"], "top_p must be in (0, 1]"),
    ],
)
def test_bench_rejects_bad_settings(argv, words):
    assert words in _raises(bench.parse_args, argv)


def test_bench_config_defaults_are_valid():
    cfg = bench.parse_args([])
    assert cfg.gamma >= 1 and cfg.schedule == "adaptive" and cfg.target == "default"
    with pytest.raises(UserError, match="--gamma must be in 1..64"):
        bench.BenchConfig(gamma=0)


def test_bench_main_prints_one_error_line(tmp_path, capsys):
    """In process: main() turns a UserError into `error: ...` and a nonzero exit, before loading any model."""
    bad = _write(tmp_path / "bad.jsonl", ["not json"])
    with pytest.raises(SystemExit) as e:
        bench.main(["--prompts", str(bad)])
    assert str(e.value).startswith("error: ") and f"{bad}:1:" in str(e.value)
    with pytest.raises(SystemExit) as e:
        bench.main(["--gamma", "0"])
    assert str(e.value).startswith("error: --gamma must be in 1..64")


@pytest.mark.slow
def test_bench_cli_bad_prompt_file_exits_with_one_line(tmp_path):
    bad = _write(tmp_path / "bad.jsonl", [GOOD, "{oops"])
    proc = subprocess.run(
        [sys.executable, "-m", "decode.bench", "--prompts", str(bad), "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode != 0
    assert proc.stderr.startswith("error:"), proc.stderr
    assert f"{bad}:2:" in proc.stderr and "malformed JSON" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "r.json").exists()
