"""transformers' own decoding of a target, for decode.bench's anchors: plain `generate` (the target alone, and the
reference its assisted generation is compared with) and assisted generation with a draft at our γ and schedule."""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager

import torch

from decode.drafting.sampling import SamplingParams
from decode.models.draft_folder import assistant_config
from decode.options import DecodeOptions


def hf_generate(target, ids: list[int], n: int, sampling: SamplingParams, seed: int, eos: tuple[int, ...], draft=None,
                cfg: DecodeOptions | None = None, static: bool = False, tokenizers=None,
                timings: dict | None = None, lookup: int = 0) -> tuple[list[int], float]:
    """transformers' plain `generate` (draft None), or its assisted generation at cfg's γ and schedule, on a fresh
    copy of the assistant's generation config before every call (decode.models.draft_folder.assistant_config says why):
    (at most n new tokens, seconds). static: a static KV cache, which on a GPU makes transformers compile its
    decoding step (torch.compile, CUDA graphs): the strongest `generate` a user sets up with one argument.
    tokenizers: (target's, draft's) for a draft with its own tokenizer: universal assisted generation (greedy: the
    draft's text re-tokenized; sampling: UAG-TLI over the vocabularies' intersection, on a copy of the draft).
    timings: a dict that gets "first_token_s", the seconds to the first new token (plain generate only).
    lookup: transformers' prompt-lookup decoding with that many tokens a round (draft None)."""
    kwargs = dict(do_sample=not sampling.greedy, max_new_tokens=n,
                  # stop where our decoder stops (none at all: transformers fails on an empty list)
                  eos_token_id=list(eos) or None, pad_token_id=eos[0] if eos else None)
    if static:
        kwargs["cache_implementation"] = "static"
    if lookup and draft is None:
        kwargs["prompt_lookup_num_tokens"] = lookup
    if draft is not None:
        if tokenizers is not None:
            kwargs.update(tokenizer=tokenizers[0], assistant_tokenizer=tokenizers[1])
            draft = draft if sampling.greedy else tli_assistant(draft)
        draft.generation_config = assistant_config(draft.generation_config, cfg.gamma, cfg.schedule,
                                                   hf_confidence(cfg))
        kwargs["assistant_model"] = draft
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
    x = torch.tensor([ids], device=target.device)
    torch.manual_seed(seed)
    if timings is not None and draft is None:
        kwargs["streamer"] = _FirstToken(timings)
    t0 = time.perf_counter()
    with torch.inference_mode(), _sizes_apart(target, draft if tokenizers is not None else None):
        y = target.generate(x, attention_mask=torch.ones_like(x), **kwargs)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if timings is not None and "first_token_at" in timings:
        timings["first_token_s"] = timings.pop("first_token_at") - t0
    return y[0, len(ids):].tolist(), seconds


@contextmanager
def _sizes_apart(target, draft):
    """transformers (5.25) takes two models of one vocab_size for two of one tokenizer and refuses assistant_tokenizer
    for them, so a pair of two tokenizers of one size (Llama 2 and Mistral-7B-v0.1: 32,000 ids) never reaches its
    universal assisted generation; that path never reads the assistant's vocab_size, so during the call the
    assistant's config says one more (draft None: nothing to do)."""
    cfg = draft.config.get_text_config() if draft is not None else None
    apart = cfg is not None and cfg.vocab_size == target.config.get_text_config().vocab_size
    if apart:
        cfg.vocab_size += 1
    try:
        yield
    finally:
        if apart:
            cfg.vocab_size -= 1


class _FirstToken:
    """A transformers streamer that notes when the first new token comes: generate() puts the prompt first, then
    each new token (already on the host: transformers reads it there to stop at EOS, so this adds no wait)."""

    def __init__(self, timings: dict):
        self.timings, self.puts = timings, 0

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.timings["first_token_at"] = time.perf_counter()

    def end(self) -> None:
        pass


def tli_assistant(draft):
    """The draft as transformers' UAG-TLI gets it: a copy, made once and kept beside the draft, since TLI (5.24)
    swaps its assistant's head for one pruned to the shared vocabulary, in place."""
    twin = draft.__dict__.get("_specdistill_tli")  # in __dict__: not registered as a submodule of the draft
    if twin is None:
        twin = type(draft)(draft.config).to(device=draft.device, dtype=draft.dtype).eval()
        twin.load_state_dict(draft.state_dict())
        twin.generation_config = copy.deepcopy(draft.generation_config)
        draft.__dict__["_specdistill_tli"] = twin
    return twin


def hf_confidence(cfg: DecodeOptions) -> float:
    """transformers' assistant_confidence_threshold for our schedule: ours for dynamic, none otherwise."""
    return cfg.confidence if cfg.schedule == "dynamic" else 0.0
