"""Publish's checks that run the draft: lossless in transformers' assisted generation against the target alone,
and not a randomly initialised model (weights that still look like their init)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decode.drafting import lossless
from decode.drafting.speculative import generate
from decode.models.draft_folder import assistant_config
from decode.models.feature_head import FeatureHead
from decode.models.targets import eos_ids
from decode.options import DecodeOptions
from decode.prompts import encode_prompt
from decode.runners.choice import runner_for
from decode.runners.hf import HFRunner


# Short, fixed prompts for the lossless check: enough to cross several verification rounds, cheap on CPU.
@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # ok, but not run (vLLM not installed): said on the card and in the output
    numbers: dict | None = None  # measured along the way (vLLM's α, τ, tokens/s), for the card


LOSSLESS_PROMPTS = (
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
)


LOSSLESS_NEW_TOKENS = 24


@torch.inference_mode()
def check_lossless(
    target,
    tokenizer,
    draft,
    vocab_map: list[int] | None,
    gamma: int,
    max_new_tokens: int = LOSSLESS_NEW_TOKENS,
) -> Check:
    """Greedy speculative output must equal the target's own greedy output under decode.drafting.lossless's rule: token for
    token in float32; in bf16/fp16 a divergence is excused only at a near-tie of the target's logits within the ε
    calibrated here (then the check goes on from the target's prefix).

    A full-vocabulary HF draft runs in transformers' assisted generation, against transformers' generate; a
    reduced-vocabulary draft (vocab_map) or a feature head (which carries its own map) in the bundled decoder,
    against the bundled decoder's target alone (same forward code, so only speculation differs)."""
    head = isinstance(draft, FeatureHead)
    bundled = head or vocab_map is not None
    how = ("transformers assisted generation" if not bundled else
           "bundled decoder (feature head, EAGLE-3)" if head else "bundled decoder (reduced vocabulary)")
    if not bundled:
        draft.generation_config = assistant_config(draft.generation_config, gamma)
    eos = eos_ids(target, tokenizer)
    vm = torch.tensor(vocab_map, dtype=torch.long, device=target.device) if vocab_map is not None else None

    def decode(ids: list[int], n: int, with_draft: bool = True) -> tuple[list[int], None]:
        if bundled:
            options = DecodeOptions(gamma=gamma, schedule="constant")  # the γ this check states, every round
            return generate(target, draft if with_draft else None, ids, n, options, eos_token_ids=eos,
                            vocab_map=vm if with_draft else None)[0], None
        x = torch.tensor([ids], device=target.device)
        y = target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, temperature=None,
                            top_p=None, top_k=None, **({"assistant_model": draft} if with_draft else {}))
        return y[0, len(ids):].tolist(), None

    runner = runner_for(target) if bundled else HFRunner(target)
    try:
        runs = []
        for text in LOSSLESS_PROMPTS:
            ids = encode_prompt(tokenizer, {"messages": [{"role": "user", "content": text}]})
            runs.append((text, ids, decode(ids, max_new_tokens, False)[0], decode(ids, max_new_tokens)[0]))
        rule, eps = lossless.rule_and_epsilon(target.dtype, [runner], [(ids + ref, len(ids)) for _, ids, ref, _ in runs],
                                              {gamma + 1})
        verdict = lossless.Verdict(rule, eps)
        for text, ids, ref, out in runs:
            bad = lossless.check_prompt(verdict, text, runner, ids, ref, out, decode, max_new_tokens)
            if bad:
                return Check("lossless", False, f"{how} differs from the target alone for prompt {text!r} {bad}",
                             numbers=verdict.as_dict())
    except Exception as e:
        return Check("lossless", False, f"{how} failed: {type(e).__name__}: {str(e).splitlines()[0]}")
    n = len(verdict.excused_margins)
    same = ("identical to the target" if not n else
            f"equal to the target but for {n} near-tie{'s' if n > 1 else ''} within ε {eps:.3g} of its "
            f"{str(target.dtype).removeprefix('torch.')} logits (margins {verdict.excused_margins})")
    return Check("lossless", True, f"{how}, γ={gamma}, greedy: {same} on {len(LOSSLESS_PROMPTS)} prompts × "
                 f"{max_new_tokens} tokens", numbers=verdict.as_dict())


def looks_like_init(t: torch.Tensor, initializer_range: float) -> bool:
    """Heuristic: does this weight matrix look like transformers' init, normal(0, initializer_range)?

    Trained weights drift far from that (SmolLM2's matrices have std 0.05-0.4 against initializer_range 0.02)
    and are heavy-tailed. A matrix with mean ≈ 0, std within 10% of initializer_range and Gaussian kurtosis
    (3 ± 0.5) is taken for untouched init. Norm weights (all ones, all zeros) are legitimately at their init and
    are 1-D, so only 2-D matrices (linear and embedding weights) of 1024+ elements are looked at.
    """
    if t.dim() != 2 or t.numel() < 1024 or not t.is_floating_point():
        return False
    x = t.detach().float().flatten()
    mean, std = x.mean().item(), x.std().item()
    if (
        std == 0
        or abs(std - initializer_range) > 0.1 * initializer_range
        or abs(mean) > 0.1 * initializer_range
    ):
        return False
    kurtosis = (((x - mean) / std) ** 4).mean().item()
    return abs(kurtosis - 3.0) < 0.5


def check_random_init(draft, target, vocab_map: list[int] | None = None,
                      initializer_range: float | None = None) -> Check:
    """No 2-D weight of the draft looks like init, unless it is a copy of one of the target's tensors.

    The exception matters when the target itself looks like init (tiny random test models): a draft that copies
    a target tensor (or, for a reduced vocabulary, the target rows its map names) has not been left at *its
    own* random initialisation. Copies are compared after casting, so a bf16 copy of a float32 tensor counts.
    initializer_range: the r to compare with (default: the draft config's; a feature head's is the target's).
    """
    r = initializer_range if initializer_range is not None else getattr(draft.config, "initializer_range", None)
    if r is None:
        return Check("random_init", True, "skipped: the config has no initializer_range to compare against",
                     skipped=True)  # printed `skip`, not `ok`: nothing was looked at
    by_shape: dict[tuple, list[torch.Tensor]] = {}
    vm = torch.tensor(vocab_map, dtype=torch.long) if vocab_map is not None else None
    for p in target.state_dict().values():
        by_shape.setdefault(tuple(p.shape), []).append(p)
        if vm is not None and p.dim() == 2 and p.shape[0] == target.config.vocab_size:
            rows = p.index_select(0, vm.to(p.device))
            by_shape.setdefault(tuple(rows.shape), []).append(rows)
    suspects = []
    for name, p in draft.named_parameters():
        if not looks_like_init(p, r):
            continue
        same = by_shape.get(tuple(p.shape), [])
        if any(
            torch.allclose(p.detach().float(), t.detach().float().to(p.device), rtol=1e-2, atol=1e-6)
            for t in same
        ):
            continue
        suspects.append(f"{name} (mean {p.float().mean().item():.4f}, std {p.float().std().item():.4f})")
    if suspects:
        return Check(
            "random_init",
            False,
            f"weights still look like random init normal(0, {r}): {', '.join(suspects[:6])}"
            + (f" and {len(suspects) - 6} more" if len(suspects) > 6 else ""),
        )
    return Check("random_init", True, f"no weight matrix matches normal(0, {r}) init statistics")
