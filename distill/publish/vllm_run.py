"""Serve a target in vLLM alone, then with a draft as its speculative draft; write outputs, timings and counters.

    VLLM_PYTHON distill/publish/vllm_run.py REQUEST.json RESULT.json

Run by distill/publish/vllm_check.py as a script, under the interpreter that has vLLM: it imports only vLLM and
the standard library (not specdistill, whose transformers may differ from vLLM's). REQUEST.json:

    {"target": DIR, "draft": DIR, "gamma": int, "prompts": [[token ids], ...], "max_tokens": int,
     "dtype": "float32" | "bfloat16" | ..., "max_model_len": int, "method": "draft_model" | "eagle3"}

"method" is vLLM's speculative method: draft_model (the default) for a standalone draft, eagle3 for a feature head
(a speculators eagle3 folder, decode.models.feature_head).

RESULT.json: {"vllm": version, "target_alone": RUN, "speculative": RUN}, RUN = {"outputs": [[new token ids]],
"tokens": int, "seconds": float, "drafts", "draft_tokens", "accepted": vLLM's spec-decode counters over the timed
prompts (0 for the target alone)}. Both engines live in this one process, one after the other, each warmed up on
the first prompt before the timed pass; prompts run one at a time (batch 1), as the bundled decoder runs them.
"""

from __future__ import annotations

import gc
import json
import sys
import time

COUNTERS = {  # RUN key -> vLLM counter (vllm/v1/spec_decode/metrics.py)
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}


def counters(llm) -> dict[str, int]:
    """vLLM's spec-decode counters now (absent before the first speculative step: 0)."""
    seen = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}
    return {k: int(seen.get(name, 0)) for k, name in COUNTERS.items()}


def serve(req: dict, speculative: bool) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = {"method": req.get("method", "draft_model"), "model": req["draft"], "num_speculative_tokens": req["gamma"],
            **({"parallel_drafting": True} if req.get("parallel_drafting") else {})}
    llm = LLM(model=req["target"], dtype=req["dtype"], max_model_len=req["max_model_len"], enforce_eager=True,
              disable_log_stats=False, seed=0, speculative_config=spec if speculative else None)
    greedy = SamplingParams(temperature=0.0, max_tokens=req["max_tokens"], ignore_eos=False)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in req["prompts"]]
    llm.generate(prompts[:1], greedy, use_tqdm=False)  # warm-up: first-call allocations stay out of the timing
    before, outputs, tokens = counters(llm), [], 0
    start = time.perf_counter()
    for p in prompts:  # batch 1, one prompt after another
        out = llm.generate([p], greedy, use_tqdm=False)[0].outputs[0]
        outputs.append(list(out.token_ids))
        tokens += len(out.token_ids)
    seconds = time.perf_counter() - start
    after = counters(llm)
    llm.llm_engine.engine_core.shutdown()  # the engine runs in its own process: free it before the next one
    del llm
    gc.collect()
    return {"outputs": outputs, "tokens": tokens, "seconds": seconds, **{k: after[k] - before[k] for k in COUNTERS}}


def main(request_path: str, result_path: str) -> None:
    import vllm

    req = json.loads(open(request_path).read())
    result = {"vllm": vllm.__version__, "target_alone": serve(req, False), "speculative": serve(req, True)}
    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":  # vLLM spawns its engine processes, which re-import this file: only run here
    main(*sys.argv[1:3])
