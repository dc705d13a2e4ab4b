"""Draft construction: a standard HF causal LM of the target's class, built from a design.

    layers             count (the target's first N layers) or explicit target layer indices
    hidden_size, intermediate_size, num_attention_heads, num_key_value_heads   (None = the target's)
    init               target_layers | prune | random | pretrained:PATH
    vocab              "full" or N: the draft's vocabulary is the N most frequent target tokens in the data
    freeze             parts that do not train: embed (tied heads freeze with it), head, norm
    copy_circuit       widen the draft with a hand-built induction (copy) circuit (distill/train/copy_circuit.py)

`prune` is Sheared-LLaMA-style structured width pruning: hidden channels, FFN channels and attention heads
(whole KV groups, then query heads within each kept group) are ranked by mean activation magnitude of the
target on collected data, and the top ones are kept. A reduced vocabulary keeps the matching rows of the
embedding and head; `vocab_map[i]` is the target id of draft id i (stored as decode.draft_folder.VOCAB_MAP_FILE).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from decode import latency
from decode.draft_folder import VocabMap
from decode.errors import UserError
from decode.layer_cut import draft_from_layers
from decode.targets import load_model
from distill.train import copy_circuit


@dataclass
class DraftDesign:
    layers: int | list = 2
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    init: str = "target_layers"
    vocab: int | str = "full"
    freeze: list = field(default_factory=lambda: ["embed"])
    copy_circuit: bool = False

    def layer_indices(self, n_target: int) -> list[int]:
        if isinstance(self.layers, int):
            if not 1 <= self.layers <= n_target:
                raise UserError(f"layers={self.layers}: the draft needs 1..{n_target} layers (the target has {n_target})")
            # a count keeps the target's first N layers: on the default target a [0, 1] draft beat [0, 29], [0, 2]
            # and [1, 2] at equal steps (held-out proxy 0.213 vs 0.196 / 0.141 at 60 steps; 0.187 vs 0.159 for [0, 29])
            return list(range(self.layers))
        idx = [int(i) for i in self.layers]
        bad = [i for i in idx if not 0 <= i < n_target]
        if bad or not idx or len(set(idx)) != len(idx):
            raise UserError(f"layers={self.layers}: indices must be distinct and within 0..{n_target - 1} (the target has {n_target} layers)")
        return idx

    def widths(self, tc) -> dict:
        """The draft's widths for target config `tc`: unset ones are the target's, except that unset KV heads
        are min(target's KV heads, the draft's heads) (so narrowing the heads keeps grouped-query attention)."""
        heads = self.num_attention_heads or tc.num_attention_heads
        t_kv = getattr(tc, "num_key_value_heads", None) or tc.num_attention_heads
        return {"hidden_size": self.hidden_size or tc.hidden_size,
                "intermediate_size": self.intermediate_size or tc.intermediate_size,
                "num_attention_heads": heads, "num_key_value_heads": self.num_key_value_heads or min(t_kv, heads)}

    def check(self, tc) -> None:
        """Reject designs that are impossible for target config `tc`, naming the problem."""
        self.layer_indices(tc.num_hidden_layers)
        if self.init not in ("target_layers", "prune", "random") and not str(self.init).startswith("pretrained:"):
            raise UserError(f"init={self.init!r}: use target_layers, prune, random or pretrained:PATH")
        widths = self.widths(tc)
        h, heads, kv = widths["hidden_size"], widths["num_attention_heads"], widths["num_key_value_heads"]
        if heads % kv:
            raise UserError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}; "
                            "set --num-key-value-heads to a divisor of it")
        if self.init == "random" and h % heads:
            raise UserError(f"hidden_size={h} is not divisible by num_attention_heads={heads}")
        if self.init == "target_layers":
            changed = [k for k, v in widths.items() if v != getattr(tc, k)]
            if changed:
                raise UserError(f"init=target_layers copies layers whole, so {changed} must equal the target's; use init=prune to narrow them")
        if self.init == "prune":
            wider = [k for k, v in widths.items() if v > getattr(tc, k)]
            if wider:
                raise UserError(f"init=prune can only narrow the target: {wider} exceed the target's")
            t_group = tc.num_attention_heads // (getattr(tc, "num_key_value_heads", None) or tc.num_attention_heads)
            if heads // kv > t_group:
                raise UserError(f"init=prune: {heads} heads over {kv} KV heads needs {heads // kv} query heads per KV "
                                f"group; the target has {t_group}")
        if self.vocab != "full":
            if not isinstance(self.vocab, int) or not 1 < self.vocab <= tc.vocab_size:
                raise UserError(f"vocab={self.vocab!r}: use 'full' or a size between 2 and the target's {tc.vocab_size}")
        if self.copy_circuit and len(self.layer_indices(tc.num_hidden_layers)) < 2:
            raise UserError("copy_circuit needs 2 or more layers: a previous-token head feeds the induction head")
        if self.copy_circuit and not str(self.init).startswith("pretrained:"):  # the draft keeps the target's kind
            copy_circuit.check_architecture(tc)
        unknown = set(self.freeze) - {"embed", "head", "norm"}
        if unknown:
            raise UserError(f"freeze: unknown part(s) {sorted(unknown)}; choose from embed, head, norm")


# --- importance (for prune) and token frequency (for a reduced vocabulary), both measured on collected data


@torch.no_grad()
def importance(target, rows: list[list[int]]) -> dict:
    """Mean activation magnitudes of the target on token sequences: hidden channels (H,), and per layer the FFN
    channels (I,) (input of down_proj) and query heads (heads,) (norm of each head's slice entering o_proj)."""
    n_layers = target.config.num_hidden_layers
    hd = getattr(target.config, "head_dim", None) or target.config.hidden_size // target.config.num_attention_heads
    ffn = [0.0] * n_layers
    heads = [0.0] * n_layers
    hooks = []
    for i, layer in enumerate(target.model.layers):
        def ffn_hook(mod, args, i=i):
            ffn[i] = ffn[i] + args[0].abs().flatten(0, -2).mean(0)

        def head_hook(mod, args, i=i):
            x = args[0].flatten(0, -2)  # (tokens, heads * hd)
            heads[i] = heads[i] + x.view(x.shape[0], -1, hd).norm(dim=-1).mean(0)

        hooks += [layer.mlp.down_proj.register_forward_pre_hook(ffn_hook),
                  layer.self_attn.o_proj.register_forward_pre_hook(head_hook)]
    hidden = 0.0
    try:
        for ids in rows:
            out = target(input_ids=torch.tensor([ids], device=target.device), output_hidden_states=True)
            hidden = hidden + sum(h[0].abs().mean(0) for h in out.hidden_states)
    finally:
        for h in hooks:
            h.remove()
    return {"hidden": hidden, "ffn": ffn, "heads": heads}


def frequent_tokens(sequences, n: int, always: list[int]) -> list[int]:
    """The n most frequent token ids (ties by id), always including `always` (e.g. EOS)."""
    counts = Counter()
    for seq in sequences:
        counts.update(seq)
    keep = list(dict.fromkeys(t for t in always if t is not None))  # e.g. EOS and PAD are often the same id
    for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(keep) >= n:
            break
        if t not in keep:
            keep.append(t)
    if len(keep) < n:  # data covers fewer than n tokens: fill with the lowest unused ids
        used = set(keep)
        keep += [t for t in range(n * 2 + len(used)) if t not in used][: n - len(keep)]
    return keep


# --- construction


def _prune(target, layers: list[int], design: DraftDesign, imp: dict):
    tc = target.config
    hd = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    w = design.widths(tc)  # checked by design.check: narrower than the target, whole KV groups
    H, inter, nh, nkv = w["hidden_size"], w["intermediate_size"], w["num_attention_heads"], w["num_key_value_heads"]
    group_t, group_d = tc.num_attention_heads // tc.num_key_value_heads, nh // nkv
    top = lambda x, k: torch.topk(torch.as_tensor(x, dtype=torch.float32), k).indices.sort().values  # noqa: E731
    hk = top(imp["hidden"], H)
    cfg = AutoConfig.for_model(**tc.to_dict())
    cfg.update(dict(num_hidden_layers=len(layers), hidden_size=H, intermediate_size=inter, num_attention_heads=nh,
                    num_key_value_heads=nkv, head_dim=hd))
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = [tc.layer_types[i] for i in layers]
    draft = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype)
    src, sd = target.state_dict(), {}
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        if key in src:
            sd[key] = src[key][:, hk]
    sd["model.norm.weight"] = src["model.norm.weight"][hk]
    for d, s in enumerate(layers):
        p, q = f"model.layers.{s}.", f"model.layers.{d}."
        fk = top(imp["ffn"][s], inter)
        head_imp = torch.as_tensor(imp["heads"][s]).view(tc.num_key_value_heads, group_t)
        kv_keep = top(head_imp.sum(1), nkv)
        q_heads = torch.cat([g * group_t + top(head_imp[g], group_d) for g in kv_keep.tolist()])
        rows = lambda heads: (heads[:, None] * hd + torch.arange(hd)).flatten()  # noqa: E731
        qr, kvr = rows(q_heads), rows(kv_keep)
        sd[q + "input_layernorm.weight"] = src[p + "input_layernorm.weight"][hk]
        sd[q + "post_attention_layernorm.weight"] = src[p + "post_attention_layernorm.weight"][hk]
        sd[q + "self_attn.q_proj.weight"] = src[p + "self_attn.q_proj.weight"][qr][:, hk]
        sd[q + "self_attn.k_proj.weight"] = src[p + "self_attn.k_proj.weight"][kvr][:, hk]
        sd[q + "self_attn.v_proj.weight"] = src[p + "self_attn.v_proj.weight"][kvr][:, hk]
        sd[q + "self_attn.o_proj.weight"] = src[p + "self_attn.o_proj.weight"][hk][:, qr]
        for name in ("gate_proj", "up_proj"):
            sd[q + f"mlp.{name}.weight"] = src[p + f"mlp.{name}.weight"][fk][:, hk]
        sd[q + "mlp.down_proj.weight"] = src[p + "mlp.down_proj.weight"][hk][:, fk]
        for name in ("q_proj", "k_proj", "v_proj"):  # biases (qwen2)
            if p + f"self_attn.{name}.bias" in src:
                b = src[p + f"self_attn.{name}.bias"]
                sd[q + f"self_attn.{name}.bias"] = b[qr] if name == "q_proj" else b[kvr]
    missing, unexpected = draft.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and tc.tie_word_embeddings)]
    if missing or unexpected:
        raise UserError(f"prune: cannot map this architecture's weights (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if tc.tie_word_embeddings:
        draft.tie_weights()
    return draft


def _reduce_vocab(draft, vocab_map: list[int]):
    """Keep only the embedding/head rows of vocab_map (draft id i = target id vocab_map[i])."""
    idx = torch.tensor(vocab_map)
    emb = draft.get_input_embeddings()
    new_emb = torch.nn.Embedding(len(idx), emb.weight.shape[1], dtype=emb.weight.dtype)
    new_emb.weight.data.copy_(emb.weight.data[idx])
    head = draft.get_output_embeddings()
    tied = draft.config.tie_word_embeddings
    draft.set_input_embeddings(new_emb)
    new_head = torch.nn.Linear(head.weight.shape[1], len(idx), bias=False, dtype=head.weight.dtype)
    new_head.weight.data.copy_(head.weight.data[idx])
    draft.set_output_embeddings(new_head)
    draft.config.vocab_size = len(idx)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        tid = getattr(draft.config, name, None)
        setattr(draft.config, name, vocab_map.index(tid) if isinstance(tid, int) and tid in vocab_map else None)
    if tied:
        draft.tie_weights()
    return draft


def build_draft(design: DraftDesign, target, tokenizer, sequences=None, seed: int = 0):
    """Build the draft (on the target's device) and return (model, vocab_map or None).

    sequences: token id lists from the collected data, needed for init=prune and a reduced vocabulary.
    """
    tc = target.config
    design.check(tc)
    layers = design.layer_indices(tc.num_hidden_layers)
    torch.manual_seed(seed)
    if design.init == "target_layers":
        draft = draft_from_layers(target, layers)
    elif design.init == "prune":
        if not sequences:
            raise UserError("init=prune ranks channels on collected data: give --data")
        draft = _prune(target, layers, design, importance(target, sequences[:32]))
    elif design.init == "random":
        cfg = AutoConfig.for_model(**tc.to_dict())
        cfg.update(design.widths(tc))
        cfg.num_hidden_layers = len(layers)
        cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
        draft = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype)
    else:
        draft, tok = load_model(design.init.split(":", 1)[1], target.dtype, str(target.device))
        from decode.targets import check_tokenizers

        check_tokenizers(tokenizer, tok)
    draft.generation_config = copy.deepcopy(target.generation_config)
    vocab_map = None
    if design.vocab != "full":
        if not sequences:
            raise UserError("a reduced vocabulary is chosen by token frequency in collected data: give --data")
        vocab_map = frequent_tokens(sequences, int(design.vocab), [tokenizer.eos_token_id, tokenizer.pad_token_id])
        draft = _reduce_vocab(draft, vocab_map)
    if design.copy_circuit:
        draft = _with_copy_circuit(draft, sequences or [], vocab_map, tc.vocab_size, seed)
    draft.to(target.device)
    return draft, vocab_map


def _with_copy_circuit(draft, sequences, vocab_map, target_vocab: int, seed: int):
    """The copy circuit on the draft's ids; its sink is the token that starts (nearly) every sequence, if any."""
    from distill.train.copy_circuit import add_copy_circuit

    first = Counter(s[0] for s in sequences if s).most_common(1)
    sink = first[0][0] if first and first[0][1] >= 0.9 * len(sequences) else None
    if sink is not None:
        sink = circuit_sample([[sink]], vocab_map, target_vocab)[0][0]  # in draft ids
    device = draft.device
    return add_copy_circuit(draft.cpu(), circuit_sample(sequences, vocab_map, target_vocab), sink, seed).to(device)


def circuit_sample(sequences, vocab_map, target_vocab: int) -> list[list[int]]:
    """The collected sequences the copy circuit measures the residual scale on (at build, and when training
    calibrates it for evaluation and export), in draft ids: out-of-vocabulary inputs as id 0, as batches.collate
    and decode/ read them."""
    from distill.train.copy_circuit import SCALE_SEQUENCES

    sample = sequences[:SCALE_SEQUENCES]
    if vocab_map is None:
        return [list(s) for s in sample]
    vocab = VocabMap(vocab_map, target_vocab)
    return [vocab.inputs(torch.tensor(s, dtype=torch.long)).tolist() for s in sample]


def apply_freeze(draft, parts: list[str]) -> None:
    for p in draft.parameters():
        p.requires_grad_(True)
    if "embed" in parts:
        draft.get_input_embeddings().weight.requires_grad_(False)
    if "head" in parts:
        draft.get_output_embeddings().weight.requires_grad_(False)
    if "norm" in parts:
        for name, p in draft.named_parameters():
            if "norm" in name:
                p.requires_grad_(False)


def describe(draft, device_latency: bool = True) -> dict:
    """Parameter counts and the measured single-token latency on the current device."""
    total = sum(p.numel() for p in draft.parameters())
    trainable = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    info = {"params": total, "trainable_params": trainable, "layers": draft.config.num_hidden_layers,
            "hidden_size": draft.config.hidden_size, "vocab_size": draft.config.vocab_size}
    if device_latency:
        info["step_ms"] = round(latency.step_latency(draft.eval(), context=128, n_tokens=1) * 1e3, 3)
    return info
