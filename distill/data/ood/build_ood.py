"""Build the out-of-distribution prompt set: distill/data/ood/ood.jsonl from distill/data/ood/source.yaml.

The prompts were written by hand for this project, deliberately unlike the training prompts (distill/data/train.jsonl:
short English requests in eight categories): multi-turn conversations, open-domain requests on other topics,
prompts written in other languages, role-play with a persona, structured output, long-form writing. bench and
evaluate read them with `--prompts ood` to check that the decoder never slows the user down on unfamiliar prompts
(issue 53). This script only wraps each item of source.yaml in the JSONL format of docs/architecture.md ("Prompt
files") and numbers it; it is deterministic (the same source gives a byte-identical file).

    python distill/data/ood/build_ood.py          # rebuild ood.jsonl next to this script
    python distill/data/ood/build_ood.py --check  # validate the committed ood.jsonl and print the counts table

Validation: fields and ids, roles `[system] user (assistant user)*` ending with `user`, no empty text, 3-7 turns in
`multi_turn`, a system message in every `roleplay` item, a language in every `other_language` item, no two prompts
alike (word-set overlap >= 0.8), and no prompt a near-duplicate of any bundled train / held-out prompt (word-set
Jaccard >= 0.5, the words as build_prompts.py counts them).
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from decode import cli
from decode.errors import UserError
from distill.data.build_prompts import _prompt_text, _words, read_jsonl, write_jsonl

HERE = Path(__file__).resolve().parent
SOURCE, OUT = HERE / "source.yaml", HERE / "ood.jsonl"
BUNDLED = [HERE.parent / "train.jsonl", HERE.parent / "heldout.jsonl"]  # what the set must stay away from
CATEGORIES = ["multi_turn", "open_domain", "other_language", "roleplay", "structured", "long_form"]
NEAR_TRAIN = 0.5  # word-set Jaccard with any bundled prompt at or above this fails
NEAR_SELF = 0.8  # the same bound as within the bundled set
TURNS = (3, 7)  # multi_turn: user/assistant turns, system not counted


def _item(item, where: str) -> tuple[list[dict], str | None]:
    """(messages, language) of one source item."""
    if isinstance(item, str):
        item = {"user": item}
    if not isinstance(item, dict) or not item.keys() <= {"system", "user", "turns", "lang"} or \
            ("user" in item) == ("turns" in item):
        raise UserError(f"{where}: an item is a string or a mapping with `user` or `turns` (and optionally `system`, "
                        "`lang`)")
    turns = [item["user"]] if "user" in item else item["turns"]
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise UserError(f"{where}: `turns` must be a list of strings")
    msgs = [{"role": "system", "content": item["system"]}] if "system" in item else []
    msgs += [{"role": "assistant" if j % 2 else "user", "content": t} for j, t in enumerate(turns)]
    return msgs, item.get("lang")


def build(source: Path = SOURCE) -> tuple[list[dict], dict[str, str]]:
    """(rows in file order, language of each row that has one)."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or list(data) != CATEGORIES:
        raise UserError(f"{source}: expected one list per category, in this order: {CATEGORIES}")
    rows, langs = [], {}
    for cat in CATEGORIES:
        for k, item in enumerate(data[cat], 1):
            msgs, lang = _item(item, f"{source.name} {cat} item {k}")
            rows.append({"id": f"{cat}-{k:04d}", "category": cat, "messages": msgs})
            if lang:
                langs[rows[-1]["id"]] = lang
    return rows, langs


def nearest_bundled(rows: list[dict]) -> dict[str, tuple[float, str]]:
    """For each prompt: (the highest word-set Jaccard with any bundled train / held-out prompt, that prompt's id)."""
    bundled = [(r["id"], _words(_prompt_text(r))) for path in BUNDLED for r in read_jsonl(path)]
    out = {}
    for row in rows:
        words = _words(_prompt_text(row))
        out[row["id"]] = max((len(words & b) / len(words | b), bid) for bid, b in bundled)
    return out


def validate(rows: list[dict], langs: dict[str, str]) -> list[str]:
    """Problems, empty when the set is fine."""
    problems, seen = [], set()
    for i, row in enumerate(rows, 1):
        where = f"ood.jsonl:{i}"
        if set(row) != {"id", "category", "messages"} or row["category"] not in CATEGORIES:
            problems.append(f"{where}: fields must be id, category, messages with a category of {CATEGORIES}")
            continue
        if row["id"] in seen or not row["id"].startswith(row["category"] + "-"):
            problems.append(f"{where}: id {row['id']!r} repeated or not <category>-NNNN")
        seen.add(row["id"])
        msgs = row["messages"]
        if not msgs or any(set(m) != {"role", "content"} or not str(m["content"]).strip() for m in msgs):
            problems.append(f"{where}: messages must be {{role, content}} with text")
            continue
        roles = [m["role"] for m in msgs]
        turns = roles[1:] if roles[0] == "system" else roles
        if turns != ["assistant" if j % 2 else "user" for j in range(len(turns))] or turns[-1:] != ["user"]:
            problems.append(f"{where}: roles {roles} must be [system] user (assistant user)* ending with user")
        cat = row["category"]
        if cat == "multi_turn" and not TURNS[0] <= len(turns) <= TURNS[1]:
            problems.append(f"{where}: multi_turn has {len(turns)} turns, expected {TURNS[0]}-{TURNS[1]}")
        if cat == "roleplay" and roles[0] != "system":
            problems.append(f"{where}: roleplay needs a system message setting the persona")
        if cat == "other_language" and row["id"] not in langs:
            problems.append(f"{where}: other_language item has no `lang`")
    bags = [(r["id"], _words(_prompt_text(r))) for r in rows]
    for a, (ida, wa) in enumerate(bags):
        for idb, wb in bags[a + 1:]:
            if len(wa & wb) / len(wa | wb) >= NEAR_SELF:
                problems.append(f"{ida} and {idb}: near-duplicate texts")
    for rid, (j, bid) in nearest_bundled(rows).items():
        if j >= NEAR_TRAIN:
            problems.append(f"{rid}: near-duplicate of the bundled prompt {bid} (word-set Jaccard {j:.2f})")
    return problems


def counts_table(rows: list[dict], langs: dict[str, str]) -> str:
    """Markdown table per category, then the languages and the closest bundled prompt."""
    near = nearest_bundled(rows)
    lines = ["| category | prompts | multi-turn | with system | median words | max Jaccard vs train/heldout |",
             "|---|---:|---:|---:|---:|---:|"]
    for cat in CATEGORIES + ["all"]:
        rs = [r for r in rows if cat in ("all", r["category"])]
        multi = sum(sum(m["role"] == "user" for m in r["messages"]) > 1 for r in rs)
        system = sum(r["messages"][0]["role"] == "system" for r in rs)
        words = statistics.median(len(_prompt_text(r).split()) for r in rs)
        top = max(near[r["id"]][0] for r in rs)
        name = "**all**" if cat == "all" else cat
        lines.append(f"| {name} | {len(rs)} | {multi} | {system} | {words:g} | {top:.2f} |")
    j, rid, bid = max((j, rid, bid) for rid, (j, bid) in near.items())
    count = Counter(langs.values())
    lines += ["", f"languages ({len(count)}): " + ", ".join(f"{k} {n}" for k, n in sorted(count.items())),
              f"closest pair: {rid} ~ {bid} (word-set Jaccard {j:.2f}; fails at {NEAR_TRAIN})"]
    return "\n".join(lines)


@dataclass
class BuildConfig:
    check: bool = field(default=False, metadata={"help": "validate the committed ood.jsonl instead of writing it"})


def run(cfg: BuildConfig, argv=None) -> int:
    rows, langs = build()
    problems = validate(rows, langs)
    if cfg.check and read_jsonl(OUT) != rows:
        problems.append(f"{OUT} differs from what {SOURCE.name} builds: run python distill/data/ood/build_ood.py")
    for p in problems:
        print("problem:", p, file=sys.stderr)
    if problems:
        return 1
    if not cfg.check:
        write_jsonl(rows, OUT)
        print(f"wrote {len(rows)} prompts to {OUT}")
    print(counts_table(rows, langs))
    return 0


def main() -> int:
    _, rc = cli.run_job(BuildConfig, run, doc=__doc__)
    return rc


if __name__ == "__main__":
    sys.exit(main())
