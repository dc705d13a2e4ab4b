"""The data builders are scripts next to their data (`python distill/data/.../build_x.py`): tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def loaded(path: Path):
    """The script at `path` as a module named after its file, registered in sys.modules while in use (@dataclass
    looks its module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
