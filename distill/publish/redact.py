"""No local absolute path leaves this machine: the model card and the uploaded specdistill.json get relative ones.

A path under the folder publish runs in becomes relative to it (`runs/pipeline-default/collect`, what the
recorded commands were run with); the local target's folder becomes its name; any other absolute path keeps only
its last part, after `…/` (`/home/me/data/my-prompts.jsonl` -> `…/my-prompts.jsonl`): the name is what tells a
reader something, the folders above it only tell about the machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# An absolute path of two or more parts (`/reduced` alone is a repo-relative suffix in the usage snippet), not
# inside a URL or a word (`https://host/x`, `tokens/s`); it ends at whitespace, a quote or a bracket.
_ABS = re.compile(r"(?<![\w.:/~\-])/(?:[^\s/'\"`()\[\]{},;|<>]+/)+[^\s/'\"`()\[\]{},;|<>]*")


def text(s: str, names: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """`s` with every local absolute path replaced. names: exact path -> what to show instead (longest first)."""
    for path, name in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        if path.startswith("/"):
            s = s.replace(path.rstrip("/"), name)
    base = str((cwd or Path.cwd()).resolve())

    def short(m: re.Match) -> str:
        p = m.group(0)
        tail = re.search(r"[.:]+$", p)  # a sentence's full stop or colon is not part of the path
        p, end = (p[: tail.start()], tail.group(0)) if tail and tail.start() > 1 else (p, "")
        if p == base or p.startswith(base + "/"):
            return (p[len(base) + 1:] or ".") + end
        return "…/" + p.rstrip("/").rsplit("/", 1)[-1] + end

    return _ABS.sub(short, s)


def data(value, names: dict[str, str] | None = None, cwd: Path | None = None):
    """A JSON value with `text` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return text(value, names, cwd)
    if isinstance(value, list):
        return [data(v, names, cwd) for v in value]
    if isinstance(value, dict):
        return {data(k, names, cwd): data(v, names, cwd) for k, v in value.items()}
    return value


def target_names(spec: str, resolved: str | None) -> dict[str, str]:
    """A local target's folder (as given and as resolved) -> its name; nothing for a Hub id or `default`."""
    out = {}
    for p in (spec, resolved):
        if p and Path(p).expanduser().is_absolute() and Path(p).expanduser().exists():
            out[str(Path(p).expanduser())] = Path(p).name
            out[str(Path(p).expanduser().resolve())] = Path(p).name
    return out


def meta_files(folder: Path, names: dict[str, str]) -> None:
    """Rewrite every specdistill.json in the assembled folder (the top level and reduced/) without local paths,
    and a feature head's config.json (a speculators config: its verifier names the target; publish sets it to
    the target's Hub id, this is the backstop)."""
    files = sorted(folder.rglob("specdistill.json"))
    config = folder / "config.json"
    if config.is_file() and "speculators_model_type" in json.loads(config.read_text()):
        files.append(config)
    for f in files:
        f.write_text(json.dumps(data(json.loads(f.read_text()), names), indent=2) + "\n")
