"""Parallel drafts (`--parallel K`, PARD style): a standalone draft of any init that also learns a mask token, so that
one forward over the context and K-1 masks proposes K tokens (decode.drafting.parallel decodes with it).

    the mask     a target id r the collected data never holds (reserved_id: the highest such id, special tokens
                 excepted) is the mask's place in the target's vocabulary, where vLLM's `draft_model` with
                 `parallel_drafting` feeds it. A reduced-vocabulary draft gets it as a new draft id N appended
                 to its N ids (its map sends N to r); a full-vocabulary draft retrains row r. Its embedding row
                 starts at the mean row (the copy circuit's private dims at zero: its code is "nothing to copy")
                 and trains even where --freeze keeps the embedding (a gradient mask keeps every other row);
                 an untied head's new row is the mean row too, so the mask's logit is never the draft's best.
                 config.json names it as `mask_token_id` and `pard_token` (vLLM and TensorRT-LLM read those)
    batches      distill/train/parallel_batches.py: real tokens, then masks at levels 1..K-1 with conditional
                 drop, in one packed sequence per example under a 4D attention mask and explicit positions
    loss         the chain's losses (--loss: the stored top-k at the response position each row predicts), over
                 every trained row: level 0 (the real tokens: the chain's own training) and each mask level.
                 --parallel-weight accepted weighs a level-k row by the draft's own (detached) probability of the
                 target's top-1 token at levels 0..k-1 of the same anchor, multiplied: the chance that greedy
                 verification gets that far, which is what its acceptance adds to the accepted length
                 (E[accepted] = sum_k prod_{j<=k} a_j, so d E / d a_k carries prod_{j<k} a_j). This is our reading of
                 PARD-2's confidence-adaptive token weighting, not its code. uniform weighs every row alike.
"""

from __future__ import annotations

import torch

from decode.errors import UserError
from distill.train import losses
from distill.train.parallel_batches import visible
from distill.train.student import CHUNK_BYTES, Student, chunk_rows

WEIGHTINGS = ("uniform", "accepted")


def check(cfg) -> None:
    """The parallel options against the rest of a TrainConfig (called by its __post_init__)."""
    if cfg.parallel == 1 or cfg.parallel < 0:
        raise UserError(f"--parallel {cfg.parallel}: give the block size K >= 2 a forward proposes (0 = a chain draft)")
    if not 0 < cfg.parallel_keep <= 1:
        raise UserError(f"--parallel-keep must be in (0, 1] (the share of anchors each mask level keeps), got "
                        f"{cfg.parallel_keep}")
    if cfg.parallel_weight not in WEIGHTINGS:
        raise UserError(f"--parallel-weight must be one of {', '.join(WEIGHTINGS)}, got {cfg.parallel_weight!r}")
    if not cfg.parallel:
        return
    if cfg.design != "standalone":
        raise UserError("--parallel is for standalone drafts (--design standalone); a feature head drafts a chain")
    if cfg.lora_r:
        raise UserError("--parallel trains the mask token's embedding row, which a LoRA adapter leaves frozen: use "
                        "--lora-r 0 with --parallel")
    if cfg.weight_decay and "embed" in cfg.freeze:
        raise UserError(f"--parallel with --freeze embed trains the mask's row through a gradient mask, but AdamW's "
                        f"--weight-decay {cfg.weight_decay} would still shrink the frozen rows: use --weight-decay 0 or "
                        "leave embed out of --freeze")


def reserved_id(counts, vocab_size: int, taken, special) -> int:
    """The target id the mask takes: the highest id below vocab_size that the data never holds (counts: (V',)
    token frequencies), outside `taken` (a reduced draft's ids) and `special` (BOS/EOS/PAD); else the least
    frequent such id."""
    counts = torch.as_tensor(counts[:vocab_size], dtype=torch.long)
    counts = torch.cat([counts, counts.new_zeros(vocab_size - len(counts))])
    blocked = torch.zeros(vocab_size, dtype=torch.bool)
    blocked[[int(t) for t in (*(taken or ()), *special) if t is not None and 0 <= int(t) < vocab_size]] = True
    score = counts.double() * vocab_size - torch.arange(vocab_size).double()  # fewest first, then the highest id
    score[blocked] = float("inf")
    return int(score.argmin())


@torch.no_grad()
def add_mask_token(model, vocab_map: list[int] | None, counts, tokenizer, target_vocab: int):
    """Give `model` (an HF causal LM built by designs.py) its mask token, in place -> (vocab_map, card fields).

    vocab_map: the reduced draft's map (None: full vocabulary), returned with the mask's reserved id appended.
    A model whose config already names a mask (a parallel draft continued) is left as it is."""
    from decode.drafting.parallel import mask_token

    if mask_token(model.config) is not None:
        mask = mask_token(model.config)
        r = vocab_map[mask] if vocab_map is not None else mask
        return vocab_map, card_fields(mask, r)
    special = [getattr(tokenizer, f"{n}_token_id", None) for n in ("bos", "eos", "pad")]
    r = reserved_id(counts, target_vocab, vocab_map, special)
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head.weight is emb.weight
    private = (getattr(model.config, "copy_circuit", None) or {}).get("private")  # the circuit's first private dim
    if vocab_map is None:
        mask = r
        emb.weight[r] = _mean_row(emb.weight, private)
    else:
        mask = len(vocab_map)
        emb.weight = torch.nn.Parameter(torch.cat([emb.weight, _mean_row(emb.weight, private)[None]]),
                                        requires_grad=emb.weight.requires_grad)
        emb.num_embeddings = mask + 1
        if tied:
            head.weight = emb.weight
        else:
            head.weight = torch.nn.Parameter(torch.cat([head.weight, _mean_row(head.weight, private)[None]]),
                                             requires_grad=head.weight.requires_grad)
        if getattr(head, "bias", None) is not None:  # phi's head has one, tied weights or not
            head.bias = torch.nn.Parameter(torch.cat([head.bias, head.bias.mean()[None]]),
                                           requires_grad=head.bias.requires_grad)
        head.out_features = mask + 1
        model.config.vocab_size = mask + 1
        vocab_map = [*vocab_map, r]
        _grow_circuit_masks(model, private, tied)
    model.config.mask_token_id = model.config.pard_token = mask
    return vocab_map, card_fields(mask, r)


def card_fields(mask: int, reserved: int) -> dict:
    """What specdistill.json's design records of a parallel draft (besides --parallel and its options)."""
    return {"kind": "parallel", "mask_token_id": mask, "mask_target_id": reserved}


def _mean_row(w: torch.Tensor, private: int | None) -> torch.Tensor:
    """(V, H) -> (H,) the mean row, zero on a copy circuit's private dims (from `private` on)."""
    row = w.float().mean(0).to(w.dtype)
    if private is not None:
        row[private:] = 0
    return row


def _grow_circuit_masks(model, private: int | None, tied: bool) -> None:
    """A copy-circuit draft's gradient masks (copy_circuit._masks) for its grown embedding and head: the new row
    trains on the copied dims and keeps zero on the private ones."""
    masks = getattr(model, "_copy_circuit_masks", None)
    if not masks:
        return
    for name, prm in model.named_parameters():
        m = masks.get(name)
        if m is not None and m.dim() == 2 and m.shape[0] == prm.shape[0] - 1:
            row = torch.arange(m.shape[1]) < (private if private is not None else m.shape[1])
            masks[name] = torch.cat([m, row[None].to(m.device)])


def train_mask_row(model) -> None:
    """Let the mask's embedding row train where --freeze keeps the embedding: the parameter trains, with a
    gradient mask that zeroes every other row (Adam then leaves them exactly as they are: zero moments, zero
    step; weight decay would not, which TrainConfig refuses)."""
    from decode.drafting.parallel import mask_token

    w = model.get_input_embeddings().weight
    if w.requires_grad:
        return
    keep = torch.zeros(w.shape[0], 1, dtype=w.dtype, device=w.device)
    keep[mask_token(model.config)] = 1
    w.requires_grad_(True)
    w.register_hook(lambda g: g * keep)
    model._specdistill_mask_row_only = True  # card: count one row of it as trainable


def trainable(model) -> int:
    """Trainable parameters, the embedding counted as its one row where train_mask_row masks the rest."""
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if getattr(model, "_specdistill_mask_row_only", False):
        w = model.get_input_embeddings().weight
        n -= w.numel() - w.shape[1]
    return n


class ParallelStudent(Student):
    """The draft over packed batches (parallel_batches.collate): forward(input_ids, attention_mask, sel,
    targets=batch) -> (loss, parts), parts per loss term and per level ("level0", ...). Batches without levels
    (the held-out proxy's batches.collate) take Student's path: position-1 agreement, the chain's."""

    def __init__(self, model, block: int, weights: dict | None = None, jsd_beta: float = 0.5,
                 chunk_bytes: int = CHUNK_BYTES, weighting: str = "uniform"):
        super().__init__(model, weights, jsd_beta, chunk_bytes)
        self.block, self.weighting = block, weighting

    def forward(self, input_ids, attention_mask, sel, targets: dict | None = None, argmax: bool = False):
        if targets is None or "level" not in targets:
            return super().forward(input_ids, attention_mask, sel, targets, argmax)
        base = self._base()
        mask = attention_bias(visible(targets["anchor"], targets["level"]), base.config, base.dtype)
        h = base.base_model(input_ids=input_ids, attention_mask=mask,
                            position_ids=targets["position_ids"]).last_hidden_state  # (B, L, H)
        h = h.flatten(0, 1)[sel]  # (N, H)
        rows = chunk_rows(base.get_output_embeddings().weight.shape[0], self.chunk_bytes)
        return level_loss(h, self.logits, targets, self.weights, self.jsd_beta, self.weighting, self.block, rows)


def attention_bias(vis: torch.Tensor, config, dtype: torch.dtype) -> torch.Tensor:
    """(B, L, L) visibility -> the (B, 1, L, L) 4D mask the model's attention takes as given (transformers passes a
    4D mask through): bool for SDPA, an additive bias (0 / the dtype's minimum) for eager attention."""
    if getattr(config, "_attn_implementation", "sdpa") == "sdpa":
        return vis[:, None]
    return torch.zeros(vis.shape, dtype=dtype, device=vis.device).masked_fill_(~vis, torch.finfo(dtype).min)[:, None]


def position_terms(h: torch.Tensor, head, targets: dict, names: list[str], jsd_beta: float, rows: int) -> list:
    """losses.position_terms(head(h), ...) over chunks of `rows` positions (recomputed in backward, as
    losses.chunked_loss does): [(N,) per name]."""
    from torch.utils.checkpoint import checkpoint

    ids, lps, ys = targets.get("topk_ids"), targets.get("topk_logprobs"), targets.get("labels")

    def run(hh, i, lp, y):
        return tuple(losses.position_terms(head(hh), i, lp, y, names, jsd_beta))

    if len(h) <= rows:
        return list(run(h, ids, lps, ys))
    pieces = [checkpoint(run, h[s:s + rows], *(t[s:s + rows] if t is not None else None for t in (ids, lps, ys)),
                         use_reentrant=False) for s in range(0, len(h), rows)]
    return [torch.cat([p[i] for p in pieces]) for i in range(len(names))]


def level_loss(h, head, targets: dict, weights: dict, jsd_beta: float, weighting: str, block: int, rows: int):
    """(N, H) hidden states of the trained rows -> (loss, parts): sum over terms of weight x the row-weighted mean
    of the term (rows weighted by `row_weights`), parts per term and per level 0..block-1 (its rows' unweighted
    first term). Reads nothing from the device (no host sync)."""
    active = [name for name in losses.LOSS_NAMES if weights.get(name, 0) > 0]  # TrainConfig checked the weights
    extra = ["top1"] if weighting == "accepted" and "top1" not in active else []
    terms = position_terms(h, head, targets, active + extra, jsd_beta, rows)
    top1 = terms[(active + extra).index("top1")] if weighting == "accepted" else None
    w = row_weights(targets["sel_level"], targets["sel_prev"], top1, targets.get("topk_ids"), weighting, block)
    total, parts = 0.0, {}
    for name, term in zip(active, terms):
        ids = targets["labels"] if name == "ce" else targets["topk_ids"][:, 0] if name == "top1" else None
        ok = (ids >= 0).float() if ids is not None else torch.ones_like(term)
        part = (w * ok * term).sum() / (w * ok).sum().clamp_min(1e-9)
        total, parts[name] = total + weights[name] * part, part.detach()
    level = targets["sel_level"]
    for k in range(block):
        on = (level == k).float()
        parts[f"level{k}"] = ((on * terms[0]).sum() / on.sum().clamp_min(1)).detach()
    return total, parts


def row_weights(level, prev, top1_nll, topk_ids, weighting: str, block: int) -> torch.Tensor:
    """(N,) weight of each trained row: 1 (uniform), or (accepted) the product over its anchor's levels below it of
    the draft's detached probability of the target's top-1 token there (0 where that token is outside the draft's
    vocabulary: verification stops there). level, prev: (N,) from parallel_batches.collate."""
    w = torch.ones(level.shape, dtype=torch.float32, device=level.device)
    if weighting == "uniform":
        return w
    conf = torch.exp(-top1_nll.detach().float()) * (topk_ids[:, 0] >= 0).float()  # (N,)
    src = prev.clamp(min=0)
    for k in range(1, block):  # level k's rows read level k-1's, already final
        w = torch.where(level == k, w[src] * conf[src], w)
    return w


# --- the pipeline's parallel stage (distill/pipeline.py): by default it continues the chain draft

FROM_CHAIN = "chain"  # the pipeline's `parallel` section, init chain: the standalone run's last draft, continued


def wiring(gammas: list[int]) -> dict:
    """The stage's wiring defaults (its YAML section overrides them): the chain draft continued, for a block of the
    largest γ evaluate gives a parallel draft (at least 2). Deeper levels would train masks no evaluated round reads:
    at γ 2 a block of 4 (keep 0.5) and a block of 2 (keep 1) reached the same τ (docs/results.md)."""
    return {"parallel": max(2, *gammas), "init": FROM_CHAIN}


def check_stage(cfg, designs: list) -> None:
    """The pipeline's parallel section before any stage runs: a block, and a chain to continue when it asks for one."""
    if cfg.parallel < 2:
        raise UserError(f"pipeline `parallel` section: parallel {cfg.parallel}: give the block size K >= 2")
    if cfg.init == FROM_CHAIN and "standalone" not in designs:
        raise UserError("pipeline `parallel` section: init chain continues the standalone draft, which --designs "
                        f"{designs} leaves out: add standalone, or give the parallel draft its own init")


def from_chain(cfg, chain_run, last_draft):
    """The stage's TrainConfig with init chain resolved to pretrained:(the chain run's last checkpoint)."""
    from dataclasses import replace

    return replace(cfg, init=f"pretrained:{last_draft(chain_run)}") if cfg.init == FROM_CHAIN else cfg
