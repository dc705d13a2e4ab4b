"""Prompt sets: the bundled ones (`train`, `heldout`; `long`, `long-heldout`; `ood`, `long-ood`), JSONL files, or any
HF dataset with a column mapping.

    load_prompts("train")                                    # bundled train split (612 prompts)
    load_prompts("long-heldout")                             # bundled 1K-7K-token prompts, held out (distill/data/long)
    load_prompts("ood")                                      # prompts unlike the training set (distill/data/ood)
    load_prompts("long-ood")                                 # 2K-7K-token documents unlike the bundled ones (long_ood)
    load_prompts("train+long")                               # sets joined with + (short and long examples mixed)
    load_prompts("my.jsonl")                                 # a prompt file (docs/architecture.md)
    load_prompts("data/chats/", columns={"messages": "conversation", "category": "topic"})
    load_prompts("org/dataset", split="train", columns={"prompt": "question"})   # Hub, when reachable

Each prompt comes back as {"id", "category", "messages" | "prompt"} (plus "response" in scoring data:
the last assistant message, or a mapped `response` column).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from decode.errors import UserError
from decode.prompts import read_prompts, validate_prompt

DATA_DIR = Path(__file__).parent / "data"
BUNDLED = {"train": DATA_DIR / "train.jsonl", "heldout": DATA_DIR / "heldout.jsonl",
           "long": DATA_DIR / "long" / "train.jsonl", "long-heldout": DATA_DIR / "long" / "heldout.jsonl",
           "ood": DATA_DIR / "ood" / "ood.jsonl", "long-ood": DATA_DIR / "long_ood" / "long_ood.jsonl"}
FIELDS = ("id", "category", "prompt", "messages", "response")


def resolve(spec: str) -> str:
    """`train` / `heldout` / `long` / `long-heldout` / `ood` / `long-ood` -> the bundled file; anything else unchanged."""
    return str(BUNDLED[spec]) if spec in BUNDLED else spec


def _check_exists(spec: str) -> None:
    """A name that is no bundled set, no path here and no Hub id (ORG/NAME) fails now, not after the Hub's retries."""
    p = Path(spec).expanduser()
    if p.exists():
        return
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1 or p.suffix in (".jsonl", ".json", ".csv", ".parquet",
                                                                                  ".arrow"):
        raise UserError(f"prompts not found: {spec!r} is neither a bundled set ({', '.join(BUNDLED)}), an existing "
                        "file or folder, nor a Hub dataset id (ORG/NAME)")


def _load_hf(spec: str, split: str):
    import datasets

    _check_exists(spec)
    p = Path(spec)
    try:
        if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "state.json").is_file()):
            ds = datasets.load_from_disk(str(p))
            return ds[split] if isinstance(ds, datasets.DatasetDict) else ds
        if p.is_dir() or p.is_file():
            files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.suffix in (".parquet", ".arrow", ".json", ".jsonl", ".csv"))
            if not files:
                raise UserError(f"{spec}: no parquet/arrow/json/csv files found")
            fmt = {".parquet": "parquet", ".arrow": "arrow", ".json": "json", ".jsonl": "json", ".csv": "csv"}[files[0].suffix]
            return datasets.load_dataset(fmt, data_files=[str(f) for f in files], split="train")
        return datasets.load_dataset(spec, split=split)
    except UserError:
        raise
    except Exception as e:  # datasets raises many types; the user needs the one line
        raise UserError(f"could not load prompts from {spec!r}: {str(e).splitlines()[0]}") from None


def load_prompts(spec: str, columns: dict | None = None, split: str = "train",
                 categories: list[str] | None = None, limit: int = 0, spread: bool = False) -> list[dict]:
    """Load and validate prompts; `columns` maps our field names to the dataset's column names.

    limit: the first N prompts, or with `spread` N prompts taken in turn from each category (file order within
    one), so a small evaluation still covers every category instead of the file's first one or two."""
    if "+" in spec and not Path(spec).expanduser().exists():
        rows = _joined(spec, columns, split, categories)
        return _take(rows, limit, spread)
    columns = dict(columns or {})
    bad = sorted(set(columns) - set(FIELDS))
    if bad:
        raise UserError(f"column mapping has unknown field(s) {bad}; map any of {list(FIELDS)} to your columns")
    path = resolve(spec)
    if path.endswith(".jsonl") and not columns:
        rows = read_prompts(path)
    else:
        ds = _load_hf(path, split)
        missing = sorted({c for c in columns.values() if c not in ds.column_names})
        if missing:
            raise UserError(f"{spec}: column(s) {missing} not found; the dataset has {ds.column_names}")
        rename = {v: k for k, v in columns.items()}
        rows = []
        for i, raw in enumerate(ds):
            row = {rename.get(k, k): v for k, v in raw.items() if rename.get(k, k) in FIELDS}
            row.setdefault("id", f"{Path(path).stem}-{i}")
            rows.append(validate_prompt(row, f"{spec} row {i}"))
    if not rows:
        raise UserError(f"{spec}: the prompt set is empty")
    return _take(_only(rows, categories, spec), limit, spread)


def _joined(spec: str, columns: dict | None, split: str, categories: list[str] | None) -> list[dict]:
    """The sets of `a+b+...` one after the other (each part as load_prompts takes it, the categories filter on
    the union); an id in two parts is refused, since collection resumes and training splits by id."""
    rows, seen = [], {}
    for part in spec.split("+"):
        if not part:
            raise UserError(f"prompts {spec!r}: an empty part; join sets as a+b, e.g. train+long")
        for row in load_prompts(part, columns, split):
            if row["id"] in seen:
                raise UserError(f"prompts {spec!r}: id {row['id']!r} is in both {seen[row['id']]} and {part}; give "
                                "each prompt of the joined sets its own id")
            seen[row["id"]] = part
            rows.append(row)
    return _only(rows, categories, spec)


def _only(rows: list[dict], categories: list[str] | None, spec: str) -> list[dict]:
    """The rows of the given categories (all without), refusing a category the set does not have."""
    if not categories:
        return rows
    have = {r["category"] for r in rows}
    unknown = sorted(set(categories) - have)
    if unknown:
        raise UserError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {unknown}; {spec} has {sorted(have)}")
    return [r for r in rows if r["category"] in categories]


def _take(rows: list[dict], limit: int, spread: bool) -> list[dict]:
    if not limit:
        return rows
    if not spread:
        return rows[:limit]
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    in_turn = [r for group in itertools.zip_longest(*by_cat.values()) for r in group if r is not None]
    return in_turn[:limit]


def split_response(row: dict) -> tuple[dict, str | None]:
    """For scoring data: (the prompt part, the response text). The response is a `response` field or the
    last assistant message."""
    if "response" in row and row["response"] is not None:
        return {k: v for k, v in row.items() if k != "response"}, str(row["response"])
    msgs = row.get("messages")
    if msgs and msgs[-1]["role"] == "assistant" and len(msgs) > 1:
        return {**row, "messages": msgs[:-1]}, msgs[-1]["content"]
    return row, None
