"""The product never unpickles arbitrary objects nor runs a model repository's code: a checkpoint, dataset or
Hub folder a user is handed must not be able to execute anything when a job reads it.

Scans decode/, distill/, slurm/ and scripts/ for torch.load( without weights_only=True, pickle.load(s),
numpy's allow_pickle=True and trust_remote_code=True. A load that really needs one of them is a design change:
make it safe instead (see distill/train/checkpoints.py: load_pickled).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("decode", "distill", "slurm", "scripts")
SUFFIXES = {".py", ".sh", ".slurm", ".yaml", ".yml"}
FORBIDDEN = re.compile(r"\bpickle\.loads?\(|\bcPickle\.|\bdill\.loads?\(|allow_pickle\s*=\s*True|trust_remote_code\s*=\s*True")


def _call_text(text: str, start: int) -> str:
    """The text of the call whose "(" is at `start`, up to its matching ")" (or the end of the file)."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    return text[start:]


def unsafe_loads(text: str) -> list[tuple[int, str]]:
    """(line number, the line) of every unsafe load in a file's text."""
    hits = []
    for m in re.finditer(r"\btorch\.load\(", text):
        if not re.search(r"weights_only\s*=\s*True", _call_text(text, m.end() - 1)):
            hits.append(m.start())
    hits += [m.start() for m in FORBIDDEN.finditer(text)]
    lines = text.splitlines()
    return sorted({(n := text.count("\n", 0, pos) + 1, lines[n - 1].strip()) for pos in hits})


def test_the_detector_finds_each_kind_of_unsafe_load():
    assert unsafe_loads("x = torch.load(f, map_location='cpu')\n")
    assert unsafe_loads("x = torch.load(\n    f,\n    weights_only=False,\n)\n")
    assert not unsafe_loads("x = torch.load(\n    f,\n    weights_only=True,\n)\n")
    for line in ("pickle.load(f)", "pickle.loads(b)", "np.load(p, allow_pickle=True)",
                 "AutoModel.from_pretrained(p, trust_remote_code=True)"):
        assert unsafe_loads(line + "\n"), line


def test_the_product_has_no_unsafe_load():
    found = []
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                found += [f"{path.relative_to(REPO)}:{n}: {line}" for n, line in unsafe_loads(path.read_text())]
    assert not found, "unsafe loads (a crafted file could run code):\n" + "\n".join(found)
