"""The small-M CPU GEMM used to verify γ + 1 tokens at about the cost of one (decode/csrc/smallgemm.cpp).

    kernel() -> the compiled module, or None where it cannot run (then FastLlama uses torch's matmul)
    Packed(w_io)(x, bias) -> x @ w_io (+ bias), x: (M, K) with MIN_ROWS <= M <= MAX_ROWS
    Packed(w_io, "float16")  the weight stored as float16 (float32 math): for drafts, at any M up to MAX_ROWS
    Packed(w_io, "int8")     int8 with one float32 scale per output column (float32 math): drafts, a quarter of
                             the bytes; absmax rounding moves a weight by at most half a step (scale / 2)

On a CPU, MKL's GEMM at M = 2..16 repacks the whole weight on every call, so a verification forward cost
1.4-2x a one-token forward on this project's 2-core box (v(γ) in decode.costmodel); this kernel reads each
weight once per call. It is compiled on first use with torch's C++ extension loader (g++ with AVX-512 needed,
~1 min once, cached under TORCH_EXTENSIONS_DIR: build_directory()) and is used only for float32 weights on an AVX-512 CPU.
SPECDISTILL_SMALLGEMM=0 turns it off (to compare, or where no compiler is installed).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
import warnings
from pathlib import Path

import torch

# the kernel always takes 2-16 rows (a verification); single rows and prompts go to whichever of it and MKL is
# faster on the machine at hand (decode.runners times both when a runner is built)
MIN_ROWS, MAX_ROWS = 2, 16
WEIGHTS = ("float32", "float16", "int8")  # how a packed weight is stored; all but float32 round it (drafts only)
SOURCE = Path(__file__).parent / "csrc" / "smallgemm.cpp"


def _cpu_has_avx512() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512f" in flags


NAME = "specdistill_smallgemm_avx512"


def build_directory() -> Path:
    """Where the kernel is compiled and cached: TORCH_EXTENSIONS_DIR (or torch's default root), one folder per
    Python and torch version (an extension built against another torch must not be loaded)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"{NAME}-{py}-torch{torch.__version__.replace('+', '_')}"


@contextlib.contextmanager
def build_lock(folder: Path):
    """One builder at a time, and no wait on a dead one. torch's loader guards a build with a `lock` file that a
    killed build leaves behind, after which every later load waits on it forever. Here every builder first holds
    an flock, which the kernel drops when its holder dies, so a `lock` file found while holding it is stale."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "specdistill.flock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        stale = folder / "lock"
        if stale.exists():
            warnings.warn(f"specdistill: removing {stale}, left by a kernel build that was killed", stacklevel=3)
            stale.unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@functools.cache
def kernel():
    """The compiled extension, or None (off by SPECDISTILL_SMALLGEMM=0, no AVX-512, or the build failed: warned)."""
    if os.environ.get("SPECDISTILL_SMALLGEMM", "1") == "0" or not _cpu_has_avx512():
        return None
    try:
        from torch.utils.cpp_extension import load

        folder = build_directory()
        with build_lock(folder):
            return load(
                NAME,
                [str(SOURCE)],
                extra_cflags=["-O3", "-mavx512f", "-mfma", "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                build_directory=str(folder),
            )
    except Exception as e:  # no compiler, no ninja, ...: decoding still works, with torch's matmul
        warnings.warn(
            f"specdistill: the small-M GEMM kernel did not build ({type(e).__name__}: {str(e)[:200]}); "
            "verification uses torch's matmul (slower on CPU). Install g++ and ninja, or set "
            "SPECDISTILL_SMALLGEMM=0 to silence this.",
            stacklevel=2,
        )
        return None


class Packed:
    """One (in, out) float32 weight packed for the kernel, stored as `weights` (WEIGHTS); call with M rows of input."""

    def __init__(self, w_io: torch.Tensor, weights: str = "float32"):
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
        self.n_out = w_io.shape[1]
        self.scale = None
        if weights == "int8":  # symmetric, per output column: w[:, n] ~= q[:, n] * scale[n]
            self.scale = (w_io.abs().amax(0) / 127).clamp_min(torch.finfo(torch.float32).tiny).contiguous()  # (N,)
            w_io = torch.round(w_io / self.scale).clamp_(-127, 127).to(torch.int8)
        # (ceil(N / 64), K, 64), in the storage type
        self.blocks = kernel().pack(w_io.contiguous(), weights == "float16")
        self._mm = kernel().mm  # looked up once: __call__ runs ~120 times a target forward

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self._mm(x.contiguous(), self.blocks, self.n_out, bias, self.scale)


def usable_for(weight: torch.Tensor) -> bool:
    """Whether weights like this one can use the kernel: float32 on the CPU, and the kernel builds."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and kernel() is not None
