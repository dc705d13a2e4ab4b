"""Bad inputs to distill.collect (and distill.collect.bench) and decode.bench: prompt files, numbers, devices,
damaged or mismatched models. Each stops before any generation; most before a model loads."""

import json
import os
import shutil
import sys

from badinputs import Case

GOOD = {"id": "a", "category": "chat", "messages": [{"role": "user", "content": "hi"}]}


def _prompts(env, lines: list, name: str = "p.jsonl") -> str:
    """A prompt file of these lines (dicts become JSON, str are written as they are, bytes as bytes)."""
    p = env.tmp / name
    p.write_bytes(b"".join(x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode() + b"\n"
                           for x in lines))
    return str(p)


def _collect(env, *args) -> list[str]:
    return ["--target", env.base.target, "--output", str(env.tmp / "out"), "--max-new-tokens", "2", *args]


def _bench(env, *args) -> list[str]:
    return ["--target", env.base.target, "--draft", "layers:0", "--prompts", _prompts(env, [GOOD], "good.jsonl"),
            "--max-new-tokens", "2", *args]


def _truncated(env) -> str:
    """A copy of the tiny target whose model.safetensors is cut in half (a full disk, a killed copy)."""
    folder = env.tmp / "truncated"
    shutil.copytree(env.base.target, folder)
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    return str(folder)


def _other_tokenizer(env) -> str:
    """The tiny target's weights with a tokenizer one token larger, as a specdistill draft (its specdistill.json names
    another target): a draft that must speak the target's ids and does not."""
    folder = env.shared / "other-tokenizer"
    if not folder.exists():
        from transformers import AutoTokenizer

        shutil.copytree(env.base.target, folder)
        tok = AutoTokenizer.from_pretrained(folder)
        tok.add_tokens(["<specdistill-extra>"])
        tok.save_pretrained(folder)
        (folder / "specdistill.json").write_text(json.dumps({"target": "another-target"}))
    return str(folder)


def _no_chat_template(env) -> str:
    """A copy of the tiny target whose tokenizer has no chat template (a base model)."""
    folder = env.tmp / "base-model"
    shutil.copytree(env.base.target, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)


def _gpt2_draft(env, tokenizer: bool = True, template: str | None = None) -> str:
    """A tiny random draft with GPT-2's tokenizer (tests/tokenizer_pairs.py): another tokenizer than the target's;
    without its tokenizer files, or with a chat template of its own."""
    base = env.shared / "gpt2-draft"
    if not base.exists():
        import torch
        from tokenizer_pairs import gpt2_tokenizer
        from transformers import LlamaConfig, LlamaForCausalLM

        tok = gpt2_tokenizer(env.shared / "gpt2-tokenizer")
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1)).save_pretrained(base)
        tok.save_pretrained(base)
    if tokenizer and template is None:
        return str(base)
    folder = env.tmp / "gpt2-draft"
    shutil.copytree(base, folder, ignore=None if tokenizer else shutil.ignore_patterns("tokenizer*", "special_tokens*"))
    if template is not None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)


def _word_draft(env) -> str:
    """A tiny random draft with a word-level tokenizer of 97 tokens (t0..t96): it shares almost nothing of the
    target's vocabulary."""
    folder = env.shared / "word-draft"
    if not folder.exists():
        import torch
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

        tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(97)}, unk_token="t0"))
        tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
        PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t1").save_pretrained(folder)
    return str(folder)


def _config_only(env) -> str:
    """The tiny target's config.json and tokenizer files without its weights (a shape for --load-format dummy)."""
    folder = env.tmp / "config-only"
    shutil.copytree(env.base.target, folder, ignore=shutil.ignore_patterns("*.safetensors*"))
    return str(folder)


LONG = {"id": "long", "prompt": " ".join(["lorem ipsum dolor sit amet"] * 120)}  # ~600 tokens; the target has 512

CASES = [
    # --- distill.collect: numbers
    Case("collect", "--limit -1", lambda env: _collect(env, "--limit", "-1"), "--limit must be >= 0"),
    Case("collect", "--max-new-tokens 0", lambda env: _collect(env, "--max-new-tokens", "0"),
         "--max-new-tokens must be >= 1"),
    Case("collect", "--batch-size 2.5", lambda env: _collect(env, "--batch-size", "2.5"), "--batch-size: cannot parse"),
    Case("collect", "--topk -1", lambda env: _collect(env, "--topk", "-1"), "--topk must be >= 0"),
    Case("collect", "--kv-budget-gb too small for the longest prompt",
         lambda env: _collect(env, "--prompts", _prompts(env, [GOOD]), "--kv-budget-gb", "1e-9"),
         "raise --kv-budget-gb"),
    Case("collect", "--topk larger than the vocabulary",
         lambda env: _collect(env, "--prompts", _prompts(env, [GOOD]), "--topk", "100000"),
         "is larger than the target's vocabulary"),
    Case("collect", "--temperature -1", lambda env: _collect(env, "--temperature", "-1"), "temperature must be >= 0"),
    Case("collect", "--shard-index past --num-shards", lambda env: _collect(env, "--num-shards", "2", "--shard-index", "2"),
         "--shard-index 2 is outside 0..1"),
    Case("collect", "--tensor-parallel-size 0", lambda env: _collect(env, "--tensor-parallel-size", "0"),
         "--tensor-parallel-size must be >= 1"),
    Case("collect", "--mode that does not exist", lambda env: _collect(env, "--mode", "distill"),
         "--mode must be 'generate' or 'score'"),
    Case("collect", "--dtype that does not exist", lambda env: _collect(env, "--dtype", "float8"), "unknown --dtype"),
    Case("collect", "--device cuda on a machine without a GPU", lambda env: _collect(env, "--device", "cuda"),
         "--device cuda: no CUDA GPU is visible"),
    Case("collect", "--device with a typo", lambda env: _collect(env, "--device", "cdu"), "is not a device"),
    # --- distill.collect: prompts
    Case("collect", "a prompt file saved as Latin-1",
         lambda env: _collect(env, "--prompts", _prompts(env, [GOOD, '{"id": "b", "prompt": "café"}'.encode("latin-1")])),
         ":2: not UTF-8 text"),
    Case("collect", "an empty prompt file", lambda env: _collect(env, "--prompts", _prompts(env, ["", ""])),
         "prompt file is empty"),
    Case("collect", "a malformed JSON line", lambda env: _collect(env, "--prompts", _prompts(env, [GOOD, '{"id": "b",'])),
         ":2: malformed JSON"),
    Case("collect", "a prompt without an id", lambda env: _collect(env, "--prompts", _prompts(env, [{"prompt": "x"}])),
         ":1: missing field 'id'"),
    Case("collect", "a prompt with both messages and prompt",
         lambda env: _collect(env, "--prompts", _prompts(env, [{**GOOD, "prompt": "x"}])), "give exactly one of"),
    Case("collect", "a prompt set name that does not exist", lambda env: _collect(env, "--prompts", "helduot"),
         "prompts not found: 'helduot'"),
    Case("collect", "a prompt file that does not exist",
         lambda env: _collect(env, "--prompts", str(env.tmp / "missing.jsonl")), "prompt file not found"),
    Case("collect", "--categories naming no category of the prompts",
         lambda env: _collect(env, "--prompts", _prompts(env, [GOOD]), "--categories", "poetry"),
         "unknown category ['poetry']"),
    Case("collect", "a prompt longer than the target's context",
         lambda env: _collect(env, "--prompts", _prompts(env, [GOOD, LONG])), "exceeds the model's context of 512"),
    # --- distill.collect: prompts the target writes (--prompts self:N)
    Case("collect", "--prompts self: with a count that is not a number", lambda env: _collect(env, "--prompts", "self:many"),
         "'many' is not a number of prompts"),
    Case("collect", "--prompts self:0", lambda env: _collect(env, "--prompts", "self:0"), "needs N >= 1"),
    Case("collect", "--prompts self:N with an option that does not exist",
         lambda env: _collect(env, "--prompts", "self:100:temp=0.8"), "unknown option 'temp=0.8'"),
    Case("collect", "--prompts self:N with --mode score", lambda env: _collect(env, "--prompts", "self:100", "--mode",
                                                                               "score"), "self-written prompts have none"),
    Case("collect", "--prompts self:N on a target without a chat template",
         lambda env: _collect(env, "--prompts", "self:100", "--target", _no_chat_template(env)), "give --prompts FILE"),
    # --- distill.collect: models
    Case("collect", "--target folder that does not exist",
         lambda env: _collect(env, "--target", str(env.tmp / "no-model"), "--prompts", _prompts(env, [GOOD])),
         "model not found"),
    Case("collect", "--target with a truncated model.safetensors",
         lambda env: _collect(env, "--target", _truncated(env), "--prompts", _prompts(env, [GOOD])),
         "model.safetensors is damaged or incomplete"),
    Case("collect", "distill.collect.bench --n 0", lambda env: [sys.executable, "-m", "distill.collect.bench", "--n", "0"],
         "--n must be >= 1", process=True),
    # --- decode.bench
    Case("bench", "--gamma 100000", lambda env: _bench(env, "--gamma", "100000"), "--gamma must be in 1..64"),
    Case("bench", "--gamma 0", lambda env: _bench(env, "--gamma", "0"), "--gamma must be in 1..64"),
    Case("bench", "--gamma four", lambda env: _bench(env, "--gamma", "four"), "--gamma: cannot parse 'four'"),
    Case("bench", "--tree-nodes 1000", lambda env: _bench(env, "--tree-nodes", "1000"), "--tree-nodes must be in 0..64"),
    Case("bench", "--limit -1", lambda env: _bench(env, "--limit", "-1"), "--limit must be >= 0"),
    Case("bench", "--draft-context -1", lambda env: _bench(env, "--draft-context", "-1"),
         "--draft-context must be 0 (the window chosen by cost) or 1..the draft's trained length"),
    Case("bench", "--draft-context above what the draft was trained on",
         lambda env: _bench(env, "--draft-context", "100000"), "--draft-context 100000: this draft was trained on at most"),
    Case("bench", "--schedule that does not exist", lambda env: _bench(env, "--schedule", "fastest"),
         "--schedule must be one of"),
    Case("bench", "--device mps on a machine without it", lambda env: _bench(env, "--device", "mps"),
         "--device mps: Apple's MPS is not available"),
    Case("bench", "--prompts given a prompt set name", lambda env: _bench(env, "--prompts", "heldout"),
         "prompt file not found: heldout"),
    Case("bench", "--prompts saved as UTF-16",
         lambda env: _bench(env, "--prompts", _prompts(env, [json.dumps(GOOD).encode("utf-16")])), "not UTF-8 text"),
    Case("bench", "a specdistill draft with another tokenizer than the target's",
         lambda env: _bench(env, "--draft", _other_tokenizer(env)),
         "was built by specdistill for another-target (specdistill.json) and speaks that target's ids, but its tokenizer"),
    Case("bench", "a draft folder without tokenizer files", lambda env: _bench(env, "--draft", _gpt2_draft(env, False)),
         "has no tokenizer files"),
    Case("bench", "a draft with another tokenizer whose chat template renders the prompt otherwise",
         lambda env: _bench(env, "--draft", _gpt2_draft(env, template="{% for m in messages %}<turn>{{ m['content'] }}"
                                                                         "{% endfor %}")),
         "the draft's chat template renders it otherwise than the target's"),
    Case("bench", "--temperature 1 with a draft sharing too little of the target's vocabulary",
         lambda env: _bench(env, "--draft", _word_draft(env), "--temperature", "1"),
         "needs proposals from the vocabulary both tokenizers share"),
    Case("bench", "a draft with a truncated model.safetensors", lambda env: _bench(env, "--draft", _truncated(env)),
         "is damaged or incomplete"),
    Case("bench", "a prompt longer than the target's context",
         lambda env: _bench(env, "--prompts", _prompts(env, [GOOD, LONG])), "exceeds the model's context"),
    Case("bench", "--load-format that does not exist", lambda env: _bench(env, "--load-format", "random"),
         "--load-format must be one of auto, dummy"),
    Case("bench", "--target folder without config.json", lambda env: _bench(env, "--target", str(env.tmp)),
         "is not a model folder (no config.json): a target folder holds"),
    Case("bench", "--target folder without weights, no --load-format dummy",
         lambda env: _bench(env, "--target", _config_only(env)), "add --load-format dummy"),
]
