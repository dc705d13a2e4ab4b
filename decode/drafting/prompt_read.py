"""What a draft reads of the prompt, and when: its window of the prompt's last W tokens, and its read deferred to the
first round that drafts.

At long prompts the draft's forward over the prompt and its step (attention over every key) grow with the context
while what it drafts from lies mostly in the last few hundred tokens (context lookup still reads all of it). So the
draft reads the last W tokens, its positions counted from 0 (RoPE attends by distance: a window is a shorter
prompt to it), and the output stays the target's whatever it read. W, in order:

    option       --draft-context N (1..the draft's trained length)
    stored       the window evaluate's long check chose for this draft from its measured cost per key and the
                 acceptance it keeps at each window (specdistill.json's `draft_context`, decode.models.draft_folder);
                 chosen on long prompts, so it applies above MIN_WINDOW tokens: shorter prompts are read whole
    cost model   without one: the largest power of two whose read costs at most READ_SHARE of the target's own
                 prompt forward (the two forwards' multiply-adds a token, from their configs), never below
                 MIN_WINDOW (so short prompts are read whole) nor above the draft's trained length

A prompt no longer than W is read whole. The read itself waits for the schedule's first drafted round (Deferred):
a generation that never drafts pays nothing for the draft, and the tokens emitted before that round are read with
the window, in the same forward (the schedule weighs that read against what drafting would save,
decode.drafting.schedule).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from decode.errors import UserError
from decode.models import draft_folder
from decode.models.feature_head import FeatureHead

READ_SHARE = 0.02  # the cost model's window: its read costs at most this share of the target's prompt forward
MIN_WINDOW = 512  # ... and is never shorter, nor is a stored window applied below it (the bundled drafts train on
# prompts below this, which they read whole; the stored window was measured on prompts of 1K tokens and more)


@dataclass
class Window:
    tokens: int | None  # the prompt's last `tokens` the draft reads (None: a draft that reads no window, a head)
    source: str  # option | stored | cost model | none


def folder_of(draft) -> str | None:
    """The folder a draft was loaded from (transformers' name_or_path), None for one built in memory."""
    model = getattr(draft, "model", draft) if not isinstance(draft, torch.nn.Module) else draft
    config = getattr(draft, "config", None) or getattr(model, "config", None)
    path = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None)
    return path or None


def trained_length(draft) -> tuple[int | None, str]:
    """The longest sequence the draft was trained on and where that comes from: specdistill.json's
    train_config.max_seq_len where given, else its config's max_position_embeddings (None: neither)."""
    folder = folder_of(draft)
    meta = draft_folder.read_meta(folder) if folder else {}
    n = (meta.get("train_config") or {}).get("max_seq_len")
    if isinstance(n, int) and n > 0:
        return n, "its training's max_seq_len"
    config = getattr(getattr(draft, "model", draft), "config", None) or getattr(draft, "config", None)
    n = getattr(config, "max_position_embeddings", None)
    return (n, "its config's max_position_embeddings") if isinstance(n, int) else (None, "")


def check(draft, options) -> None:
    """--draft-context N above the draft's trained length: a one-line error naming the range."""
    if not options.draft_context or draft is None or isinstance(draft, FeatureHead):
        return
    n, source = trained_length(draft)
    if n is not None and options.draft_context > n:
        raise UserError(f"--draft-context {options.draft_context}: this draft was trained on at most {n} tokens "
                        f"({source}); give 1..{n}, or 0 for the window chosen by cost")


def choose(options, draft, target_config, prompt_len: int) -> Window:
    """The draft's window for a prompt of prompt_len tokens (module docstring)."""
    if draft is None or isinstance(draft, FeatureHead):
        return Window(None, "none")
    if options.draft_context:
        return Window(options.draft_context, "option")
    folder = folder_of(draft)
    stored = draft_folder.read_window(folder) if folder else None
    if stored is not None:
        return Window(stored if prompt_len > MIN_WINDOW else max(stored, prompt_len), "stored")
    return Window(model_window(draft, target_config, prompt_len), "cost model")


def model_window(draft, target_config, prompt_len: int) -> int:
    """The cost model's window (module docstring) for a prompt of prompt_len tokens."""
    budget = READ_SHARE * prompt_len * token_cost(target_config, prompt_len)
    config, w = _config(draft), MIN_WINDOW
    while 0 < 2 * w * token_cost(config, 2 * w) <= budget:  # a read of 2w tokens is within the budget
        w *= 2
    limit, _ = trained_length(draft)
    return min(w, limit) if limit else w


def token_cost(config, context: int) -> int:
    """Multiply-adds a prompt token costs a llama-family model at a context of `context` tokens: its layers' weights
    (q, k, v, o, and the MLP's three) and attention over half the context on average; the embedding is a lookup
    and a prompt's forward keeps one row of logits. 0 where the config lacks these fields."""
    try:
        h, n = config.hidden_size, config.num_hidden_layers
        heads = config.num_attention_heads
        hd = getattr(config, "head_dim", None) or h // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        inner = config.intermediate_size
    except AttributeError:
        return 0
    return n * (h * hd * (2 * heads + 2 * kv) + 3 * h * inner + heads * hd * context)


def _config(draft):
    return getattr(getattr(draft, "model", draft), "config", None) or getattr(draft, "config", None)


def read_prior(draft, target_config, prompt_seconds: float, prompt_len: int) -> float | None:
    """Seconds a token of the draft's read should cost before one is timed: the target's prompt forward a token
    (measured in this call) times the two models' cost ratio a token (token_cost at the prompt's length)."""
    if draft is None or prompt_len <= 0:
        return None
    target = token_cost(target_config, prompt_len)
    return prompt_seconds / prompt_len * token_cost(_config(draft), prompt_len) / target if target else None


class Deferred:
    """A draft's proposer built at its first proposal (decode.drafting.proposers.Proposer): until then it only
    collects what the target emits, so no draft forward runs. build(first) makes the real proposer (which reads the
    window then); the tokens emitted after `first` are handed to it as a round it did not propose, so it reads them
    with its first step. The build's time (the read) is handed to the schedule (drain)."""

    def __init__(self, build, first: int, window_len: int, device: torch.device):
        self.build, self.emitted, self.window_len, self.device = build, [first], window_len, device
        self.inner, self.reads = None, []

    @property
    def unread(self) -> int:
        """Tokens the draft would read before its next proposal."""
        if self.inner is None:
            return self.window_len + len(self.emitted)
        return getattr(self.inner, "unread", 0)

    def propose(self, ctx: list[int], g: int, room: int):
        if self.inner is None:
            t0 = wall_clock(self.device)
            self.inner = self.build(self.emitted[0])
            self.reads.append((self.window_len, wall_clock(self.device) - t0))
            if len(self.emitted) > 1:
                from decode.drafting.proposers import Proposal  # (proposers imports nothing from here)

                self.inner.advance(Proposal(), self.emitted[1:-1], self.emitted[-1])
        return self.inner.propose(ctx, g, room)

    def advance(self, proposal, kept: list[int], nxt: int) -> None:
        if self.inner is None:
            self.emitted += kept + [nxt]
        else:
            self.inner.advance(proposal, kept, nxt)

    def drain(self) -> tuple[int, float]:
        """(tokens, seconds) of the reads since the last drain: the window's, and the built proposer's catch-ups."""
        reads, self.reads = self.reads + (self.inner.drain_reads() if hasattr(self.inner, "drain_reads") else []), []
        return sum(n for n, _ in reads), sum(s for _, s in reads)


def wall_clock(device: torch.device) -> float:
    """The wall clock after the device's queued work (the schedule's round times are wall times too)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
