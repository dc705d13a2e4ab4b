"""A collected dataset on disk: atomic shards, the set of finished prompt ids, and the settings guard.

    OUT/collect.settings.json   what this collection is (target, tokenizer fingerprint, generation settings);
                                written before the first shard so a rerun with other settings is refused
    OUT/shards/<name>/          one `datasets` dataset per batch, written to a temp folder and renamed in,
                                so a kill at any moment leaves either a whole shard or none
    OUT/collect.json            metadata of the finished collection (written once every prompt is in a shard)

Exactly-once: a prompt is skipped when its id is in any finished shard, and a shard is only ever visible whole.
With --samples K a prompt has K rows: the first under the prompt's own id, answer j under `ID~sJ` (sample_id).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import datasets

from decode.errors import UserError

datasets.disable_progress_bars()  # one shard per batch: the collect bar is the progress that matters

FEATURES = datasets.Features({
    "id": datasets.Value("string"),
    "category": datasets.Value("string"),
    "source": datasets.Value("string"),  # "target" (generated), "score" (given text), "on_policy" (draft-generated)
    "prompt_ids": datasets.Sequence(datasets.Value("int32")),
    "response_ids": datasets.Sequence(datasets.Value("int32")),
    "topk_ids": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
    "topk_logprobs": datasets.Sequence(datasets.Sequence(datasets.Value("float16"))),
})


SAMPLE_SUFFIX = re.compile(r"~s(\d+)$")


def sample_id(prompt_id: str, j: int) -> str:
    """The row id of a prompt's answer j (0 = the prompt's own id)."""
    return f"{prompt_id}~s{j}" if j else prompt_id


def split_sample_id(row_id: str) -> tuple[str, int]:
    """(prompt id, answer index) of a row id: rows of one prompt share the prompt id (held-out splits use it)."""
    m = SAMPLE_SUFFIX.search(row_id)
    return (row_id[: m.start()], int(m.group(1))) if m else (row_id, 0)


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 over the vocabulary and special tokens: equal fingerprints = interchangeable token ids."""
    h = hashlib.sha256()
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    h.update(json.dumps([tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id]).encode())
    return h.hexdigest()[:16]


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def guard_settings(out: Path, settings: dict, since: dict | None = None, name: str = "collect.settings.json",
                   what: str = "a collection") -> None:
    """Refuse to add to `what` (OUT/`name` records its settings) made with other settings; record them for a new
    one. `since`: settings keys added later, with the value an older settings file (which lacks them) was made with."""
    path = out / name
    if path.is_file():
        old = {**(since or {}), **json.loads(path.read_text())}
        diff = {k: (old.get(k), settings.get(k)) for k in set(old) | set(settings) if old.get(k) != settings.get(k)}
        if diff:
            lines = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, a, b in ((k, *v) for k, v in sorted(diff.items())))
            raise UserError(
                f"{out} holds {what} made with other settings ({lines}). Rerun with the same settings to "
                f"resume, or give a new --output (or delete {out}) to start fresh."
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, settings)


def shard_dirs(out: Path) -> list[Path]:
    d = out / "shards"
    return sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")) if d.is_dir() else []


def clean_temp(out: Path, prefix: str) -> None:
    """Remove temp shard folders starting with `prefix` (only this rank's: other ranks may be writing theirs)."""
    d = out / "shards"
    for p in d.glob(f".{prefix}*") if d.is_dir() else []:
        shutil.rmtree(p, ignore_errors=True)


def done_ids(out: Path) -> set[str]:
    ids: set[str] = set()
    for s in shard_dirs(out):
        ids.update(load_shard(out, s)["id"])
    return ids


def load_shard(out: Path, shard: Path) -> datasets.Dataset:
    """One shard, every record batch read (a truncated .arrow file fails here, not mid-training); a shard that
    does not load names itself and how to recollect just its prompts."""
    try:
        ds = datasets.load_from_disk(str(shard))
        ds.data.table.validate()  # the memory-mapped batches are all there
        return ds
    except Exception as e:  # pyarrow, datasets and OS errors alike: the shard is damaged
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise UserError(f"shard {shard} is unreadable ({type(e).__name__}: {reason}); delete that folder and rerun "
                        f"{recollect_command(out)} to collect just its prompts again") from None


def recollect_command(out: Path) -> str:
    """The command that resumes this collection (collecting only the prompts no shard holds): the recorded one,
    else collect with the collection's saved config."""
    try:
        command = json.loads((out / "collect.json").read_text()).get("command") or ""
    except (OSError, ValueError, AttributeError):  # none yet, or torn: the saved config still resumes it
        command = ""
    if len(command.split()) > 3:  # more than `python -m distill.collect`: the run's own arguments are there
        return f"`{command}`"
    return f"`python -m distill.collect --config {out / 'collect.config.json'} --output {out}`"


def check_collection(path: str | Path) -> None:
    """A finished collection holds the rows its collect.json counts, in shards that all load: a deleted shard
    would otherwise train on fewer rows in silence, a truncated one fail with a pyarrow traceback."""
    out = Path(path)
    info = collect_info(out)
    rows = sum(len(load_shard(out, s)) for s in shard_dirs(out))
    want = info.get("rows")  # an unfinished collection (settings only) has no count to hold it to
    if want is not None and rows != want:
        fix = (f"a shard is missing: rerun {recollect_command(out)} to collect its prompts again" if rows < want
               else f"remove the shards that were added to {out / 'shards'} since it was collected")
        raise UserError(f"{out} holds {rows} rows but its collect.json counts {want}; {fix}")


def write_shard(out: Path, name: str, rows: list[dict], meta: dict) -> None:
    """Write rows as one shard, atomically. A full disk is reported as resumable and loses nothing written."""
    final = out / "shards" / name
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=final.parent))
    try:
        ds = datasets.Dataset.from_list(rows, features=FEATURES)
        ds.save_to_disk(str(tmp))
        (tmp / "shard.json").write_text(json.dumps(meta))
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"disk full while writing shard {name} in {out}: the {len(shard_dirs(out))} shards already written are "
                "intact. Free some space and rerun the same command to resume."
            ) from None
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def shard_meta(out: Path) -> list[dict]:
    return [json.loads((s / "shard.json").read_text()) for s in shard_dirs(out) if (s / "shard.json").is_file()]


def load_collected(path: str | Path) -> datasets.Dataset:
    """The collected dataset: all shards as one `datasets.Dataset`."""
    out = Path(path)
    if not out.is_dir():
        raise UserError(f"{out} does not exist; give the --output folder of a `python -m distill.collect` run")
    shards = shard_dirs(out)
    if not shards:
        raise UserError(f"{out} holds no collected data (no shards); run `python -m distill.collect --output {out}` first")
    return datasets.concatenate_datasets([load_shard(out, s) for s in shards])


def collect_info(path: str | Path, flag: str = "--data") -> dict:
    """collect.json of a finished collection (falls back to the settings of an unfinished one); `flag`: the option
    that named the folder, for the message when it is not one."""
    out = Path(path)
    for name in ("collect.json", "collect.settings.json"):
        if (out / name).is_file():
            try:
                return json.loads((out / name).read_text())
            except ValueError as e:  # torn by a copy or an edit
                raise UserError(f"{out / name} is not valid JSON ({e}); rerun {recollect_command(out)} to "
                                "rewrite it") from None
    raise UserError(f"{out} is not a collected dataset (no collect.json); point {flag} at the output of distill.collect")
