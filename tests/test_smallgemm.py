"""decode.runners.smallgemm: the small-M verification GEMM equals torch's matmul on every ISA build this CPU runs
(avx512, avx2 forced on an AVX-512 box, portable), and a row's result does not depend on how many rows share the
call (so a verified token's logits match whatever γ was)."""

import pytest
import torch

from decode.runners import smallgemm
from decode.runners.fast import FastLlama

needs_kernel = pytest.mark.skipif(smallgemm.kernel() is None, reason="needs g++ (decode.runners.smallgemm)")


def isa_kernel(isa: str):
    """The build for `isa`, skipping only where this CPU cannot run it (or nothing builds here)."""
    if isa not in smallgemm.runnable_isas():
        pytest.skip(f"this CPU lacks {sorted(smallgemm.ISAS[isa][0] - smallgemm.cpu_flags())}")
    module = smallgemm.kernel(isa)
    if module is None:
        pytest.skip("the kernel did not build (g++?)")
    return module


def rounded(w: torch.Tensor, weights: str) -> torch.Tensor:
    """The weight the kernel multiplies by when it stores w as `weights` (float32 math on it)."""
    if weights == "float16":
        return w.half().float()
    if weights == "int8":
        scale = (w.abs().amax(0) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        return torch.round(w / scale).clamp(-127, 127) * scale
    return w


@pytest.mark.parametrize("isa", list(smallgemm.ISAS))
@pytest.mark.parametrize("weights", smallgemm.WEIGHTS)
def test_every_isa_matches_torch_and_rows_are_independent(isa, weights):
    """M = 1..8 (7 rows a pass, then a second pass), N not a multiple of the 64-column block, with and without a
    bias: torch's matmul on the rounded weight; each row bitwise the same as when all 8 share the call, and with
    software prefetch on (it reads past a block's end: a prefetch never faults)."""
    isa_kernel(isa)
    g = torch.Generator().manual_seed(5)
    k, n = 200, 150
    w, b, x = torch.randn(k, n, generator=g), torch.randn(n, generator=g), torch.randn(8, k, generator=g)
    packed = smallgemm.Packed(w, weights, isa=isa)
    assert packed.isa == isa
    wr = rounded(w, weights)
    for bias in (None, b):
        full = packed(x, bias)
        for m in range(1, 9):
            want = x[:m] @ wr + (0 if bias is None else bias)
            got = packed(x[:m], bias)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * k ** 0.5)
            assert torch.equal(got, full[:m]) and torch.equal(packed(x[-m:], bias), full[-m:])
        packed.prefetch = smallgemm.PREFETCH_BYTES
        assert torch.equal(packed(x, bias), full)
        packed.prefetch = 0


@pytest.mark.parametrize("weights", smallgemm.WEIGHTS)
def test_avx2_gives_bitwise_the_avx512_result(weights):
    """Each column is the same sequential FMA sum over k in both builds (decode/runners/csrc/smallgemm.cpp)."""
    isa_kernel("avx512"), isa_kernel("avx2")
    g = torch.Generator().manual_seed(6)
    w, b, x = torch.randn(300, 130, generator=g), torch.randn(130, generator=g), torch.randn(8, 300, generator=g)
    for m in range(1, 9):  # every row count's code path, 8 = a pass of 7 and one of 1
        a = smallgemm.Packed(w, weights, isa="avx512")(x[:m], b)
        assert torch.equal(smallgemm.Packed(w, weights, isa="avx2")(x[:m], b), a)


def test_the_isa_is_the_best_the_cpu_has_unless_forced(monkeypatch):
    """The default follows /proc/cpuinfo's flags; SPECDISTILL_SMALLGEMM_ISA forces one the CPU has, and names
    what is missing for one it lacks (no build here)."""
    monkeypatch.delenv(smallgemm.ISA_ENV, raising=False)
    for flags, want in (({"avx512f", "avx512vl", "avx2", "fma", "f16c"}, "avx512"), ({"avx2", "fma", "f16c"}, "avx2"),
                        ({"avx512f", "avx2", "fma", "f16c"}, "avx2"),  # no VL: the attention's 32 ymm registers
                        ({"avx2", "fma"}, "portable"), (set(), "portable")):
        monkeypatch.setattr(smallgemm, "cpu_flags", lambda f=frozenset(flags): f)
        assert smallgemm.chosen_isa() == want
    monkeypatch.setenv(smallgemm.ISA_ENV, "avx512")
    with pytest.raises(ValueError, match="lacks avx512f"):
        smallgemm.chosen_isa()
    monkeypatch.setenv(smallgemm.ISA_ENV, "sse9")
    with pytest.raises(ValueError, match="give one of avx512, avx2, portable"):
        smallgemm.chosen_isa()


def test_avx2_forced_on_this_box_runs_fastllama(tiny_llama, monkeypatch):
    """SPECDISTILL_SMALLGEMM_ISA=avx2 on an AVX-512 box: the runner multiplies with the AVX2 build, verifies
    with it, and matches HF."""
    isa_kernel("avx2")
    monkeypatch.setenv(smallgemm.ISA_ENV, "avx2")
    model = tiny_llama(0)
    runner = FastLlama(model)
    assert {lin.packed.isa for lin in runner.linears()} == {"avx2"}
    # the build timed the kernel's prefetch and set the winner on every weight
    assert {lin.packed.prefetch for lin in runner.linears()} == {runner.prefetch} <= {0, smallgemm.PREFETCH_BYTES}
    runner.set_paths("torch", "torch", "smallgemm")  # timing picks per machine; here the kernel verifies
    ids = torch.randint(0, model.config.vocab_size, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    cache = runner.new_cache(32)
    runner.forward(ids[:8], cache, 1)
    got = runner.forward(ids[8:], cache, 4)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0, 8:]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("k,n", [(576, 960), (33, 100), (744, 8192), (17, 64), (40, 1)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_torch_matmul(k, n, bias):
    g = torch.Generator().manual_seed(k + n)
    w = torch.randn(k, n, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    packed = smallgemm.Packed(w)
    for m in range(smallgemm.MIN_ROWS, smallgemm.MAX_ROWS + 1):
        x = torch.randn(m, k, generator=g)
        want = x @ w + (b if bias else 0)
        got = packed(x, b)
        assert got.shape == (m, n)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * k ** 0.5)


@needs_kernel
def test_rows_do_not_depend_on_the_row_count():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 200, generator=g), torch.randn(200, generator=g)
    x = torch.randn(smallgemm.MAX_ROWS, 96, generator=g)
    packed = smallgemm.Packed(w)
    full = packed(x, b)
    for m in range(smallgemm.MIN_ROWS, smallgemm.MAX_ROWS):
        assert torch.equal(packed(x[:m], b), full[:m])  # bitwise: same accumulation order per row
        assert torch.equal(packed(x[-m:], b), full[-m:])


@needs_kernel
def test_fastllama_verifies_with_it_and_matches_hf(tiny_llama):
    model = tiny_llama(0)
    runner = FastLlama(model)
    assert runner.head.packed is not None  # float32 on a CPU where the kernel builds: it is in use
    ids = torch.randint(0, model.config.vocab_size, (12,)).tolist()
    cache = runner.new_cache(32)
    runner.forward(ids[:8], cache, 1)
    got = runner.forward(ids[8:], cache, 4)  # 4 new tokens: the small-M path
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0, 8:]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_off_switch(monkeypatch):
    monkeypatch.setenv("SPECDISTILL_SMALLGEMM", "0")
    assert smallgemm.kernel() is None
    assert not smallgemm.usable_for(torch.zeros(2, 2))


@needs_kernel
def test_half_weights_match_float16_rounded_matmul():
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(80, 130, generator=g), torch.randn(130, generator=g)
    packed = smallgemm.Packed(w, "float16")
    w16 = w.half().float()  # what the kernel multiplies by: the weight rounded to float16
    for m in range(1, smallgemm.MAX_ROWS + 1):
        x = torch.randn(m, 80, generator=g)
        torch.testing.assert_close(packed(x, b), x @ w16 + b, rtol=1e-4, atol=1e-3)


@needs_kernel
def test_int8_weights_match_the_dequantised_matmul():
    """int8: w[:, n] ~= q[:, n] * scale[n] with scale = max|w[:, n]| / 127; the kernel multiplies by exactly that."""
    g = torch.Generator().manual_seed(2)
    w, b = torch.randn(80, 130, generator=g), torch.randn(130, generator=g)
    w[:, 7] = 0  # an all-zero column must not divide by zero
    packed = smallgemm.Packed(w, "int8")
    scale = w.abs().amax(0) / 127
    q = torch.round(w / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp(-127, 127)
    assert q.abs().max() == 127 and (q * scale - w).abs().max() <= scale.max() / 2 + 1e-6  # half a step at most
    w8 = q * scale
    for m in range(1, smallgemm.MAX_ROWS + 1):
        x = torch.randn(m, 80, generator=g)
        torch.testing.assert_close(packed(x, b), x @ w8 + b, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(packed(x, None), x @ w8, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="weights must be one of"):
        smallgemm.Packed(w, "int4")


@needs_kernel
@pytest.mark.parametrize("weights,tol", [("float16", 0.01), ("int8", 0.08)])  # measured: 0.002, 0.037
def test_rounded_runner_is_close_to_the_exact_one(tiny_llama, weights, tol):
    """Logits of the rounded runner within `tol` of the exact ones, relative (Frobenius norm; the tiny model's
    logits are tens in size, so an elementwise bound says little)."""
    model = tiny_llama(0)
    exact, rounded = FastLlama(model), FastLlama(model, weights)
    assert rounded.weights == weights and exact.weights == "float32"
    ids = torch.randint(0, model.config.vocab_size, (10,)).tolist()
    a = exact.forward(ids, exact.new_cache(16), 10)
    b = rounded.forward(ids, rounded.new_cache(16), 10)
    assert not torch.equal(a, b)  # the weights really are rounded
    assert ((b - a).norm() / a.norm()).item() < tol


@needs_kernel
def test_one_token_forwards_on_either_matmul_match_hf(tiny_llama):
    """The target's one-token and prompt paths are timed at build (the kernel or torch's matmul, whichever is
    faster here);
    both give HF's logits and the target's own greedy output; with the kernel, a token's logits alone and as a row
    of a verification differ only by attention's summation order (the matmuls are row-independent)."""
    from decode.drafting.speculative import generate

    model = tiny_llama(3, init=0.1)
    fast = FastLlama(model)
    assert fast.one_row in ("smallgemm", "torch") and fast.prompt in ("smallgemm", "torch")
    ids = torch.randint(0, model.config.vocab_size, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([ids])).logits[0]
    want_tokens, _ = generate(model, None, ids[:20], 8)
    for how in ("smallgemm", "torch"):
        fast.set_paths(how, how)
        cache = fast.new_cache(32)
        prompt = fast.forward(ids[:20], cache, 20)  # a prompt: more than smallgemm.MAX_ROWS tokens
        torch.testing.assert_close(prompt, want[:20], rtol=1e-5, atol=1e-5)
        one = torch.cat([fast.forward([t], cache, 1) for t in ids[20:]])  # (4, V), token by token
        torch.testing.assert_close(one, want[20:], rtol=1e-5, atol=1e-5)
        cache.crop(-4)
        several = fast.forward(ids[20:], cache, 4)  # the same 4 tokens as one verification
        if how == "smallgemm":
            torch.testing.assert_close(several, one, rtol=0, atol=2e-6)  # measured 6e-7 on logits of ~1
        assert generate(fast, None, ids[:20], 8)[0] == want_tokens
    fast.set_paths("smallgemm", "smallgemm", "torch")  # the kernel lost at a verification's size: torch verifies
    assert fast.prompt == "torch" and {(lin.min_rows, lin.max_rows) for lin in fast.linears()} == {(1, 1)}
    cache = fast.new_cache(32)
    fast.forward(ids[:20], cache, 1)
    torch.testing.assert_close(fast.forward(ids[20:], cache, 4), want[20:], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not available"):
        fast.set_paths("mkl")
    with pytest.raises(ValueError, match="float32"):
        FastLlama(model, "int8").set_paths("torch")


def test_build_lock_removes_a_killed_builds_lock_file(tmp_path):
    (tmp_path / "lock").write_text("")  # what torch's loader leaves when its build is killed
    with pytest.warns(UserWarning, match="left by a kernel build that was killed"), smallgemm.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


@needs_kernel
def test_a_killed_build_does_not_hang_the_next_load(tmp_path):
    """torch's own loader waits forever on a `lock` file a killed build left; the next load must not."""
    import shutil
    import subprocess
    import sys

    built = smallgemm.build_directory(smallgemm.chosen_isa())
    copy = tmp_path / built.name
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns("specdistill.flock"))
    (copy / "lock").write_text("")
    code = "from decode.runners import smallgemm; assert smallgemm.kernel() is not None"
    env = {**__import__("os").environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "left by a kernel build that was killed" in r.stderr
    assert not (copy / "lock").exists()
