"""Prompt files (JSONL, one prompt a line) and their encoding with the target's tokenizer.

Line format (docs/architecture.md, "Prompt files"): {"id": str, "category": str, "messages": [{"role", "content"}, ...]}
or {"id", "category", "prompt": str} for raw text.
"""

from __future__ import annotations

import json
from pathlib import Path

from decode.errors import UserError

ROLES = {"system", "user", "assistant"}


def validate_prompt(row: object, where: str) -> dict:
    """Check one prompt record and return it normalised (id and category as str)."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "id" not in row:
        raise UserError(f"{where}: missing field 'id'")
    has_messages, has_prompt = "messages" in row, "prompt" in row
    if has_messages == has_prompt:
        raise UserError(f"{where}: give exactly one of 'messages' (chat) or 'prompt' (raw text)")
    if has_prompt and not (isinstance(row["prompt"], str) and row["prompt"].strip()):
        raise UserError(f"{where}: 'prompt' must be a non-empty string")
    if has_messages:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise UserError(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}}")
        for j, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise UserError(
                    f"{where}: message {j} must be {{'role': one of {sorted(ROLES)}, 'content': str}}, got {m!r:.80}"
                )
    out = dict(row)
    out["id"] = str(row["id"])
    out["category"] = str(row.get("category", "default"))
    return out


def read_prompts(path: str | Path) -> list[dict]:
    """Read and validate a JSONL prompt file; errors name the line number."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"prompt file not found: {path} (give a JSONL file, one prompt a line)")
    rows, seen = [], set()
    with path.open("rb") as f:  # bytes, decoded line by line: a non-UTF-8 byte is reported with its line
        for lineno, data in enumerate(f, 1):
            where = f"{path}:{lineno}"
            line = decode_utf8(data, where)
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: malformed JSON ({e.msg} at column {e.colno})") from None
            row = validate_prompt(raw, where)
            if row["id"] in seen:
                raise UserError(f"{where}: duplicate id {row['id']!r}")
            seen.add(row["id"])
            rows.append(row)
    if not rows:
        raise UserError(f"prompt file is empty: {path} (it needs at least one JSON line)")
    return rows


def decode_utf8(data: bytes, where: str) -> str:
    """UTF-8 text, or a UserError naming the place and the fix (an editor's Latin-1 or UTF-16 save)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                        "save the file as UTF-8") from None


def encode_prompt(tokenizer, row: dict, chat_template: bool = True) -> list[int]:
    """Token ids of a prompt, ready for generation (chat template + generation prompt when the row is chat)."""
    if "messages" in row:
        if chat_template and getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in some versions
                ids = ids["input_ids"]
            return list(ids)
        text = "\n".join(m["content"] for m in row["messages"])
    else:
        text = row["prompt"]
    return tokenizer(text, add_special_tokens=True)["input_ids"]


def check_context(prompt_len: int, max_new_tokens: int, max_positions: int | None, prompt_id: str) -> None:
    """A prompt that cannot fit with its new tokens in the context window is an error, not a silent truncation."""
    if max_positions and prompt_len + max_new_tokens > max_positions:
        raise UserError(
            f"prompt {prompt_id!r} has {prompt_len} tokens; with max_new_tokens={max_new_tokens} it exceeds the "
            f"model's context of {max_positions} positions. Shorten the prompt or lower --max-new-tokens."
        )
