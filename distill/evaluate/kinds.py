"""Which design a draft is, read the same way by the evaluation, its report, its plots and the sweep."""

from __future__ import annotations


def design_kind(design: dict | None, loaded: str | None = None) -> str:
    """A draft's design kind: specdistill.json `design.kind` (feature_head), else what the loaded draft is
    (decode.bench.draft_kind), else standalone (standalone drafts' designs carry no kind)."""
    kind = design.get("kind") if isinstance(design, dict) else None
    return str(kind or loaded or "standalone")


def kind(e: dict) -> str:
    """An evaluation entry's design kind (distill.evaluate sets it): feature_head or standalone (older reports:
    standalone)."""
    return e.get("kind") or "standalone"
