"""The `vllm` check: serve the target in vLLM with the published draft as its speculative draft, for real.

A static look at config.json says nothing about whether vLLM will load the draft, keep the output lossless, or
accept what the bundled decoder accepts. So, on VLLM_PROMPTS fixed prompts (greedy, VLLM_NEW_TOKENS each), in a
subprocess under the interpreter that has vLLM (distill/publish/vllm_run.py):

    lossless    vLLM with the draft emits exactly vLLM's target alone (low precision: a divergence only at a
                near-tie of the target's logits within a calibrated ε, decode.drafting.lossless's rule, as in compat);
    α agrees    vLLM's counters, accepted / drafted tokens, against the bundled decoder's α on the same prompts
                within `alpha_tolerance` (see there);
    speed       tokens/s with the draft ÷ target alone, same prompts, same process, after a warm-up: stated on
                the card next to the bundled decoder's numbers, with a warning when it is below 1.

A standalone draft is served as `method: draft_model`; a feature head (a speculators eagle3 folder,
decode.models.feature_head.is_head_folder) as `method: eagle3`, after servable.head_problems finds nothing in its folder
that vLLM would read differently, and proven the same way (the bundled decoder runs the head with its HeadChain).

The check is skipped, saying so, only when vLLM is not installed in that interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

from decode.drafting import lossless
from decode.drafting.parallel import mask_token
from decode.drafting.speculative import generate
from decode.models.feature_head import is_head_folder
from decode.models.targets import eos_ids, load_draft
from decode.options import DecodeOptions
from decode.prompts import encode_prompt, read_prompts
from decode.runners.choice import runner_for
from distill.collect import vllm_engine
from distill.publish import servable

RUNNER = Path(__file__).with_name("vllm_run.py")
PROMPTS_FILE = Path(__file__).resolve().parents[1] / "data" / "heldout.jsonl"
VLLM_PROMPTS = 8  # the first prompts of the held-out set: enough drafted tokens for α to mean something
VLLM_NEW_TOKENS = 64
NUMERICS_ALLOWANCE = 0.02  # α points for draft argmax flips between vLLM's kernels and torch's (see alpha_tolerance)
TIMEOUT_S = 1800  # two engine loads (~1 min each on 2 CPU cores) plus the generations


def vllm_installed(python: str) -> bool:
    """Whether `python` can import vllm (collect.vllm_engine.importable_in)."""
    return vllm_engine.importable_in(python)


def check_prompts(tokenizer, n: int = VLLM_PROMPTS) -> list[list[int]]:
    """Token ids of the check prompts, chat template applied: both decoders get exactly these ids."""
    return [encode_prompt(tokenizer, row) for row in read_prompts(PROMPTS_FILE)[:n]]


def run_vllm(python: str, request: dict, timeout: int = TIMEOUT_S) -> dict:
    """vllm_run.py in a subprocess; its RESULT, or RuntimeError with the tail of its output."""
    with tempfile.TemporaryDirectory(prefix="specdistill-vllm-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        # on a CPU, vLLM reserves 4 GiB of KV cache by default; these checks need a few MiB
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", **os.environ}
        try:
            proc = subprocess.run([python, str(RUNNER), str(req), str(res)], capture_output=True, text=True,
                                  timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"vLLM did not finish within {timeout} s") from None
        if proc.returncode != 0 or not res.is_file():
            tail = [x for x in (proc.stderr or proc.stdout).strip().splitlines() if x.strip()][-3:]
            raise RuntimeError(f"vLLM exited with status {proc.returncode}: {' | '.join(tail)}")
        return json.loads(res.read_text())


@torch.inference_mode()
def our_run(target, tokenizer, draft, vocab_map, prompts: list[list[int]], max_tokens: int, gamma: int) -> dict:
    """The bundled decoder on the same prompts: outputs and summed counters (proposed, accepted, rounds)."""
    eos, total = eos_ids(target, tokenizer), {"outputs": [], "proposed": 0, "accepted": 0, "rounds": 0}
    for ids in prompts:
        # constant: α compared with vLLM's at this very γ (the adaptive default would mix γs)
        out, stats = generate(target, draft, ids, max_tokens, DecodeOptions(gamma=gamma, schedule="constant"),
                              eos_token_ids=eos, vocab_map=vocab_map)
        total["outputs"].append(out)
        for k in ("proposed", "accepted", "rounds"):
            total[k] += getattr(stats, k)
    return total


def alpha_tolerance(n_prompts: int, gamma: int, drafted: int, alpha: float) -> float:
    """How far vLLM's α may sit from ours on the same prompts, the same greedy outputs and the same draft.

    Both then run the same rounds and accept the same tokens, except:
    (1) at the end of each prompt: the bundled decoder shortens a proposal to the room left before max_tokens
        (γ-1, γ-2, ... 0), vLLM drafts γ every round and counts what it accepts past the end. That is at most
        B = γ(γ+1)/2 drafted, and as many accepted, tokens per prompt; with A, D our accepted / drafted counts,
        |A'/D' - A/D| = |(A' - A) - α(D' - D)| / D' <= (1 + α)·n·B / min(D, D');
    (2) a draft argmax that flips between vLLM's kernels and torch's at a near-tie: rare in float32;
        NUMERICS_ALLOWANCE covers about one flip per 50 drafted tokens.
    A draft vLLM runs wrongly (vocabulary, embeddings, positions, a missing bias) proposes other tokens and moves
    α by far more (to ~0 for a broken one). Measured: γ=3, 4 prompts × 64 tokens, SmolLM2-135M's 8k-vocabulary
    draft: 0.142 in vLLM vs 0.144 here, 534 vs 515 drafted, 178 rounds in both.
    """
    return (1 + alpha) * n_prompts * gamma * (gamma + 1) / 2 / max(drafted, 1) + NUMERICS_ALLOWANCE


def compare(result: dict, ours: dict, gamma: int, rule: str = "exact", epsilon: float = 0.0,
            margin=None) -> tuple[bool, str, dict]:
    """(ok, detail, numbers) from vLLM's RESULT and our_run's totals on the same prompts.

    Every prompt's output with the draft is judged against vLLM's target alone by decode.drafting.lossless's `rule`:
    margin(p, ref) -> the margin function (i, token) of prompt p (lossless.margin_fn), which the numeric rule needs
    to excuse a near-tie within `epsilon`. vLLM is not rerun from the target's prefix after an excused divergence
    (two more engine loads): the rest of that prompt is counted in numbers' `unchecked_tokens`.
    """
    alone, spec = result["target_alone"], result["speculative"]
    n = len(alone["outputs"])
    problems = []
    verdict = lossless.Verdict(rule, epsilon)
    for p, (ref, out) in enumerate(zip(alone["outputs"], spec["outputs"])):
        div = verdict.add(str(p), lossless.judge(ref, out, rule, epsilon, margin(p, ref) if margin else None))
        if div is not None and len(verdict.divergences) == 1:
            why = f" (margin {div['margin']} > ε {epsilon:.3g})" if rule == "numeric" and div["margin"] is not None else ""
            problems.append(f"vLLM with the draft differs from vLLM's target alone at new token {div['at']} of prompt "
                            f"{p}: {div['out']} vs {div['ref']}{why}")
    if not spec["draft_tokens"]:
        problems.append("vLLM drafted no tokens: the draft was not used")
    alpha = spec["accepted"] / spec["draft_tokens"] if spec["draft_tokens"] else 0.0
    alpha_ours = ours["accepted"] / ours["proposed"] if ours["proposed"] else 0.0
    tol = alpha_tolerance(n, gamma, min(ours["proposed"], spec["draft_tokens"]), alpha_ours)
    if spec["draft_tokens"] and abs(alpha - alpha_ours) > tol:
        problems.append(f"vLLM's acceptance rate {alpha:.3f} is not the bundled decoder's {alpha_ours:.3f} on the "
                        f"same prompts (tolerance ±{tol:.3f}): vLLM does not run the draft that was measured")
    tps = spec["tokens"] / spec["seconds"] if spec["seconds"] else 0.0
    base = alone["tokens"] / alone["seconds"] if alone["seconds"] else 0.0
    numbers = {
        "vllm": result.get("vllm"), "gamma": gamma, "prompts": n, "max_tokens": result.get("max_tokens"),
        "dtype": result.get("dtype"), "acceptance_rate": round(alpha, 4),
        "tau": round(1 + spec["accepted"] / spec["drafts"], 3) if spec["drafts"] else None,
        "tokens_per_s": round(tps, 2), "baseline_tokens_per_s": round(base, 2),
        "speedup": round(tps / base, 3) if base else None, "ours_acceptance_rate": round(alpha_ours, 4),
        "ours_tau": round((ours["accepted"] + ours["rounds"]) / ours["rounds"], 3) if ours["rounds"] else None,
        "alpha_tolerance": round(tol, 4), **verdict.as_dict(), "rounds": spec["drafts"],
        "outputs_identical": alone["outputs"] == spec["outputs"],
        "ours_rounds": ours["rounds"], "drafted": spec["draft_tokens"], "ours_drafted": ours["proposed"],
    }
    excused = (f" but for {len(verdict.excused_margins)} near-tie(s) within ε {epsilon:.3g} (the rest of those prompts "
               f"unchecked: {verdict.unchecked} tokens)" if verdict.excused_margins else "")
    detail = (f"vLLM {numbers['vllm']}, γ={gamma}, {n} prompts × {result.get('max_tokens')} tokens: greedy output "
              f"equals its target alone{excused}; α {alpha:.3f} vs bundled decoder {alpha_ours:.3f} (±{tol:.3f}); "
              f"{tps:.1f} vs {base:.1f} tokens/s = {numbers['speedup']}×")
    return (not problems), ("; ".join(problems) if problems else detail), numbers


def method(folder: str | Path) -> str:
    """vLLM's speculative method for a published folder: eagle3 for a feature head, else draft_model."""
    return "eagle3" if is_head_folder(folder) else "draft_model"


def vllm_dtype(target) -> str:
    """vLLM's dtype for the check: the target's working dtype (float32 on a CPU, bf16 on a GPU)."""
    return str(target.dtype).removeprefix("torch.")


def prove(folder: Path, target_path: str, target, tokenizer, gamma: int, python: str | None = None):
    """Run the vLLM check on a published folder: (status, detail, numbers or None), status "ok" | "fail" | "skip"."""
    python = python or sys.executable
    if os.sep in python:  # absolute, not resolved (a venv's python links to the base one): vLLM runs elsewhere
        python = str(Path(python).absolute())
    if not vllm_installed(python):
        return "skip", (f"skipped: vLLM is not installed for {python}; install vllm there (or pass --vllm-python) "
                        "to prove the draft in vLLM before publishing"), None
    how = method(folder)
    if how == "eagle3" and (problems := servable.head_problems(folder, target.config)):
        return "fail", f"vLLM's eagle3 would not serve this feature head as it was measured: {'; '.join(problems)}", None
    prompts = check_prompts(tokenizer)
    max_len = max(map(len, prompts)) + VLLM_NEW_TOKENS + 2 * gamma + 16
    # absolute: vLLM runs in a temporary folder, where the README's relative runs/... paths do not exist
    local = Path(target_path).exists()
    parallel = how == "draft_model" and is_parallel_folder(folder)  # one forward from mask tokens a round
    request = {"target": str(Path(target_path).absolute()) if local else target_path,
               "draft": str(Path(folder).absolute()), "gamma": gamma, "prompts": prompts,
               "max_tokens": VLLM_NEW_TOKENS, "dtype": vllm_dtype(target), "max_model_len": max_len, "method": how,
               **({"parallel_drafting": True} if parallel else {})}
    print(f"vllm: serving the target alone, then with the draft (method {how}{', parallel_drafting' * parallel}, "
          f"γ={gamma}), on {len(prompts)} prompts under {python}; two engine loads, minutes on a CPU")
    try:
        result = {**run_vllm(python, request), "max_tokens": VLLM_NEW_TOKENS, "dtype": request["dtype"]}
    except RuntimeError as e:
        return "fail", f"vLLM could not serve the target with this draft: {e}", None
    draft = load_draft(str(folder), target, tokenizer, device=str(target.device))
    ours = our_run(target, tokenizer, draft.model, draft.vocab_map, prompts, VLLM_NEW_TOKENS, gamma)

    # low precision: near-ties within the ε of our target's own forward paths are excused (decode.drafting.lossless)
    runner = runner_for(target)
    rule, eps = lossless.rule_and_epsilon(target.dtype, [runner], [(ids + out, len(ids)) for ids, out in zip(
        prompts[:lossless.CALIBRATION_PROMPTS], ours["outputs"])], lossless.verify_sizes(DecodeOptions(gamma=gamma)))
    ok, detail, numbers = compare(result, ours, gamma, rule, eps,
                                  lambda p, ref: lossless.margin_fn(runner, prompts[p], ref))
    return ("ok" if ok else "fail"), detail, {**numbers, "method": how, **({"parallel_drafting": True} if parallel else {})}


def is_parallel_folder(folder: str | Path) -> bool:
    """A published folder whose config.json names a mask token (a parallel draft, decode.drafting.parallel)."""
    path = Path(folder) / "config.json"
    return path.is_file() and mask_token(SimpleNamespace(**json.loads(path.read_text()))) is not None


# --- the card


def fmt(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


def card_section(vllm: dict | None, best: dict | None) -> str:
    """vLLM's own numbers next to the bundled decoder's, on the same prompts."""
    if not vllm:
        return ("## Measured in vLLM\n\nNot measured: vLLM was not installed where this draft was published, so "
                "it was not served in vLLM before upload.")
    spec = (best or {}).get("speculative", {})
    rows = [
        f"| vLLM {vllm.get('vllm')} | {vllm['acceptance_rate']:.3f} | {fmt(vllm.get('tau'), '.2f')} | "
        f"{vllm['tokens_per_s']:.1f} vs {vllm['baseline_tokens_per_s']:.1f} | {fmt(vllm.get('speedup'), '.2f')}× |",
        f"| bundled decoder, same prompts | {vllm['ours_acceptance_rate']:.3f} | {fmt(vllm.get('ours_tau'), '.2f')} "
        "| – | – |",
    ]
    if best:
        rows.append(f"| bundled decoder, evaluation above (γ = {best.get('gamma')}) | "
                    f"{fmt(spec.get('acceptance_rate'))} | {fmt(spec.get('tau'), '.2f')} | "
                    f"{fmt(spec.get('tokens_per_s'), '.1f')} vs {fmt(best.get('baseline', {}).get('tokens_per_s'), '.1f')} "
                    f"| {best['speedup']:.2f}× |")
    return "\n".join([
        "## Measured in vLLM",
        "",
        f"Before upload, vLLM {vllm.get('vllm')} served the target with this draft "
        f"(`method: {vllm.get('method', 'draft_model')}`{', `parallel_drafting: true`' * bool(vllm.get('parallel_drafting'))}, "
        f"γ = {vllm['gamma']}, {vllm.get('dtype')}) on {vllm['prompts']} held-out prompts, greedy, up to "
        f"{vllm.get('max_tokens')} new tokens each, one at a time: its output equals vLLM's target alone. Speedup is "
        "tokens/s with the draft ÷ the target alone, same prompts, same process, after a warm-up. α is vLLM's "
        "accepted ÷ drafted tokens; the bundled decoder's α on the same prompts agreed within "
        f"±{vllm['alpha_tolerance']:.3f}.",
        "",
        "| | acceptance rate α | τ | tokens/s (draft vs target alone) | speedup |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ])
