"""Build the bundled long-prompt set: distill/data/long/train.jsonl and distill/data/long/heldout.jsonl.

Each prompt is one document installed on a Debian 12 machine by a package whose license allows redistribution
(Node.js and CMake documentation, X.Org protocol specifications, modules of Python's standard library, ...) and an
instruction written by hand for that document: summarise it, extract from it, answer a question from it, continue
it, or edit the code. manifest.yaml records every source file (package, version, license, sha256) and every item
(the source, the lines taken, where the instruction goes, the instruction); this script reads the source files from
the machine, checks their hashes and writes the JSONL files of docs/architecture.md ("Prompt files"). It is
deterministic: the same manifest and source files give byte-identical files.

    python distill/data/long/build_long.py          # rebuild both files from the source files on this machine
    python distill/data/long/build_long.py --check  # validate the committed files and print the counts table

A source file that is missing or changed (another package version) stops the build with the file named: the
committed JSONL files stay authoritative, and --check still validates them.

Split rule: within each category the items are numbered in manifest order (id "<category>-NNNN", 1-based); item k
is held out when (k - 1) % 6 == 0, as in the short sets (distill/data/build_prompts.py). The manifest is ordered so
that no source file has items in both splits and every length bucket has at least 8 held-out prompts; the
validation checks both.

Length: every prompt is 1,000-7,000 tokens of the default target's tokenizer with its chat template (the ids the
collector uses), so that the prompt and 256 new tokens fit the default target's 8,192 positions. No prompt lies in
2,000-2,047 or 4,000-4,095 tokens, so the buckets come out the same whether "2K" reads as 2,000 or 2,048.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from decode import cli
from decode.errors import UserError

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.yaml"
CATEGORIES = ["long_summarization", "long_extraction", "long_qa", "long_continuation", "long_code_edit"]
HELDOUT_EVERY = 6  # 1 in 6 of each category is held out
TOKENS = (1000, 7000)  # prompt length range, chat template included
BUCKETS = [("1K-2K", 1000, 2048), ("2K-4K", 2048, 4096), ("4K-7K", 4096, 7001)]
GUARD = [(2000, 2048), (4000, 4096)]  # no prompt here: decimal and binary bucket edges give the same table
MIN_HELDOUT_PER_BUCKET = 8
LAYOUTS = ("before", "after")  # the instruction before or after the document, one blank line between


# --- manifest and source files ---


def load_manifest(path: Path = MANIFEST) -> tuple[dict, list[dict]]:
    """(sources by path, items in file order), with their fields checked."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{path}: cannot read the manifest ({e})") from None
    if not isinstance(data, dict) or set(data) != {"sources", "items"}:
        raise UserError(f"{path}: expected a mapping with 'sources' and 'items'")
    sources, items = data["sources"], data["items"]
    for src, meta in sources.items():
        if not isinstance(meta, dict) or not {"package", "version", "license", "sha256"} <= set(meta):
            raise UserError(f"{path}: source {src} needs package, version, license and sha256 (and optionally fence)")
    seen: Counter = Counter()
    for i, item in enumerate(items, 1):
        where = f"{path.name} item {i}"
        if not isinstance(item, dict) or set(item) != {"id", "source", "lines", "layout", "instruction"}:
            raise UserError(f"{where}: fields must be id, source, lines, layout, instruction")
        cat = item["id"].rpartition("-")[0]
        if cat not in CATEGORIES:
            raise UserError(f"{where}: id {item['id']!r} is not <category>-NNNN with a category of {CATEGORIES}")
        seen[cat] += 1
        if item["id"] != f"{cat}-{seen[cat]:04d}":
            raise UserError(f"{where}: id {item['id']!r} out of order; expected {cat}-{seen[cat]:04d}")
        if item["source"] not in sources:
            raise UserError(f"{where} ({item['id']}): source {item['source']} is not listed under sources")
        a, b = item["lines"] if isinstance(item["lines"], list) and len(item["lines"]) == 2 else (0, 0)
        if not (isinstance(a, int) and isinstance(b, int) and 1 <= a <= b):
            raise UserError(f"{where} ({item['id']}): lines must be [first, last], 1-based, first <= last")
        if item["layout"] not in LAYOUTS:
            raise UserError(f"{where} ({item['id']}): layout must be one of {LAYOUTS}")
        if not isinstance(item["instruction"], str) or not item["instruction"].strip():
            raise UserError(f"{where} ({item['id']}): instruction must be text")
    return sources, items


def read_source(path: str, meta: dict) -> str:
    """The text of one source file, after checking that it is the file the manifest was written from."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"source file missing: {path} (package {meta['package']} {meta['version']})")
    raw = p.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != meta["sha256"]:
        raise UserError(f"source file changed: {path} has sha256 {digest[:16]}..., the manifest was written from "
                        f"{meta['sha256'][:16]}... (package {meta['package']} {meta['version']})")
    return (gzip.decompress(raw) if p.suffix == ".gz" else raw).decode("utf-8")


def render(item: dict, text: str, fence: str | None) -> str:
    """The user turn: the document's lines [first, last] (fenced for code) and the instruction."""
    a, b = item["lines"]
    lines = text.splitlines(keepends=True)
    if b > len(lines):
        raise UserError(f"{item['id']}: lines {a}-{b}, but {item['source']} has {len(lines)} lines")
    doc = "".join(lines[a - 1:b]).strip("\n")
    if fence:
        doc = f"```{fence}\n{doc}\n```"
    return f"{item['instruction']}\n\n{doc}" if item["layout"] == "before" else f"{doc}\n\n{item['instruction']}"


def build(manifest: Path = MANIFEST) -> tuple[list[dict], list[dict]]:
    """(train, heldout) rows in manifest order. Every source is checked first, so one error lists all of them."""
    sources, items = load_manifest(manifest)
    texts, problems = {}, []
    for path in sorted({it["source"] for it in items}):
        try:
            texts[path] = read_source(path, sources[path])
        except UserError as e:
            problems.append(str(e))
    if problems:
        raise UserError(f"{len(problems)} of {len(texts) + len(problems)} source files cannot be used, so the set "
                        "cannot be rebuilt on this machine; the committed train.jsonl and heldout.jsonl stay "
                        "authoritative (--check still validates them):\n  " + "\n  ".join(problems))
    train, heldout = [], []
    for item in items:
        cat, k = item["id"].rpartition("-")[0], int(item["id"].rpartition("-")[2])
        content = render(item, texts[item["source"]], sources[item["source"]].get("fence"))
        row = {"id": item["id"], "category": cat, "messages": [{"role": "user", "content": content}]}
        (heldout if (k - 1) % HELDOUT_EVERY == 0 else train).append(row)
    return train, heldout


def write_jsonl(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --- lengths, validation, counts ---


def token_counts(rows: list[dict]) -> dict[str, int]:
    """Prompt length of each row in tokens of the default target, chat template applied (as the collector encodes)."""
    from decode.models.targets import load_tokenizer
    from decode.prompts import encode_prompt

    tok = load_tokenizer("default")
    return {r["id"]: len(encode_prompt(tok, r)) for r in rows}


def bucket(n: int) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= n < hi)


def validate(splits: dict[str, list[dict]], counts: dict[str, int], items: list[dict]) -> list[str]:
    """Problems with the two files (empty when they are fine): fields, ids, lengths, the split rule."""
    problems: list[str] = []
    source_of = {it["id"]: it["source"] for it in items}
    ids: set[str] = set()
    for split, rows in splits.items():
        for i, row in enumerate(rows, 1):
            where = f"{split}:{i}"
            if set(row) != {"id", "category", "messages"} or row.get("category") not in CATEGORIES:
                problems.append(f"{where}: fields must be id, category (one of {CATEGORIES}), messages")
                continue
            rid = row["id"]
            if rid in ids:
                problems.append(f"{where}: duplicate id {rid}")
            ids.add(rid)
            m = re.fullmatch(r"([a-z_]+)-(\d{4})", rid)
            if not m or m.group(1) != row["category"]:
                problems.append(f"{where}: id {rid!r} does not match its category {row['category']!r}")
            elif ((int(m.group(2)) - 1) % HELDOUT_EVERY == 0) != (split == "heldout"):
                problems.append(f"{where}: {rid} is in {split}, against the split rule")
            msgs = row["messages"]
            if not (isinstance(msgs, list) and len(msgs) == 1 and msgs[0].get("role") == "user"
                    and isinstance(msgs[0].get("content"), str)):
                problems.append(f"{where}: messages must be one user turn")
            if rid not in source_of:
                problems.append(f"{where}: {rid} is not in the manifest")
            n = counts.get(rid, 0)
            if not TOKENS[0] <= n <= TOKENS[1]:
                problems.append(f"{where}: {rid} has {n} tokens, outside {TOKENS[0]}-{TOKENS[1]}")
            if any(lo <= n < hi for lo, hi in GUARD):
                problems.append(f"{where}: {rid} has {n} tokens, inside a bucket-edge guard band {GUARD}")
    docs = {s: {source_of.get(r["id"]) for r in rows} for s, rows in splits.items()}
    for path in sorted(docs.get("train", set()) & docs.get("heldout", set()) - {None}):
        problems.append(f"{path} has prompts in both train and heldout")
    held = Counter(bucket(counts[r["id"]]) for r in splits.get("heldout", [])
                   if TOKENS[0] <= counts.get(r["id"], 0) <= TOKENS[1])
    for name, _, _ in BUCKETS:
        if held[name] < MIN_HELDOUT_PER_BUCKET:
            problems.append(f"heldout has {held[name]} prompts of {name} tokens, fewer than {MIN_HELDOUT_PER_BUCKET}")
    return problems


def counts_table(splits: dict[str, list[dict]], counts: dict[str, int]) -> str:
    """Markdown table: prompts per category and length bucket, train / heldout in each cell."""
    cell = defaultdict(Counter)  # (category, bucket) -> split -> n
    for split, rows in splits.items():
        for r in rows:
            cell[r["category"], bucket(counts[r["id"]])][split] += 1
            cell[r["category"], "all"][split] += 1
            cell["all", bucket(counts[r["id"]])][split] += 1
            cell["all", "all"][split] += 1
    cols = [name for name, _, _ in BUCKETS] + ["all"]
    lines = ["| category (train / heldout) | " + " | ".join(f"{c} tokens" if c != "all" else "all" for c in cols)
             + " |", "|---|" + "---:|" * len(cols)]
    for cat in CATEGORIES + ["all"]:
        cells = [f"{cell[cat, c]['train']} / {cell[cat, c]['heldout']}" for c in cols]
        lines.append(f"| {cat if cat != 'all' else '**all**'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- entry point ---


@dataclass
class BuildConfig:
    check: bool = field(
        default=False, metadata={"help": "validate the committed files instead of rebuilding them"}
    )
    out: str = field(default=str(HERE), metadata={"help": "folder for train.jsonl / heldout.jsonl"})


def run(cfg: BuildConfig, argv=None) -> int:
    """Build (or, with --check, read) the two files, validate them, write them unless checking, print the counts."""
    out = Path(cfg.out)
    _, items = load_manifest()
    if cfg.check:
        splits = {name: read_jsonl(out / f"{name}.jsonl") for name in ("train", "heldout")}
        try:
            train, heldout = build()
            if splits != {"train": train, "heldout": heldout}:
                print("note: the files differ from what the manifest builds (edited by hand, or not rebuilt)")
        except UserError as e:
            print(f"note: {e}")
    else:
        train, heldout = build()
        splits = {"train": train, "heldout": heldout}
    counts = token_counts([r for rows in splits.values() for r in rows])
    problems = validate(splits, counts, items)
    for p in problems:
        print("problem:", p, file=sys.stderr)
    if problems:
        return 1
    if not cfg.check:
        out.mkdir(parents=True, exist_ok=True)
        for name, rows in splits.items():
            write_jsonl(rows, out / f"{name}.jsonl")
            print(f"wrote {len(rows)} prompts to {out / f'{name}.jsonl'}")
    print(counts_table(splits, counts))
    return 0


def main() -> int:
    _, rc = cli.run_job(BuildConfig, run, doc=__doc__)
    return rc


if __name__ == "__main__":
    sys.exit(main())
