"""Build the unfamiliar long-prompt set: distill/data/long_ood/long_ood.jsonl (`--prompts long-ood`).

Each prompt is the README (and, for some, the changelog) of a Python package installed on this machine, as its
wheel's METADATA file carries it (the text PyPI shows), under a permissive license, with an instruction written by
hand for it: summarize it, extract from it, or answer questions about it. None of these sources is in the bundled
sets (distill/data/long quotes Debian's documentation: Node.js, CMake, X.Org, Python's standard library), and no
draft trains on this set: it is evaluation only, the long check's second set (distill/evaluate/long_check.py).

manifest.yaml records every source file (distribution, version, license, sha256) and every item (the source, the
lines taken, where the instruction goes, the instruction); this script reads the files, checks their hashes and
writes the JSONL file of docs/architecture.md ("Prompt files"), and NOTICE.md from the packages' license files.
The document/instruction layout and the reading of sources are the bundled long set's (distill/data/long).

    python distill/data/long_ood/build_long_ood.py          # rebuild long_ood.jsonl and NOTICE.md
    python distill/data/long_ood/build_long_ood.py --check  # validate the committed file, print the counts

Length: every prompt is 2,048-7,000 tokens of the default target's tokenizer with its chat template (the ids the
decoder reads), none in 4,000-4,095, so each is in the 2K-4K or 4K-8K bucket of decode.bench's per_context
whether "4K" reads as 4,000 or 4,096.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from decode import cli
from decode.errors import UserError
from distill.data.long.build_long import read_jsonl, read_source, render, token_counts, write_jsonl

HERE = Path(__file__).resolve().parent
MANIFEST, OUT, NOTICE = HERE / "manifest.yaml", HERE / "long_ood.jsonl", HERE / "NOTICE.md"
CATEGORIES = ["readme_summarization", "readme_extraction", "readme_qa"]
TOKENS = (2048, 7000)
GUARD = (4000, 4096)  # no prompt here: decimal and binary bucket edges give the same table
BUCKETS = [("2K-4K", 2048, 4096), ("4K-7K", 4096, 7001)]


def load_manifest(path: Path = MANIFEST) -> tuple[dict, list[dict]]:
    """(sources by path, items in file order), with their fields checked."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{path}: cannot read the manifest ({e})") from None
    sources, items = data["sources"], data["items"]
    seen: Counter = Counter()
    for item in items:
        cat = item["id"].rpartition("-")[0]
        seen[cat] += 1
        if cat not in CATEGORIES or item["id"] != f"{cat}-{seen[cat]:04d}":
            raise UserError(f"{path.name}: id {item['id']!r}: expected {cat}-{seen[cat]:04d}, a category of {CATEGORIES}")
        if item["source"] not in sources or item["layout"] not in ("before", "after"):
            raise UserError(f"{path.name}: {item['id']}: unknown source, or layout not before/after")
    return sources, items


def build(manifest: Path = MANIFEST) -> list[dict]:
    """The rows in manifest order; every source is checked first, so one error lists all of them."""
    sources, items = load_manifest(manifest)
    texts, problems = {}, []
    for path in sorted({it["source"] for it in items}):
        try:
            texts[path] = read_source(path, sources[path])
        except UserError as e:
            problems.append(str(e))
    if problems:
        raise UserError(f"{len(problems)} source files cannot be used, so the set cannot be rebuilt on this machine; "
                        "the committed long_ood.jsonl stays authoritative (--check still validates it):\n  "
                        + "\n  ".join(problems))
    return [{"id": it["id"], "category": it["id"].rpartition("-")[0],
             "messages": [{"role": "user", "content": render(it, texts[it["source"]], None)}]} for it in items]


def validate(rows: list[dict], counts: dict[str, int]) -> list[str]:
    """Problems with the file (empty when it is fine): fields, unique ids, lengths."""
    problems = []
    if len({r["id"] for r in rows}) != len(rows):
        problems.append("duplicate ids")
    for r in rows:
        if set(r) != {"id", "category", "messages"} or r["category"] not in CATEGORIES:
            problems.append(f"{r.get('id')}: fields must be id, category (one of {CATEGORIES}), messages")
        n = counts.get(r["id"], 0)
        if not TOKENS[0] <= n <= TOKENS[1] or GUARD[0] <= n < GUARD[1]:
            problems.append(f"{r['id']}: {n} tokens, outside {TOKENS[0]}-{TOKENS[1]} or inside {GUARD[0]}-{GUARD[1] - 1}")
    return problems


def counts_table(rows: list[dict], counts: dict[str, int]) -> str:
    """Markdown table: prompts per category and length bucket."""
    cell = Counter((r["category"], name) for r in rows for name, lo, hi in BUCKETS if lo <= counts[r["id"]] < hi)
    lines = ["| category | " + " | ".join(f"{n} tokens" for n, _, _ in BUCKETS) + " | all |",
             "|---|" + "---:|" * (len(BUCKETS) + 1)]
    for cat in CATEGORIES:
        row = [cell[cat, n] for n, _, _ in BUCKETS]
        lines.append(f"| {cat} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    total = [sum(cell[c, n] for c in CATEGORIES) for n, _, _ in BUCKETS]
    return "\n".join(lines + ["| **all** | " + " | ".join(map(str, total)) + f" | {sum(total)} |"])


def notice(sources: dict) -> str:
    """NOTICE.md: each distribution's license files as installed beside its METADATA, each distinct text once with
    the distributions it covers."""
    texts: dict[str, tuple[str, list[str]]] = {}
    for path, meta in sources.items():
        info = Path(path).parent
        files = sorted(p for p in info.rglob("*") if p.is_file() and
                       (p.parent.name in ("licenses", "license_files") or p.name.upper().startswith("LICENSE")))
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace").strip()
            key = hashlib.sha256(text.encode()).hexdigest()
            texts.setdefault(key, (text, []))[1].append(f"{meta['package']} {meta['version']} ({f.name})")
    out = ["# Notices for the unfamiliar long-prompt set", "",
           "The prompts in `long_ood.jsonl` quote the README (and changelog) that each Python distribution below "
           "carries in its METADATA file (manifest.yaml: the file, line span and sha256). Their licenses allow "
           "redistribution on the condition that the copyright and license notices go with the copies: below is "
           "every license file those distributions install, as installed, each distinct text once.", ""]
    for text, who in texts.values():
        out += [f"## {', '.join(who)}", "", "```text", text, "```", ""]
    return "\n".join(out)


@dataclass
class BuildConfig:
    check: bool = field(default=False, metadata={"help": "validate the committed file instead of rebuilding it"})


def run(cfg: BuildConfig, argv=None) -> int:
    sources, _ = load_manifest()
    if cfg.check:
        rows = read_jsonl(OUT)
        try:
            if build() != rows:
                print("note: the file differs from what the manifest builds (edited by hand, or not rebuilt)")
        except UserError as e:
            print(f"note: {e}")
    else:
        rows = build()
    counts = token_counts(rows)
    problems = validate(rows, counts)
    for p in problems:
        print("problem:", p, file=sys.stderr)
    if problems:
        return 1
    if not cfg.check:
        write_jsonl(rows, OUT)
        NOTICE.write_text(notice(sources), encoding="utf-8")
        print(f"wrote {len(rows)} prompts to {OUT} and the notices to {NOTICE}")
    for r in rows:
        print(f"{r['id']}\t{counts[r['id']]}")
    print(counts_table(rows, counts))
    return 0


def main() -> int:
    _, rc = cli.run_job(BuildConfig, run, doc=__doc__)
    return rc


if __name__ == "__main__":
    sys.exit(main())
