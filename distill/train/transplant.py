"""init: other_tokenizer:PATH — a standalone draft started from a causal LM with another tokenizer than the target's:
its layers kept, its embedding and head rows mapped onto the target's vocabulary.

Why rows onto the target's vocabulary, not the other model distilled through its own text: the result is a draft of
the target's tokenizer, so everything after is the ordinary path, unchanged: the trainer's losses on the collected
top-k logprobs (no re-tokenized data, no top-k mapped through the shared ids, which has no answer where a target token
is no draft token), a reduced vocabulary (--vocab N: a 262k-row head would cost more than the layers), the copy
circuit, the decoder's direct path (no text round trip a round), transformers' assistant_model and vLLM's draft_model
as they are. What the other model learned lives in its layers, which are kept.

The row of target id t (decode.models.vocab_pair reads both vocabularies as bytes):
    the other model's row of the token with t's bytes, where it has one (Gemma 3 <- SmolLM2: 46,145 of 262,144 ids,
    99% of a mixed text's tokens);
    else the mean of the rows of the other tokenizer's tokens for t's text (bytes that are no whole character: its
    tokens for each byte), the simplest of the known vocabulary transfers (WECHSEL, FOCUS use weighted ones);
    BOS / EOS / PAD: the other model's BOS / EOS rows; any other special token, or a text it has no tokens for: the
    mean of all its rows.
The head's rows likewise (tied heads stay tied); the result has the target's vocab_size and special token ids.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from decode.errors import UserError
from decode.models.layer_cut import draft_from_layers
from decode.models.targets import load_model
from decode.models.vocab_pair import canonical_ids, same_tokenizer, split_utf8, token_bytes

PREFIX = "other_tokenizer:"


def source(init: str) -> str | None:
    """The model spec of an `other_tokenizer:PATH` init, else None."""
    return init[len(PREFIX):] if str(init).startswith(PREFIX) else None


def row_sources(target_tok, other_tok, target_vocab: int) -> list[list[int]]:
    """(target_vocab,) for each target id, the other model's ids whose rows make its row ([]: the mean of all)."""
    t_bytes, o_canon = token_bytes(target_tok), canonical_ids(other_tok)
    specials = {target_tok.bos_token_id: other_tok.bos_token_id or other_tok.eos_token_id,
                target_tok.eos_token_id: other_tok.eos_token_id, target_tok.pad_token_id: other_tok.eos_token_id}
    out: list[list[int]] = [[] for _ in range(target_vocab)]
    texts, where = [], []
    for t in range(min(target_vocab, len(t_bytes))):
        b = t_bytes[t]
        if b is None:
            out[t] = [specials[t]] if specials.get(t) is not None else []
        elif b in o_canon:
            out[t] = [o_canon[b]]
        else:
            text, used = split_utf8(b, skip_invalid=False)
            if used == len(b) and text:
                texts.append(text)
                where.append(t)
            else:  # no whole character (a byte-fallback piece): the other tokenizer's token for each byte
                out[t] = [o_canon[bytes([x])] for x in b if bytes([x]) in o_canon]
    for t, ids in zip(where, other_tok(texts, add_special_tokens=False)["input_ids"] if texts else []):  # batched
        out[t] = list(ids)
    return out


def mapped_rows(weight: torch.Tensor, sources: list[list[int]]) -> torch.Tensor:
    """(V_other, H) rows -> (len(sources), H): each the mean of its sources' rows, the mean of all where none."""
    flat = torch.tensor([i for ids in sources for i in ids], dtype=torch.long, device=weight.device)
    offsets = torch.tensor([0] + [len(ids) for ids in sources[:-1]], device=weight.device).cumsum(0)
    rows = F.embedding_bag(flat, weight, offsets, mode="mean")  # an empty bag gives zeros: filled below
    empty = torch.tensor([not ids for ids in sources], device=weight.device)
    rows[empty] = weight.mean(0)
    return rows


def build(spec: str, target_tok, target_config, layers: list[int], dtype, device):
    """The other model's chosen layers (a model of its class) with embedding and head rows for the target's ids."""
    other, other_tok = load_model(spec, dtype, str(device))
    n = other.config.num_hidden_layers
    if max(layers) >= n:
        raise UserError(f"init={PREFIX}{spec}: layers {layers} reach past its {n} layers; choose at most {n}")
    if same_tokenizer(other_tok, target_tok):
        raise UserError(f"init={PREFIX}{spec}: it has the target's tokenizer already; use init=pretrained:{spec}")
    draft = draft_from_layers(other, layers)
    del other
    sources = row_sources(target_tok, other_tok, target_config.vocab_size)
    emb, head = draft.get_input_embeddings(), draft.get_output_embeddings()
    tied = head.weight is emb.weight
    with torch.no_grad():
        emb.weight = torch.nn.Parameter(mapped_rows(emb.weight.data, sources))
        head.weight = emb.weight if tied else torch.nn.Parameter(mapped_rows(head.weight.data, sources))
        if getattr(head, "bias", None) is not None:
            head.bias = torch.nn.Parameter(mapped_rows(head.bias.data[:, None], sources)[:, 0])
    emb.num_embeddings = head.out_features = target_config.vocab_size
    emb.padding_idx = None
    draft.config.vocab_size = target_config.vocab_size
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):  # the target's ids from now on
        setattr(draft.config, name, getattr(target_config, name, None))
    return draft
