"""A CPU stand-in for distill.collect.llama_steps.cuda_graph that behaves like a CUDA graph where the tests need it.

The warm-up runs are cuda_graph's. The capture run records every aten op the step dispatches, with the very tensors
it read and wrote (a graph's static addresses), and fails as CUDA's capture does at an op that waits for the host
(a .item(), a nonzero, a boolean-mask index). replay() re-runs the recorded ops on those tensors, not the step's
Python: a step that took a host value at capture (a slot read with int(), a shape from a tensor's value) replays
that old value, so its outputs go wrong and a test comparing them fails, as on a GPU.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# ops whose result the host waits for; torch.multinomial checks its input's validity on the host on CUDA
SYNC_OPS = ("aten._local_scalar_dense", "aten.item", "aten.is_nonzero", "aten.equal", "aten.nonzero",
            "aten.masked_select", "aten.unique", "aten._unique", "aten.masked_scatter", "aten.repeat_interleave.Tensor",
            "aten.multinomial")
INDEX_OPS = (torch.ops.aten.index, torch.ops.aten.index_put, torch.ops.aten.index_put_)


def host_read(func, args) -> bool:
    """Whether an op waits for the device's values on the host: a SYNC_OPS op, or an index by a boolean mask."""
    name = str(func) if str(func).startswith("aten.repeat_interleave") else str(func.overloadpacket)
    if name.startswith(SYNC_OPS):
        return True
    return func.overloadpacket in INDEX_OPS and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                                    for i in (args[1] or []))


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[tuple] = []  # (func, args, kwargs, [(output tensor, whether a replay copies into it)])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if host_read(func, args):
            raise RuntimeError(f"operation not permitted when stream is capturing ({func} reads the device)")
        out = func(*args, **kwargs)
        held = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        # a result that shares no memory with an input is copied into at replay; a view or an in-place op's result
        # is written where it is. Memory, not the schema: aten.to and aten.reshape may alias and often do not
        outs = [(t, t.untyped_storage().data_ptr() not in held) for t in _tensors(out)]
        self.ops.append((func, args, kwargs, outs))
        return out


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class RecordedGraph:
    """cuda_graph's contract: (step, scratch, device, generator=None) -> an object with replay()."""

    made: list[RecordedGraph] = []  # every capture of the test, in order

    def __init__(self, step, scratch, device, generator=None):
        for _ in range(2):  # cuda_graph's warm-up runs
            scratch()
            step()
        scratch()
        rec = _Recorder()
        with rec:
            step()
        self.ops, self.replays = rec.ops, 0
        RecordedGraph.made.append(self)

    @property
    def kernels(self) -> int:
        """Ops that compute (not a view of a tensor already there)."""
        return sum(not func.is_view for func, *_ in self.ops)

    def replay(self) -> None:
        self.replays += 1
        for func, args, kwargs, outs in self.ops:
            for (old, copy), new in zip(outs, _tensors(func(*args, **kwargs))):
                if copy:
                    old.copy_(new)


def count_ops(fn) -> tuple[int, int]:
    """(aten ops, of them not views) that fn() dispatches."""
    rec = _Recorder()
    with rec:
        fn()
    return len(rec.ops), sum(not func.is_view for func, *_ in rec.ops)
