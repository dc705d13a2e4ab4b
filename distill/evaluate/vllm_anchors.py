"""vLLM's own numbers next to ours (`python -m distill.evaluate --anchors vllm`): the target alone, the target with
each evaluated draft (speculative method draft_model; eagle3 for a feature head) and with vLLM's n-gram prompt
lookup, same prompts, same max_new_tokens, greedy, one prompt at a time (our decoder's setting), each after a
warm-up.

Everything runs in one child process (`python -m distill.evaluate.vllm_anchors REQUEST.json RESULT.json`) so the
ratios are measured under the same conditions, while the evaluation's own process keeps its transformers target.
Each setting is one vLLM engine, built and released in turn (an engine's speculative method is fixed at start).
α and τ come from vLLM's spec-decode counters: α = accepted / drafted tokens, τ = 1 + accepted / drafts.

A reduced-vocabulary draft (draft_vocab.json) speaks other ids than the target, which draft_model cannot serve;
its anchor says so instead of failing (distill.publish makes a servable export). A draft with its own tokenizer is
served with use_heterogeneous_vocab (vLLM's greedy draft over the vocabularies' intersection, its context mapped id by
id, not re-tokenized), and with the hybrid KV cache manager off, which a draft of a sliding-window target such as
Gemma 3 needs in 0.32 (else "All drafting layers should belong to the same kv cache group"). A feature head folder (the
speculators eagle3 format, decode.models.feature_head) is served as vLLM serves those: speculative method eagle3, its
reduced vocabulary included (the folder's d2t/t2d).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from decode.drafting.parallel import MASK_FIELDS
from decode.errors import UserError
from decode.models import packaged
from decode.models.draft_folder import VOCAB_MAP_FILE
from decode.models.feature_head import is_head_folder
from decode.models.targets import DEFAULT_TARGET, resolve
from distill.collect import vllm_engine

# vLLM's n-gram proposer set like transformers' prompt-lookup anchor: match the last 2 tokens, down to 1
NGRAM = {"prompt_lookup_min": 1, "prompt_lookup_max": 2}


def method(spec: str) -> str:
    """vLLM's speculative method for a draft folder: eagle3 for a feature head, draft_model for a standalone draft."""
    return "eagle3" if not spec.startswith("layers:") and is_head_folder(serve_folder(spec)) else "draft_model"


def serve_folder(spec: str) -> str:
    """The folder vLLM loads for a draft spec: a packaged model's name (`default`, gemma3-270m) is its converted folder."""
    return resolve(spec) if spec == DEFAULT_TARGET or spec in packaged.MODELS else spec


def servable(spec: str) -> str | None:
    """None when vLLM can serve this draft as it is (method()), else the reason it cannot."""
    if spec.startswith("layers:"):
        return "an untrained layer cut made at load time, not a model folder vLLM can load"
    folder = Path(serve_folder(spec))
    if is_head_folder(folder):  # eagle3 takes the head's own vocabulary map
        return _head_servable(folder)
    if (folder / VOCAB_MAP_FILE).is_file():
        return ("not servable as is: a reduced-vocabulary draft (draft_vocab.json) speaks other token ids than the "
                "target, and vLLM's draft_model needs the target's vocabulary; serve the export distill.publish makes")
    if not (folder / "config.json").is_file():
        return f"not a model folder (no config.json in {folder})"
    return None


def _parallel(folder: str) -> bool:
    """A parallel draft's folder: its config.json names a mask token (decode.drafting.parallel.MASK_FIELDS), which vLLM
    serves with parallel_drafting."""
    path = Path(folder) / "config.json"
    return path.is_file() and any(isinstance(json.loads(path.read_text()).get(k), int) for k in MASK_FIELDS)


def _head_servable(folder: Path) -> str | None:
    """vLLM 0.32's eagle3 head sizes its fc for transformer_layer_config.num_aux_hidden_states feature layers, 3
    when that is unset (the top-level eagle_aux_hidden_state_layer_ids pick the target's layers only); a head
    reading another number of layers then fails at load (weights of size (H, 2H) into (H, 3H), seen here)."""
    cfg = json.loads((folder / "config.json").read_text())
    layers = cfg.get("eagle_aux_hidden_state_layer_ids") or []
    n = (cfg.get("transformer_layer_config") or {}).get("num_aux_hidden_states") or 3
    if len(layers) != n:
        return (f"not servable as is: this feature head reads {len(layers)} target layers ({layers}) and vLLM's "
                f"eagle3 builds its fc for {n} (transformer_layer_config.num_aux_hidden_states)")
    return None


def request(target_folder: str, encoded: list[list[int]], drafts: list[tuple[str, str]], gamma: int,
            max_new_tokens: int, eos: list[int], dtype: str, seed: int, other_tokenizer: list[str] = ()) -> dict:
    """What the child measures: drafts as (folder, report label); other_tokenizer: those with their own tokenizer."""
    return {"target": target_folder, "prompts": encoded, "drafts": [list(d) for d in drafts], "gamma": gamma,
            "max_new_tokens": max_new_tokens, "eos": sorted(eos), "dtype": dtype, "seed": seed,
            "other_tokenizer": list(other_tokenizer)}


def measure(req: dict, timeout_s: float | None = None, python: str | None = None) -> dict:
    """Run the child (under `python`, default this interpreter) on `req`; its result, or {"error": ...} when it
    failed (the evaluation keeps its own numbers)."""
    with tempfile.TemporaryDirectory(prefix="vllm-anchors-") as tmp:
        src, dst = Path(tmp) / "request.json", Path(tmp) / "result.json"
        src.write_text(json.dumps(req))
        cmd = [python or sys.executable, "-m", "distill.evaluate.vllm_anchors", str(src), str(dst)]
        n = 1 + len(req["drafts"]) + 1
        print(f"vLLM anchors: {n} engines in one child process (its log is kept only on failure)", file=sys.stderr,
              flush=True)
        log = Path(tmp) / "child.log"
        with open(log, "w") as f:  # vLLM's log is long; the last line is what failed (our one-line error included)
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        if code != 0 or not dst.is_file():
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [f"exit status {code}"]
            return {"error": f"the vLLM anchor process failed: {tail[0]}"}
        return json.loads(dst.read_text())


def anchor(target: str, drafts: list[tuple[str, str]], entries: list[dict], encoded: list[list[int]], *, gamma: int,
           max_new_tokens: int, eos, dtype: str, seed: int, python: str | None = None) -> dict:
    """report.json's `vllm` anchor: vLLM's numbers (the child's), each draft in `drafts` order with vLLM's numbers
    or why vLLM cannot serve it, and next to them our own α, τ, speedup for the same draft and γ."""
    serve = [(d, label) for d, label in drafts if servable(d) is None]
    other = [e["draft"] for e in entries if e.get("draft_kind") == "other_tokenizer"]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # our cached blocks, so the child's vLLM finds them free (vllm_engine.gpu_share)
    result = measure(request(resolve(target), encoded, serve, gamma, max_new_tokens, list(eos), dtype, seed, other),
                     python=python)
    measured = {e["draft"]: e for e in result.get("drafts", [])}
    result["drafts"] = [measured.get(d) or {"label": label, "draft": d, "method": method(d), "gamma": gamma,
                                            **({"not_servable": servable(d)} if servable(d) else
                                               {"error": "not measured (see error)"})}
                        for d, label in drafts]
    for e in result["drafts"]:
        e["ours"] = ours(entries, e["draft"], gamma)
    return result


def ours(entries: list[dict], draft: str, gamma: int) -> dict | None:
    """Our decoder's numbers for this draft at γ (no lookup, a chain: what vLLM's draft_model does)."""
    e = next((e for e in entries if e["draft"] == draft and e["gamma"] == gamma and not e.get("lookup")
              and not e.get("tree_nodes")), None)
    if e is None:
        return None
    s = e["speculative"]
    return {"acceptance_rate": s["acceptance_rate"], "tau": s["tau"], "tokens_per_s": s["tokens_per_s"],
            "speedup": e["speedup"]}


def _run_one(req: dict, speculative: dict | None, reference: list[list[int]] | None) -> tuple[dict, list[list[int]]]:
    """One engine: the target alone (speculative None) or with a speculative method; its numbers and outputs."""
    prompts = req["prompts"]
    max_len = vllm_engine.model_len([len(p) for p in prompts], req["max_new_tokens"], 1 << 30)
    hetero = bool(speculative and speculative.get("use_heterogeneous_vocab"))
    llm = vllm_engine.build_llm(req["target"], max_model_len=max_len, dtype=req["dtype"], seed=req["seed"],
                                speculative_config=speculative, log_stats=True,
                                engine_args={"disable_hybrid_kv_cache_manager": True} if hetero else None)
    params = vllm_engine.sampling_params(max_new_tokens=req["max_new_tokens"], temperature=0.0, top_k=0, top_p=1.0,
                                         k=0, eos=set(req["eos"]))
    llm.generate([{"prompt_token_ids": prompts[0]}], params, use_tqdm=False)  # warm-up, outside the counters
    before = vllm_engine.spec_counters(llm)
    outs, seconds = _timed_after_warmup(llm, prompts, params)
    after = vllm_engine.spec_counters(llm)
    tokens = sum(len(o) for o in outs)
    res = {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 3)}
    if speculative:
        res.update(vllm_engine.spec_stats(before, after))
    if reference is not None:
        res["outputs_matching_target"] = sum(a == b for a, b in zip(outs, reference))
    vllm_engine.shutdown(llm)
    return res, outs


def _timed_after_warmup(llm, prompts, params) -> tuple[list[list[int]], float]:
    """Greedy outputs of each prompt, one at a time (batch 1, as our decoder runs); (outputs, seconds)."""
    outs, t0 = [], time.perf_counter()
    for ids in prompts:
        outs.append(list(llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0].token_ids))
    return outs, time.perf_counter() - t0


def run_all(req: dict) -> dict:
    """The child's work: target alone, n-gram, then each servable draft; a setting vLLM refuses is recorded."""
    import vllm

    g = req["gamma"]
    base, reference = _run_one(req, None, None)
    result = {"engine": f"vLLM {vllm.__version__}", "gamma": g, "prompts": len(req["prompts"]),
              "max_new_tokens": req["max_new_tokens"], "batch": 1, "dtype": vllm_engine.vllm_dtype(req["dtype"]),
              "target_alone": base, "drafts": []}
    settings = [("ngram", None, {"method": "ngram", "num_speculative_tokens": g, **NGRAM})]
    other = set(req.get("other_tokenizer", ()))
    settings += [(label, folder, {"method": method(folder), "model": serve_folder(folder), "num_speculative_tokens": g,
                                  **({"use_heterogeneous_vocab": True} if folder in other else {}),
                                  **({"parallel_drafting": True} if _parallel(serve_folder(folder)) else {})})
                 for folder, label in req["drafts"]]
    for label, folder, spec in settings:
        entry = {"label": label, "draft": folder, "method": spec["method"], "gamma": g}
        try:
            numbers, _ = _run_one(req, spec, reference)
            entry.update(numbers, speedup_vs_vllm_target_alone=round(numbers["tokens_per_s"] / base["tokens_per_s"], 4))
        except UserError as e:
            entry["error"] = str(e)
        if folder is None:
            result["ngram"] = {**entry, **NGRAM}
        else:
            result["drafts"].append(entry)
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit("usage: python -m distill.evaluate.vllm_anchors REQUEST.json RESULT.json (distill.evaluate starts it)")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        result = run_all(json.loads(Path(argv[0]).read_text()))
    except UserError as e:
        sys.exit(f"error: {e}")
    Path(argv[1]).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
