"""A sync check that can fail: the hot loops (collection's decode steps, a training step) run under
torch.cuda.set_sync_debug_mode($SPECDISTILL_SYNC_DEBUG) when that is set and the device is CUDA.

    SPECDISTILL_SYNC_DEBUG=error python -m distill.collect ...   # a host sync inside a step raises (the GPU check sets it)

"error" raises at the first operation that waits for the device (a .item(), a boolean-mask index, a blocking copy
to the host), inside C++ ops too, which is what a Python-level count cannot see; "warn" prints instead. Unset (the
default), nothing changes. On the CPU there is nothing to wait for and it does nothing.
"""

from __future__ import annotations

import contextlib
import os

import torch

ENV = "SPECDISTILL_SYNC_DEBUG"
MODES = ("", "warn", "error")


def mode() -> str:
    value = os.environ.get(ENV, "")
    if value not in MODES:
        from decode.errors import UserError

        raise UserError(f"{ENV}={value!r}: give warn or error (or leave it unset)")
    return value


@contextlib.contextmanager
def hot_loop(device: torch.device):
    """The block under set_sync_debug_mode($SPECDISTILL_SYNC_DEBUG) on a CUDA device; as it was after."""
    m = mode() if device.type == "cuda" else ""
    if not m:
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(m)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)
