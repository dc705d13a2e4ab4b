"""The small-M CPU GEMM used to verify γ + 1 tokens at about the cost of one (decode/runners/csrc/smallgemm.cpp).

    kernel(isa=None) -> the compiled module (chosen_isa()), or None when off or unbuilt (FastLlama: torch's matmul)
    Packed(w_io)(x, bias) -> x @ w_io (+ bias), x: (M, K) with MIN_ROWS <= M <= MAX_ROWS
    Packed(w_io, "float16")  the weight stored as float16 (float32 math): for drafts, at any M up to MAX_ROWS
    Packed(w_io, "int8")     int8 with one float32 scale per output column (float32 math): drafts, a quarter of
                             the bytes; absmax rounding moves a weight by at most half a step (scale / 2)
    Packed.prefetch          bytes the kernel prefetches ahead of each weight stream (0 or PREFETCH_BYTES; the
                             result is the same either way, only the speed differs)
    kernel().rows_attention  one layer's RoPE, cache write and attention for a few rows (decode/runners/csrc/attention.cpp,
                             compiled into the same module; decode.runners.FastLlama calls it)

On a CPU, MKL's GEMM at M = 2..16 repacks the whole weight on every call, so a verification forward cost
1.4-2x a one-token forward on this project's 2-core box (v(γ) in decode.bench.costmodel), 1.5-3.2x on an AVX2 AMD EPYC;
this kernel reads each weight once per call. It is compiled on first use with torch's C++ extension loader (g++,
~1 min once per ISA, cached under TORCH_EXTENSIONS_DIR: build_directory()), one build per ISA from the same
source (ISAS): avx512 (+ VL, FMA), avx2 (+ FMA, F16C), or portable C++ for any other CPU; the best this CPU runs is used
(its /proc/cpuinfo flags), float32 weights only. SPECDISTILL_SMALLGEMM_ISA=avx512|avx2|portable forces one (to
measure the AVX2 path on an AVX-512 box; an ISA the CPU lacks is an error). SPECDISTILL_SMALLGEMM=0 turns the
kernel off (to compare, or where no compiler is installed). decode.runners still times it against torch's
matmul when a runner is built and takes whichever is faster there.
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
# how far ahead of each weight stream the kernel prefetches, when it does: a Packed's `prefetch` (0 = not at all;
# decode.runners times both at a runner's build: it pays on one CPU and cost on another, decode/runners/csrc/smallgemm.cpp)
PREFETCH_BYTES = 4096
WEIGHTS = ("float32", "float16", "int8")  # how a packed weight is stored; all but float32 round it (drafts only)
# the extension's sources: the GEMM (and the module's definitions) and the few-row attention FastLlama uses beside it
SOURCES = (Path(__file__).parent / "csrc" / "smallgemm.cpp", Path(__file__).parent / "csrc" / "attention.cpp")


# ISA -> (the /proc/cpuinfo flags it needs, its compiler flags), best first; the source picks its code path from
# the flags (decode/runners/csrc/smallgemm.cpp). portable needs nothing: plain C++ that runs on any CPU.
ISAS = {
    "avx512": ({"avx512f", "avx512vl", "fma"}, ["-mavx512f", "-mavx512vl", "-mfma"]),
    "avx2": ({"avx2", "fma", "f16c"}, ["-mavx2", "-mfma", "-mf16c"]),
    "portable": (set(), []),
}
ISA_ENV = "SPECDISTILL_SMALLGEMM_ISA"  # forces one of ISAS (tests; the AVX2 path measured on an AVX-512 box)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none: then only portable runs)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):  # x86 says flags, arm64 Features
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def runnable_isas() -> list[str]:
    """The ISAs of ISAS this CPU can run, best first."""
    flags = cpu_flags()
    return [isa for isa, (needs, _) in ISAS.items() if needs <= flags]


def chosen_isa() -> str:
    """SPECDISTILL_SMALLGEMM_ISA when set (checked against the CPU), else the best ISA the CPU runs."""
    forced = os.environ.get(ISA_ENV)
    if not forced:
        return runnable_isas()[0]
    if forced not in ISAS:
        raise ValueError(f"{ISA_ENV}={forced!r}: give one of {', '.join(ISAS)}")
    if forced not in runnable_isas():
        missing = sorted(ISAS[forced][0] - cpu_flags())
        raise ValueError(f"{ISA_ENV}={forced}: this CPU lacks {', '.join(missing)} (/proc/cpuinfo)")
    return forced


def name(isa: str) -> str:
    """The extension's module name for one ISA's build."""
    return f"specdistill_smallgemm_{isa}"


def build_directory(isa: str) -> Path:
    """Where one ISA's kernel is compiled and cached: TORCH_EXTENSIONS_DIR (or torch's default root), one folder
    per ISA, Python and torch version (an extension built against another torch must not be loaded)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"{name(isa)}-{py}-torch{torch.__version__.replace('+', '_')}"


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


def kernel(isa: str | None = None):
    """The compiled extension for `isa` (default chosen_isa()), or None: off by SPECDISTILL_SMALLGEMM=0, or the
    build failed (warned). An ISA this CPU lacks, asked for by name or SPECDISTILL_SMALLGEMM_ISA, raises."""
    if os.environ.get("SPECDISTILL_SMALLGEMM", "1") == "0":
        return None
    isa = isa or chosen_isa()
    if isa not in runnable_isas():
        raise ValueError(f"smallgemm: this CPU cannot run the {isa!r} kernel (it runs {runnable_isas()})")
    return _build(isa)


def staged_sources(isa: str) -> list[Path]:
    """SOURCES under names that depend on their text alone, in the user cache ($SPECDISTILL_CACHE, else
    $XDG_CACHE_HOME/specdistill, as decode.models.targets): what the build compiles. torch's loader writes the sources'
    paths into the build folder's build.ninja, so two checkouts of the same code (a clone beside a working copy, the
    README walk's copy of the repository) each compiling its own paths rebuilt the kernel (30 s to minutes) whenever
    the other had loaded it last. Written once, never rewritten (their mtime stays older than the build); one set
    per ISA, so parallel builds of different ISAs never write the same file."""
    import hashlib

    texts = [source.read_bytes() for source in SOURCES]
    digest = hashlib.sha256(b"\0".join(texts)).hexdigest()[:16]
    cache = os.environ.get("SPECDISTILL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdistill"
    staged = []
    for source, text in zip(SOURCES, texts):
        path = Path(cache) / "kernels" / f"{source.stem}-{isa}-{digest}.cpp"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_bytes(text)
            os.replace(tmp, path)
        staged.append(path)
    return staged


@functools.cache
def _build(isa: str):
    try:
        from torch.utils.cpp_extension import load

        folder = build_directory(isa)
        with build_lock(folder):
            module = load(
                name(isa),
                [str(path) for path in staged_sources(isa)],
                extra_cflags=["-O3", *ISAS[isa][1], "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                build_directory=str(folder),
            )
        assert module.isa() == isa, f"the {isa} build compiled the {module.isa()} path (compiler flags?)"
        return module
    except Exception as e:  # no compiler, no ninja, ...: decoding still works, with torch's matmul
        warnings.warn(
            f"specdistill: the small-M GEMM kernel ({isa}) did not build ({type(e).__name__}: {str(e)[:200]}); "
            "verification uses torch's matmul (slower on CPU). Install g++ and ninja, or set "
            "SPECDISTILL_SMALLGEMM=0 to silence this.",
            stacklevel=3,
        )
        return None


class Packed:
    """One (in, out) float32 weight packed for the kernel, stored as `weights` (WEIGHTS); call with M rows of input.
    isa: which build packs and multiplies it (default chosen_isa()). prefetch: see PREFETCH_BYTES."""

    def __init__(self, w_io: torch.Tensor, weights: str = "float32", isa: str | None = None, prefetch: int = 0):
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
        self.n_out = w_io.shape[1]
        self.prefetch = prefetch
        self.scale = None
        if weights == "int8":  # symmetric, per output column: w[:, n] ~= q[:, n] * scale[n]
            self.scale = (w_io.abs().amax(0) / 127).clamp_min(torch.finfo(torch.float32).tiny).contiguous()  # (N,)
            w_io = torch.round(w_io / self.scale).clamp_(-127, 127).to(torch.int8)
        # (ceil(N / 64), K, 64), in the storage type (the avx2 build orders each block as (4, K, 16) inside)
        module = kernel(isa)
        self.isa = module.isa()  # which build multiplies it
        self.blocks = module.pack(w_io.contiguous(), weights == "float16")
        self._mm = module.mm  # looked up once: __call__ runs ~120 times a target forward

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self._mm(x.contiguous(), self.blocks, self.n_out, bias, self.scale, self.prefetch)


def usable_for(weight: torch.Tensor) -> bool:
    """Whether weights like this one can use the kernel: float32 on the CPU, and the kernel builds."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and kernel() is not None
