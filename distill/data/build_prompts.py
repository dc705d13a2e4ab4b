"""Build the bundled prompt set: distill/data/train.jsonl and distill/data/heldout.jsonl.

The prompts were written by hand for this project (no public dataset was copied). Their text lives in
distill/data/source/<category>.yaml, one YAML list per category; this script only turns each item into the JSONL
format of docs/architecture.md ("Prompt files"), numbers the items and fixes the train / held-out split. It is
deterministic: running it twice gives byte-identical files (tests/test_prompt_data.py pins their sha256).

    python distill/data/build_prompts.py          # rewrite both files next to this script
    python distill/data/build_prompts.py --check  # validate the existing files and print the counts table

An item is one of (README.md, "Adding prompts", shows each in YAML):
    "text"                                  one user turn
    {system: "...", user: USER}             a system message, then one user turn
    {turns: [USER, "assistant", USER]}      user / assistant / user (any odd number of turns)
where USER is a string or, for the passage categories,
    {instruction, passage, after: true?}    summarization: instruction, blank line, passage (passage first if after)
    {passage, question, layout}             context QA: passage and question in one of the LAYOUTS below

Split rule: within each category, the items are numbered in file order (id "<category>-NNNN", 1-based); item k goes
to held-out when (k - 1) % 6 == 0, i.e. the 1st, 7th, 13th, ... item, and to train otherwise. New items appended at
the end of a file never move an existing prompt between splits.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from decode import cli
from decode.errors import UserError

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "source"  # <category>.yaml for each of CATEGORIES, nothing else
CATEGORIES = ["chat", "writing", "qa", "summarization", "code", "math", "translation", "context_qa"]
HELDOUT_EVERY = 6  # 1 in 6 of each category is held out
PASSAGE_WORDS = (60, 200)  # word range of the passages in summarization / context_qa

# Context-QA layouts; each item names its layout so that the mix is visible in the data file.
LAYOUTS = {
    "cq": "Context: {p}\n\nQuestion: {q}",
    "read": "Read the passage and answer the question.\n\n{p}\n\nQuestion: {q}",
    "after": "{p}\n\n{q}",
    "based": "Based on the text below, answer this: {q}\n\n{p}",
    "quote": '"{p}"\n\nUsing only the text above: {q}',
}


# --- data items -> messages ---


def _text(value, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: {what} must be text, got {value!r} (quote it in the YAML)")
    return value


def _passage(value, where: str) -> str:
    passage = _text(value, where, "passage")
    n, (lo, hi) = len(passage.split()), PASSAGE_WORDS
    if not lo <= n <= hi:
        raise UserError(f"{where}: passage has {n} words, expected {lo}-{hi}: {passage[:60]!r}")
    return passage


def user_text(part, where: str) -> str:
    """A user turn: plain text, a summarization {instruction, passage[, after]} or a context-QA
    {passage, question, layout}, each joined into one string."""
    if isinstance(part, str):
        return part
    keys = set(part) if isinstance(part, dict) else None
    if keys in ({"instruction", "passage"}, {"instruction", "passage", "after"}):
        instruction, passage = (
            _text(part["instruction"], where, "instruction"),
            _passage(part["passage"], where),
        )
        after = part.get("after", False)
        if not isinstance(after, bool):
            raise UserError(f"{where}: after must be true or false, got {after!r}")
        return f"{passage}\n\n{instruction}" if after else f"{instruction}\n\n{passage}"
    if keys == {"passage", "question", "layout"}:
        if part["layout"] not in LAYOUTS:
            raise UserError(f"{where}: layout {part['layout']!r} is not one of {sorted(LAYOUTS)}")
        question = _text(part["question"], where, "question")
        return LAYOUTS[part["layout"]].format(p=_passage(part["passage"], where), q=question)
    raise UserError(
        f"{where}: a user turn is text, {{instruction, passage[, after]}} or {{passage, question, layout}}; "
        f"got {sorted(keys) if keys is not None else repr(part)} (text holding ': ' must be quoted)"
    )


def to_messages(item, where: str) -> list[dict]:
    """One data item -> its chat messages (see the module docstring for the three item forms)."""
    if isinstance(item, dict) and set(item) == {"system", "user"}:
        system = _text(item["system"], where, "system")
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": user_text(item["user"], where)},
        ]
    if isinstance(item, dict) and set(item) == {"turns"}:
        turns = item["turns"]
        if not isinstance(turns, list) or len(turns) % 2 == 0:
            raise UserError(f"{where}: turns must be a list of user, assistant, user, ... (an odd number)")
        return [
            {"role": "user", "content": user_text(t, where)}
            if j % 2 == 0
            else {"role": "assistant", "content": _text(t, where, "an assistant turn")}
            for j, t in enumerate(turns)
        ]
    return [{"role": "user", "content": user_text(item, where)}]


def load_items(path: Path) -> list:
    try:
        items = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{path}: cannot read the prompt file ({e})") from None
    if not isinstance(items, list):
        raise UserError(f"{path}: expected a YAML list of prompt items")
    return items


# --- assembly: ids, split, JSONL ---


def build(source: Path = SOURCE) -> tuple[list[dict], list[dict]]:
    """(train, heldout) rows in a fixed order: category order of CATEGORIES, then file order."""
    expected = {f"{cat}.yaml" for cat in CATEGORIES}
    stray = sorted(p.name for p in source.iterdir() if p.name not in expected)
    if stray:
        raise UserError(f"{source}: {stray} are not prompt files; a new category must be added to CATEGORIES")
    train, heldout = [], []
    for cat in CATEGORIES:
        path = source / f"{cat}.yaml"
        for k, item in enumerate(load_items(path), 1):
            row_id = f"{cat}-{k:04d}"
            row = {
                "id": row_id,
                "category": cat,
                "messages": to_messages(item, f"{path.name} item {k} ({row_id})"),
            }
            (heldout if (k - 1) % HELDOUT_EVERY == 0 else train).append(row)
    return train, heldout


def write_jsonl(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --- validation ---


def _prompt_text(row: dict) -> str:
    """The user-visible text of a prompt (all user and system turns), used for duplicate checks."""
    return "\n".join(m["content"] for m in row["messages"] if m["role"] != "assistant")


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def validate(splits: dict[str, list[dict]], near_dup: float = 0.8) -> list[str]:
    """Return a list of problems (empty when the files are fine)."""
    problems: list[str] = []
    ids: dict[str, str] = {}
    rows_all = []
    for split, rows in splits.items():
        for i, row in enumerate(rows, 1):
            where = f"{split}:{i}"
            if set(row) != {"id", "category", "messages"}:
                problems.append(f"{where}: fields {sorted(row)} != ['category', 'id', 'messages']")
                continue
            if not isinstance(row["id"], str) or not re.fullmatch(r"[a-z_]+-\d{4}", row["id"]):
                problems.append(f"{where}: bad id {row['id']!r}")
            if row["category"] not in CATEGORIES:
                problems.append(f"{where}: unknown category {row['category']!r}")
            elif not row["id"].startswith(row["category"] + "-"):
                problems.append(f"{where}: id {row['id']!r} does not match category {row['category']!r}")
            if row["id"] in ids:
                problems.append(f"{where}: id {row['id']!r} already used in {ids[row['id']]}")
            ids[row["id"]] = where
            msgs = row["messages"]
            roles = [m.get("role") for m in msgs] if isinstance(msgs, list) else []
            if not roles or any(
                set(m) != {"role", "content"} or not isinstance(m["content"], str) or not m["content"].strip()
                for m in msgs
            ):
                problems.append(f"{where}: messages must be a non-empty list of {{role, content}} with text")
                continue
            turns = roles[1:] if roles[0] == "system" else roles
            expected = ["user" if j % 2 == 0 else "assistant" for j in range(len(turns))]
            if turns != expected or turns[-1] != "user":
                problems.append(
                    f"{where}: roles {roles} must be [system] user (assistant user)* ending with user"
                )
            if row["category"] in ("summarization", "context_qa"):
                longest = max(len(m["content"].split()) for m in msgs if m["role"] == "user")
                if longest < PASSAGE_WORDS[0]:
                    problems.append(
                        f"{where}: {row['category']} prompt has no passage of {PASSAGE_WORDS[0]}+ words"
                    )
            rows_all.append((where, row))

    # Exact duplicates (after normalising case and whitespace), then near-duplicates by word-set overlap.
    seen: dict[str, str] = {}
    for where, row in rows_all:
        key = " ".join(_prompt_text(row).lower().split())
        if key in seen:
            problems.append(f"{where}: same text as {seen[key]}")
        seen[key] = where
    bags = [(where, _words(_prompt_text(row))) for where, row in rows_all]
    for a in range(len(bags)):
        wa, sa = bags[a]
        for b in range(a + 1, len(bags)):
            wb, sb = bags[b]
            j = len(sa & sb) / len(sa | sb)
            if j >= near_dup:
                problems.append(f"{wa} and {wb}: near-duplicate texts (word overlap {j:.2f})")
    return problems


def counts_table(splits: dict[str, list[dict]]) -> str:
    """Markdown table of prompts per category and split, with the multi-turn and system-message counts."""
    count = {s: Counter(r["category"] for r in rows) for s, rows in splits.items()}
    rows_all = [r for rows in splits.values() for r in rows]
    multi = Counter(r["category"] for r in rows_all if sum(m["role"] == "user" for m in r["messages"]) > 1)
    system = Counter(r["category"] for r in rows_all if r["messages"][0]["role"] == "system")
    names = list(splits)
    lines = [
        "| category | " + " | ".join(names) + " | total | multi-turn | with system |",
        "|---|" + "---:|" * (len(names) + 3),
    ]
    for cat in CATEGORIES:
        cells = [count[s][cat] for s in names]
        lines.append(
            f"| {cat} | " + " | ".join(map(str, cells)) + f" | {sum(cells)} | {multi[cat]} | {system[cat]} |"
        )
    totals = [sum(count[s].values()) for s in names]
    lines.append(
        "| **all** | "
        + " | ".join(map(str, totals))
        + f" | {sum(totals)} | {sum(multi.values())} | {sum(system.values())} |"
    )
    return "\n".join(lines)


# --- entry point ---


@dataclass
class BuildConfig:
    check: bool = field(
        default=False, metadata={"help": "validate the existing files instead of writing them"}
    )
    out: str = field(default=str(HERE), metadata={"help": "folder for train.jsonl / heldout.jsonl"})


def run(cfg: BuildConfig, argv=None) -> int:
    """Build (or, with --check, read) the two files, validate them, write them unless checking, print the counts."""
    out = Path(cfg.out)
    train, heldout = build()
    if cfg.check:
        splits = {name: read_jsonl(out / f"{name}.jsonl") for name in ("train", "heldout")}
        if splits != {"train": train, "heldout": heldout}:
            print("note: the files differ from what this script builds (edited by hand, or not rebuilt)")
    else:
        splits = {"train": train, "heldout": heldout}
    problems = validate(splits)
    for p in problems:
        print("problem:", p, file=sys.stderr)
    if problems:
        return 1
    if not cfg.check:
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in splits.items():
            write_jsonl(rows, out / f"{name}.jsonl")
            print(f"wrote {len(rows)} prompts to {out / f'{name}.jsonl'}")
    print(counts_table(splits))
    return 0


def main() -> int:
    _, rc = cli.run_job(BuildConfig, run, doc=__doc__)
    return rc


if __name__ == "__main__":
    sys.exit(main())
