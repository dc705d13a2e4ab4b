"""Sheared-LLaMA-style structured width pruning (the `prune` draft init).

Hidden channels, FFN channels and attention heads (whole KV groups, then query heads within each kept group) are
ranked by mean activation magnitude of the target on collected data, and the top ones are kept. Every weight of
the draft is the target's weight sliced along each dimension by that dimension's role (hidden, FFN, query rows,
KV rows, or fused ones), found by its module's name, so the families in PRUNE_TYPES share one code path.
"""

from __future__ import annotations

import re

import torch
from transformers import AutoModelForCausalLM

from decode.errors import UserError
from decode.models.layer_cut import cut_config, cut_keys, layer_list

# width pruning knows these dense attention + MLP layers (the roles of their weights in _PRUNE_ROLES below)
PRUNE_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "starcoder2")


def ffn_name(config) -> str:
    """The config attribute of the FFN width: intermediate_size, or OPT's ffn_dim, or GPT-2's n_inner."""
    return next((n for n in ("intermediate_size", "ffn_dim", "n_inner") if hasattr(config, n)), "intermediate_size")


def target_widths(tc) -> dict:
    """The target's widths under one set of names, whatever its config calls them (GPT-2's n_inner None = 4 x hidden;
    no num_key_value_heads = one KV head per query head)."""
    heads = tc.num_attention_heads
    return {"hidden_size": tc.hidden_size, "intermediate_size": getattr(tc, ffn_name(tc), None) or 4 * tc.hidden_size,
            "num_attention_heads": heads, "num_key_value_heads": getattr(tc, "num_key_value_heads", None) or heads}


def head_dim(tc) -> int:
    return getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads


_FFN_OUT = ("down_proj", "c_proj")  # (H, I): its input is the FFN channels


def _leaf(layer, names):
    """The first submodule of `layer` whose own name is one of `names` (e.g. mlp.down_proj or mlp.c_proj)."""
    return next(m for n, m in layer.named_modules() if n.rsplit(".", 1)[-1] in names)


@torch.no_grad()
def importance(target, rows: list[list[int]]) -> dict:
    """Mean activation magnitudes of the target on token sequences: hidden channels (H,), and per layer the FFN
    channels (I,) (input of down_proj) and query heads (heads,) (norm of each head's slice entering o_proj)."""
    n_layers = target.config.num_hidden_layers
    hd = head_dim(target.config)
    ffn = [0.0] * n_layers
    heads = [0.0] * n_layers
    hooks = []
    for i, layer in enumerate(layer_list(target)[1]):
        def ffn_hook(mod, args, i=i):
            ffn[i] = ffn[i] + args[0].float().abs().flatten(0, -2).mean(0)

        def head_hook(mod, args, i=i):
            x = args[0].float().flatten(0, -2)  # (tokens, heads * hd)
            heads[i] = heads[i] + x.view(x.shape[0], -1, hd).norm(dim=-1).mean(0)

        hooks += [_leaf(layer, _FFN_OUT).register_forward_pre_hook(ffn_hook),
                  _leaf(layer, ("o_proj",)).register_forward_pre_hook(head_hook)]
    hidden = 0.0
    try:
        for ids in rows:
            out = target(input_ids=torch.tensor([ids], device=target.device), output_hidden_states=True)
            hidden = hidden + sum(h[0].float().abs().mean(0) for h in out.hidden_states)
    finally:
        for h in hooks:
            h.remove()
    return {"hidden": hidden, "ffn": ffn, "heads": heads}


def prune(target, layers: list[int], w: dict, imp: dict):
    """The chosen target layers narrowed to widths `w` (DraftDesign.widths, checked narrower than the target's
    and in whole KV groups), keeping the channels and heads `imp` ranks top."""
    tc = target.config
    cfg = cut_config(tc, layers)
    cfg.update(dict(w, head_dim=head_dim(tc)))
    draft = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype)
    src = target.state_dict()
    prefix = layer_list(target)[0]
    mapping = cut_keys(src, prefix, layers)
    hk = _top(imp["hidden"], w["hidden_size"])
    index = {d: _layer_index(tc, w, imp, s) | {"hidden": hk} for d, s in enumerate(layers)}
    in_layer = re.compile(re.escape(prefix) + r"\.(\d+)\.(.*)")  # draft layer d, weight name in the layer
    sd = {}
    for key in draft.state_dict():
        weight, m = src[mapping[key]], in_layer.fullmatch(key)
        roles = _prune_roles(m.group(2), weight, cfg.head_dim) if m else _outer_roles(key, weight)
        kept = index[int(m.group(1))] if m else {"hidden": hk}
        sd[key] = _take(weight, [kept.get(r) for r in roles])  # r None: the dim is kept whole
    draft.load_state_dict(sd, strict=True)
    return draft


def _top(x, k: int) -> torch.Tensor:
    """The indices of the k largest entries, in ascending order (kept channels keep their order)."""
    return torch.topk(torch.as_tensor(x, dtype=torch.float32).cpu(), k).indices.sort().values


def _layer_index(tc, w: dict, imp: dict, s: int) -> dict:
    """Kept rows of target layer s per role: ffn channels, query rows, KV rows, and the fused projections'."""
    hd, t = head_dim(tc), target_widths(tc)
    group_t, group_d = t["num_attention_heads"] // t["num_key_value_heads"], w["num_attention_heads"] // w["num_key_value_heads"]
    head_imp = torch.as_tensor(imp["heads"][s]).cpu().view(t["num_key_value_heads"], group_t)
    kv_keep = _top(head_imp.sum(1), w["num_key_value_heads"])  # whole KV groups, then query heads within each
    q_heads = torch.cat([g * group_t + _top(head_imp[g], group_d) for g in kv_keep.tolist()])
    qr, kvr = ((h[:, None] * hd + torch.arange(hd)).flatten() for h in (q_heads, kv_keep))
    fk = _top(imp["ffn"][s], w["intermediate_size"])
    nq, nkv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    return {"ffn": fk, "q": qr, "kv": kvr, "qkv": torch.cat([qr, nq + kvr, nq + nkv + kvr]),
            "ffn2": torch.cat([fk, t["intermediate_size"] + fk])}


# a layer weight's module name -> the roles of its (out, in) dims; 1-D weights and biases take the out role.
# Phi-3 fuses q, k, v rows into qkv_proj and gate, up rows into gate_up_proj; StarCoder2's MLP is c_fc, c_proj
_PRUNE_ROLES = {"q_proj": ("q", "hidden"), "k_proj": ("kv", "hidden"), "v_proj": ("kv", "hidden"),
                "qkv_proj": ("qkv", "hidden"), "o_proj": ("hidden", "q"),
                "gate_proj": ("ffn", "hidden"), "up_proj": ("ffn", "hidden"), "c_fc": ("ffn", "hidden"),
                "gate_up_proj": ("ffn2", "hidden"), "down_proj": ("hidden", "ffn"), "c_proj": ("hidden", "ffn")}


def _prune_roles(rel: str, tensor, hd: int) -> tuple:
    """Roles of the dims of layer weight `rel` (e.g. self_attn.q_proj.weight)."""
    module = rel.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    if module in _PRUNE_ROLES:
        return _PRUNE_ROLES[module][: tensor.dim()]
    if module in ("q_norm", "k_norm"):  # over head_dim in each head (qwen3, gemma3), or over all heads (olmo2)
        return (None,) if tensor.shape[0] == hd else ("q" if module == "q_norm" else "kv",)
    if "norm" in module and tensor.dim() == 1:
        return ("hidden",)
    raise UserError(f"init=prune: no pruning rule for the layer weight {rel!r}; use init=target_layers")


def _outer_roles(key: str, tensor) -> tuple:
    """Embeddings and head (V, H) keep every token; the final norm is over hidden; the head's bias is per token."""
    if tensor.dim() == 2:
        return (None, "hidden")
    return ("hidden",) if "norm" in key else (None,)


def _take(t: torch.Tensor, index: list) -> torch.Tensor:
    """t with dim i cut to the rows index[i] (None: all of them)."""
    for dim, idx in enumerate(index):
        if idx is not None:
            t = t.index_select(dim, idx.to(t.device))
    return t
