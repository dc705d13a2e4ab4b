"""Compatibility checks on an assembled draft folder, run by `distill.publish` before anything is uploaded.

Each check answers one question a user of the published draft would otherwise find out the hard way:

    loads       AutoModelForCausalLM.from_pretrained(folder) works, and every weight transformers expects is in
                the file (a missing one is silently initialised at random: the "random embeddings" failure).
    tokenizer   the tokenizer shipped with the draft, and the one the draft was trained with, are the target's.
    lossless    a short greedy target.generate(assistant_model=draft) equals target.generate alone under
                decode.drafting.lossless's rule: token for token in float32, up to calibrated near-ties in bf16/fp16 (the
                folder's draft is always full-vocabulary; see servable below).
    servable    a reduced-vocabulary draft only: the expanded draft in the folder proposes exactly what the
                reduced one in reduced/ (distill/publish/servable.py) proposes, mapped to target ids, with no
                out-of-vocabulary token ever winning; reduced/ loads in the bundled decoder and is lossless there.
    random_init no weight matrix is still at its random initialisation (heuristic, see `looks_like_init`).
    vllm        the config has what vLLM needs (a supported architecture, the target's vocab size,
                max_position_embeddings >= the target's), then vLLM serves the target with the draft for real
                (distill/publish/vllm_check.py); skipped, saying so, only where vLLM is not installed.

A feature head (EAGLE-3 style, a speculators eagle3 folder: decode.models.feature_head) is not a causal LM, so
transformers cannot load it or use it as `assistant_model=`; its checks are (`run_head_checks`):

    loads       the bundled decoder's load_draft loads it (every tensor its config names, shaped for this target).
    tokenizer   as above.
    lossless    the bundled decoder with the head equals the target alone (greedy, the same prompts as above).
    random_init as above, against the target's initializer_range (the head's layers start from it).
    vllm        servable.head_problems finds nothing vLLM's eagle3 would read differently, then vLLM serves the
                target with the head as `method: eagle3` for real (vllm_check.prove).

`run_checks` returns one `Check` per question; publish refuses to upload when any of them failed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from decode.errors import UserError
from decode.models.draft_folder import read_vocab_map
from decode.models.feature_head import is_head_folder
from decode.models.targets import check_tokenizers, load_draft
from decode.prompts import encode_prompt
from distill.publish import servable, vllm_check
from distill.publish.behaviour import (
    LOSSLESS_NEW_TOKENS,
    LOSSLESS_PROMPTS,
    Check,
    check_lossless,
    check_random_init,
)

# Decoder-only architectures vLLM serves (a subset of vllm/model_executor/models/registry.py): the families a
# draft cut from or distilled for a common target will have. A draft is loaded by vLLM through this name.
VLLM_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Phi3ForCausalLM",
        "PhiForCausalLM",
        "GPT2LMHeadModel",
        "GPTBigCodeForCausalLM",
        "GPTJForCausalLM",
        "GPTNeoXForCausalLM",
        "OPTForCausalLM",
        "FalconForCausalLM",
        "StableLmForCausalLM",
        "Starcoder2ForCausalLM",
        "OlmoForCausalLM",
        "Olmo2ForCausalLM",
        "GraniteForCausalLM",
        "CohereForCausalLM",
        "InternLM2ForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Glm4ForCausalLM",
        "SmolLM3ForCausalLM",
        "ExaoneForCausalLM",
    }
)


# --- loads


def load_published(folder: Path):
    """(model or None, Check): the folder loads with AutoModelForCausalLM and every expected weight is in it."""
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, output_loading_info=True
        )
    except Exception as e:  # any failure here is exactly what the check reports
        return None, Check(
            "loads",
            False,
            f"AutoModelForCausalLM.from_pretrained failed: {type(e).__name__}: {str(e).splitlines()[0]}",
        )
    problems = []
    if info.get("missing_keys"):
        problems.append(
            f"weights missing from model.safetensors, so transformers initialised them at random: {sorted(info['missing_keys'])[:6]}"
        )
    if info.get("unexpected_keys"):
        problems.append(
            f"weights in model.safetensors that {type(model).__name__} ignores: {sorted(info['unexpected_keys'])[:6]}"
        )
    if info.get("mismatched_keys"):
        problems.append(
            f"weights whose shape does not match config.json: {sorted(info['mismatched_keys'])[:6]}"
        )
    if problems:
        return model.eval(), Check("loads", False, "; ".join(problems))
    return model.eval(), Check(
        "loads", True, f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters"
    )


def load_head(folder: Path, target, target_tok):
    """(FeatureHead or None, Check): the folder loads in the bundled decoder as a feature head for this target, in
    the target's dtype on its device (FeatureHead.load refuses a missing, unexpected or mis-shaped tensor)."""
    try:
        head = load_draft(str(folder), target, target_tok, device=str(target.device)).model
    except Exception as e:  # any failure here is exactly what the check reports
        return None, Check("loads", False, f"the bundled decoder's load_draft failed on the feature head: "
                                           f"{type(e).__name__}: {str(e).splitlines()[0]}")
    vocab = (f"{head.draft_vocab_size:,} of {head.config.vocab_size:,} ids" if head.d2t is not None
             else f"full ({head.config.vocab_size:,} ids)")
    n = sum(p.numel() for p in head.parameters())
    return head.eval(), Check("loads", True, f"FeatureHead (speculators eagle3), {n:,} parameters, features from "
                                             f"target layers {head.feature_layers}, draft vocabulary {vocab}")


# --- tokenizer


def check_tokenizer(folder: Path, draft_dir: Path, target_tok, vocab_map: list[int] | None) -> Check:
    """The folder's tokenizer (copied from the target) and the draft's own (from training) equal the target's."""
    sources = [("published folder", folder)]
    if any((draft_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        sources.append(("draft checkpoint", draft_dir))
    for label, path in sources:
        try:
            tok = AutoTokenizer.from_pretrained(path)
        except Exception as e:
            return Check(
                "tokenizer", False, f"the {label}'s tokenizer does not load: {str(e).splitlines()[0]}"
            )
        try:
            # a reduced-vocabulary draft still ships the full target tokenizer, so compare in full
            check_tokenizers(target_tok, tok)
        except UserError as e:
            return Check("tokenizer", False, f"{label}: {e}")
        if getattr(tok, "chat_template", None) != getattr(target_tok, "chat_template", None):
            return Check("tokenizer", False, f"{label}: the chat template differs from the target's")
    if vocab_map is not None:
        try:
            check_tokenizers(target_tok, None, vocab_map)
        except UserError as e:
            return Check("tokenizer", False, str(e))
    return Check(
        "tokenizer", True, f"identical to the target's ({len(target_tok):,} tokens, same chat template)"
    )


# --- lossless


# --- random init


# --- vLLM


def check_vllm_config(config, target_config) -> Check:
    """What vLLM needs to load the folder as `speculative_config={"model": ...}`, read off config.json; a failure
    here saves the minutes of an engine load that would fail anyway."""
    problems = []
    archs = getattr(config, "architectures", None) or []
    if not archs:
        problems.append("config.json has no `architectures`; vLLM picks the model class from it")
    elif archs[0] not in VLLM_ARCHITECTURES:
        problems.append(
            f"architecture {archs[0]} is not one vLLM serves (e.g. {', '.join(sorted(VLLM_ARCHITECTURES)[:4])}, ...)"
        )
    if config.vocab_size != target_config.vocab_size:
        problems.append(
            f"vocab_size {config.vocab_size} differs from the target's {target_config.vocab_size}"
        )
    mine = getattr(config, "max_position_embeddings", None)
    theirs = getattr(target_config, "max_position_embeddings", None)
    if mine is None:
        problems.append("config.json has no max_position_embeddings")
    elif theirs is not None and mine < theirs:
        problems.append(
            f"max_position_embeddings {mine} < the target's {theirs}: vLLM refuses drafts shorter than the target"
        )
    if problems:
        return Check("vllm", False, "; ".join(problems))
    return Check("vllm", True, f"{archs[0]}, max_position_embeddings {mine}")


def check_head_config(folder: Path, target_config) -> Check:
    """A feature head's static vLLM check: nothing in its folder that vLLM's eagle3 would serve differently from
    the bundled decoder, or refuse (servable.head_problems; read off the files, quick)."""
    problems = servable.head_problems(folder, target_config)
    if problems:
        return Check("vllm", False, "vLLM's eagle3 would not serve this feature head as it was measured: "
                                    + "; ".join(problems))
    return Check("vllm", True, "eagle3 speculators config")


def check_vllm(folder: Path, draft, target, target_tok, target_path: str | None, gamma: int,
               vllm_python: str | None, earlier: list[Check]) -> Check:
    """The config pre-check, then the real vLLM run (vllm_check.prove) when every earlier check passed. A feature
    head's pre-check is servable.head_problems (what vLLM's eagle3 would read differently), not the architecture
    list and sizes of a standalone draft."""
    static = check_head_config(folder, target.config) if is_head_folder(folder) else check_vllm_config(
        draft.config, target.config)
    if not static.ok:
        return static
    if not all(c.ok for c in earlier):
        return Check("vllm", False, "not run: an earlier check failed")
    if target_path is None:  # a local folder or a Hub id: vLLM loads either
        return Check("vllm", False, "not run: no target path or Hub id to give vLLM")
    status, detail, numbers = vllm_check.prove(folder, target_path, target, target_tok, gamma, vllm_python)
    return Check("vllm", status != "fail", detail, skipped=status == "skip", numbers=numbers)


# --- all of them


def check_servable(folder: Path, draft, target, target_tok, gamma: int) -> tuple[list[Check], object]:
    """A reduced draft's two forms: the expanded one (loaded) proposes what reduced/ does on the target's greedy
    continuations of the lossless prompts; reduced/ loads in the bundled decoder and is lossless there.
    Returns the checks and the reduced model (None when it does not load)."""
    try:
        reduced = load_draft(str(folder / servable.REDUCED_DIR), target, target_tok, device=str(target.device))
    except UserError as e:
        return [Check("servable", False, f"{servable.REDUCED_DIR}/ does not load in the bundled decoder: {e}")], None
    greedy = dict(do_sample=False, max_new_tokens=LOSSLESS_NEW_TOKENS, temperature=None, top_p=None, top_k=None)
    seqs = []
    with torch.inference_mode():
        for text in LOSSLESS_PROMPTS:
            x = torch.tensor([encode_prompt(target_tok, {"messages": [{"role": "user", "content": text}]})],
                             device=target.device)
            seqs.append(target.generate(x, attention_mask=torch.ones_like(x), **greedy)[0].tolist())
    ok, detail = servable.same_proposals(draft, reduced.model, reduced.vocab_map, seqs)
    lossless = check_lossless(target, target_tok, reduced.model, reduced.vocab_map.tolist(), gamma)
    lossless.name = "lossless_reduced"
    return [Check("servable", ok, detail), lossless], reduced.model


def run_checks(folder: Path, draft_dir: Path, target, target_tok, gamma: int, target_path: str | None = None,
               vllm_python: str | None = None) -> list[Check]:
    """Every check on the assembled folder; a check that cannot run because the model did not load fails too.

    target_path: the target's local folder for vLLM (None: the vLLM check fails as not run)."""
    if is_head_folder(folder):
        return run_head_checks(folder, draft_dir, target, target_tok, gamma, target_path, vllm_python)
    vocab_map = read_vocab_map(folder)  # None for every folder publish assembles; a hand-made one may have a map
    draft, loads = load_published(folder)
    checks = [loads, check_tokenizer(folder, draft_dir, target_tok, vocab_map)]
    if draft is None:
        return checks + [
            Check(n, False, "not run: the model does not load") for n in ("lossless", "random_init", "vllm")
        ]
    draft.to(target.device, target.dtype)  # the checks run the draft as decoding will: beside the target, in its dtype
    checks.append(check_lossless(target, target_tok, draft, vocab_map, gamma))
    trained, trained_map = draft, vocab_map
    if (folder / servable.REDUCED_DIR).is_dir():
        more, reduced = check_servable(folder, draft, target, target_tok, gamma)
        checks += more
        if reduced is not None:  # the trained form: the expanded one's repeated rows would confuse the heuristic
            trained, trained_map = reduced, read_vocab_map(folder / servable.REDUCED_DIR)
    checks.append(check_random_init(trained, target, trained_map))
    checks.append(check_vllm(folder, draft, target, target_tok, target_path, gamma, vllm_python, list(checks)))
    return checks


def run_head_checks(folder: Path, draft_dir: Path, target, target_tok, gamma: int, target_path: str | None = None,
                    vllm_python: str | None = None) -> list[Check]:
    """A feature head's checks (module docstring): loads and lossless in the bundled decoder, tokenizer, random
    init against the target's initializer_range (the head's matrices start as normal(0, r) of the target's r),
    vLLM's eagle3. Transformers' assistant_model and the expanded/reduced split do not apply to a head."""
    head, loads = load_head(folder, target, target_tok)
    checks = [loads, check_tokenizer(folder, draft_dir, target_tok, None)]
    if head is None:
        return checks + [
            Check(n, False, "not run: the feature head does not load") for n in ("lossless", "random_init", "vllm")
        ]
    checks.append(check_lossless(target, target_tok, head, None, gamma))
    ids = head.draft_ids()
    r = getattr(target.config, "initializer_range", None) or getattr(head.config, "initializer_range", None)
    checks.append(check_random_init(head, target, ids.tolist() if ids is not None else None, r))
    checks.append(check_vllm(folder, head, target, target_tok, target_path, gamma, vllm_python, list(checks)))
    return checks
