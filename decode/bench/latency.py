"""Measuring c and v(γ) on the device in use, through the same runners the decoder uses (decode.bench.costmodel inputs)."""

from __future__ import annotations

import functools
import time

import torch

from decode.drafting.parallel import mask_token
from decode.runners.choice import runner_for


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _seconds(device: torch.device, fn) -> float:
    """Seconds fn() takes: the wall clock on a CPU; on a GPU, CUDA events around it (as the decoder times its
    phases in a run, decode.drafting.proposers.Clock), so isolated and in-run steps are measured the same way."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


@torch.inference_mode()
def step_latency(model, context: int, n_tokens: int, repeats: int = 10, warmup: int = 3,
                 weights: str = "float32") -> float:
    """Median seconds of one forward of n_tokens after a cached context of `context` tokens (logits for all).
    weights: the runner a draft uses with draft_weights (decode.runners.choice.runner_for)."""
    runner = runner_for(model, weights=weights)
    vocab = runner.config.vocab_size
    cache = runner.new_cache(context + n_tokens + 1)
    runner.forward(torch.randint(0, vocab, (context,)).tolist(), cache, 1)
    step = torch.randint(0, vocab, (n_tokens,)).tolist()
    times = []
    for i in range(warmup + repeats):
        secs = _seconds(runner.device, lambda: runner.forward(step, cache, n_tokens))
        if i >= warmup:
            times.append(secs)
        cache.crop(-n_tokens)
    return sorted(times)[len(times) // 2]


def weight_bytes(model) -> int:
    """Bytes a one-token forward of an HF model must read: every parameter once (a tied head counted once), less
    an input embedding that is not also the head (a forward reads one row of it)."""
    params = {p.data_ptr(): p for p in model.parameters()}  # tied tensors share storage
    total = sum(p.numel() * p.element_size() for p in params.values())
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    if emb is not None and (head is None or emb.weight.data_ptr() != head.weight.data_ptr()):
        total -= emb.weight.numel() * emb.weight.element_size()
    return total


@functools.cache
@torch.inference_mode()
def stream_seconds(nbytes: int, device: str, repeats: int = 5) -> float:
    """Median seconds to read `nbytes` once on `device` (a float32 sum over a buffer that size, on torch's
    threads, after one warm-up): what streaming the target's weights costs on this machine, the floor of a
    memory-bound one-token step. Once per process and size (a property of the machine, not of a draft)."""
    buf = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        buf.sum()
        _sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    del buf
    return sorted(times)[len(times) // 2]


@torch.inference_mode()
def verify_ratio(model, context: int, n_tokens: int, repeats: int = 10, warmup: int = 3) -> float:
    """v: seconds of an n_tokens forward ÷ seconds of a one-token forward, after the same cached context.
    The two are timed back to back, alternating, and the median of the per-pair ratios is taken, so a slow
    spell of a shared machine moves both halves of a pair alike instead of one γ's whole measurement."""
    runner = runner_for(model)
    vocab = runner.config.vocab_size
    cache = runner.new_cache(context + n_tokens + 1)
    runner.forward(torch.randint(0, vocab, (context,)).tolist(), cache, 1)
    one, many = torch.randint(0, vocab, (1,)).tolist(), torch.randint(0, vocab, (n_tokens,)).tolist()
    ratios = []
    for i in range(warmup + repeats):
        secs = []
        for ids in (one, many):
            secs.append(_seconds(runner.device, lambda: runner.forward(ids, cache, len(ids))))  # noqa: B023
            cache.crop(-len(ids))
        if i >= warmup:
            ratios.append(secs[1] / secs[0])
    return sorted(ratios)[len(ratios) // 2]


def measure(target, draft, gammas: list[int], context: int = 128, repeats: int = 10,
            draft_weights: str = "float32", known_v: dict[int, float] | None = None) -> dict:
    """c (draft/target single-token latency) and v(γ) for each γ (paired with one-token forwards,
    verify_ratio), with the raw latencies in ms. A feature head (decode.models.feature_head) is timed like any draft, one
    head position after a cached context (its HeadRunner; draft_weights do not apply to it). known_v: v(γ) already
    measured on this target in this run (v is the target's alone; several drafts share it), reused as is."""
    t1 = step_latency(target, context, 1, repeats)
    d1 = step_latency(draft, context, 1, repeats, weights=draft_weights) if draft is not None else None
    # a parallel draft (decode.drafting.parallel) runs one forward of γ tokens a round: timed at each γ
    blocks = ({g: step_latency(draft, context, g, repeats, weights=draft_weights) for g in sorted(set(gammas)) if g >= 1}
              if draft is not None and mask_token(getattr(draft, "config", None)) is not None else None)
    nbytes = weight_bytes(target)
    stream = stream_seconds(nbytes, str(runner_for(target).device))
    known_v = known_v or {}
    v = {g: known_v[g] if g in known_v else verify_ratio(target, context, g + 1, repeats)
         for g in sorted(set(gammas)) if g >= 1}
    return {
        "context": context,
        "repeats": repeats,  # timed pairs behind each median
        "target_step_ms": round(t1 * 1e3, 3),
        # the same step against reading the target's weights once on this machine (stream_seconds): near 1 the
        # step is memory-bound, as a batch-1 step should be; well above 1, time goes to something else
        "weight_MB": round(nbytes / 1e6, 1),
        "weight_stream_ms": round(stream * 1e3, 3),
        "stream_GBps": round(nbytes / stream / 1e9, 2),
        "target_step_vs_stream": round(t1 / stream, 3),
        "draft_step_ms": round(d1 * 1e3, 3) if d1 is not None else None,
        "c": round(d1 / t1, 4) if d1 is not None else None,
        **({"draft_block_ms": {str(g): round(x * 1e3, 3) for g, x in blocks.items()},
            "c_block": {str(g): round(x / t1, 4) for g, x in blocks.items()}} if blocks else {}),
        # how the target multiplies a single token, a prompt and a verification here (decode.runners: the faster of
        # the kernel and torch's matmul, timed when the runner was built), and which kernel build (decode.runners.smallgemm)
        "target_matmul": {"one_token": getattr(runner_for(target), "one_row", "torch"),
                          "prompt": getattr(runner_for(target), "prompt", "torch"),
                          "verify": getattr(runner_for(target), "verify", "torch"),
                          "kernel_isa": _kernel_isa(runner_for(target)),
                          "kernel_prefetch_bytes": getattr(runner_for(target), "prefetch", None)},
        "v": {str(g): round(x, 4) for g, x in v.items()},
    }


def _kernel_isa(runner) -> str | None:
    """Which decode.runners.smallgemm build the runner's kernel paths use (None: no kernel in this runner)."""
    packed = getattr(getattr(runner, "head", None), "packed", None)
    return packed.isa if packed is not None else None
