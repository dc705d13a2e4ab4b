"""The training feed's last leg: host batches onto the device, the next one copied while this one trains.

On CUDA each batch (pinned by the DataLoader, or by batches.feed's thread) is copied on a side stream as soon as
it is taken from the feed, one step ahead: the copy engine moves the next batch's ids, teacher rows and, for a
feature head, its ~400 MB of bf16 features while the compute stream runs the current step, which waits for that
copy only when it takes the batch (wait_stream; record_stream keeps the memory until the compute stream is done
with it). Elsewhere a batch is moved when it is taken (on the CPU .to() is the tensor itself).
"""

from __future__ import annotations

import torch


class DeviceFeed:
    """Iterates (host batch, device batch) over a feed of host batches (dicts of tensors); close() closes the feed."""

    def __init__(self, feed, device: torch.device):
        self.feed, self.device = feed, device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.ahead = None  # (host, device) of the batch copied ahead, on the side stream

    def __iter__(self):
        return self

    def _copy(self, host: dict) -> dict:
        if self.stream is None:
            return {k: v.to(self.device) for k, v in host.items()}
        with torch.cuda.stream(self.stream):
            return {k: v.to(self.device, non_blocking=True) for k, v in host.items()}

    def _take(self):
        host = next(self.feed)
        return host, self._copy(host)

    def __next__(self) -> tuple[dict, dict]:
        host, dev = self.ahead if self.ahead is not None else self._take()
        self.ahead = None
        if self.stream is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(self.stream)
            for v in dev.values():
                v.record_stream(compute)
            try:  # the next batch's copy starts now, beside this step's kernels
                self.ahead = self._take()
            except StopIteration:
                pass
        return host, dev

    def close(self) -> None:
        close = getattr(self.feed, "close", None)
        if close is not None:
            close()
