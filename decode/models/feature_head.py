"""Feature-conditioned draft heads (EAGLE-3 style): the model, its folder and its step.

A head drafts from the target's own hidden states. Head position p reads token x_{p+1} and the target's features
at p, f_p = concat(h_a, h_b, h_c): the target's hidden states entering layers a < b < c (low, mid, high; HF
`output_hidden_states[j]`, vLLM's aux layer j). It predicts x_{p+2}:

    e = embed(x_{p+1})                         (H,)   the target's embedding, frozen
    s = fc(f_p)                                 (H,)   fc: (3H -> H); later draft steps pass the head's own output
    h = layer(cat(norm(e), norm(s)), residual=s)      one llama decoder layer whose q/k/v read 2H
    logits = lm_head(norm(h))                   (V_draft,)  the target's head rows for the draft vocabulary

Rotary position of head position p is p + 1, its input token's position (as speculators and vLLM place it).
speculators' eagle3 switches (VARIANTS; ours are all off, speculators' trainer turns the first three on for eagle3):
norm_before_residual (the layer's residual is norm(s), not s), norm_before_fc (one RMSNorm over f_p's 3H values
before fc), fc_norm (an RMSNorm per feature layer before fc), norm_output (the head's output is norm(h): the next
draft step reads it, and lm_head reads it as it is). A layer config with `sliding_attention` attends to the last
`sliding_window` positions only.
The folder is the speculators format that vLLM serves as an `eagle3` speculative config: config.json
(`speculators_model_type: eagle3`), model.safetensors with speculators' tensor names, and for a reduced
vocabulary `d2t` (target id - draft id, EAGLE-3's offsets) and `t2d` (V,) bool. specdistill.json and the
target's tokenizer sit beside them, as in every draft folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from decode.errors import UserError

FORMAT = "eagle3"  # speculators_model_type
VARIANTS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")  # speculators' eagle3 switches
LAYER_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
              "rms_norm_eps", "hidden_act", "max_position_embeddings", "vocab_size", "rope_parameters", "rope_scaling",
              "rope_theta", "attention_bias", "mlp_bias", "tie_word_embeddings")


def default_layers(n_layers: int) -> list[int]:
    """The feature layers vLLM and speculators default to, (2, L // 2, L - 3), kept inside 1..L-1 and distinct
    (vLLM collects each id once), so small test models get 1-3 of them."""
    return sorted({min(max(j, 1), n_layers - 1) for j in (2, n_layers // 2, n_layers - 3)})


def is_head_folder(folder: str | Path) -> bool:
    path = Path(folder) / "config.json"
    try:
        return path.is_file() and json.loads(path.read_text()).get("speculators_model_type") == FORMAT
    except json.JSONDecodeError:
        return False


def layer_config(target_config) -> LlamaConfig:
    """The head's one decoder layer, shaped like the target's layers: a llama layer whatever the target's kind
    (read through the config's attributes, so gpt2's n_embd counts as hidden_size)."""
    c = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
    kept = {k: getattr(c, k) for k in LAYER_KEYS if getattr(c, k, None) is not None}
    kept.setdefault("num_key_value_heads", c.num_attention_heads)
    kept.setdefault("head_dim", c.hidden_size // c.num_attention_heads)
    kept.setdefault("intermediate_size", 4 * c.hidden_size)
    kept.setdefault("rms_norm_eps", getattr(c, "layer_norm_eps", None) or getattr(c, "layer_norm_epsilon", None) or 1e-6)
    if kept.get("hidden_act") not in ACT2FN:
        kept["hidden_act"] = "silu"
    kept["tie_word_embeddings"] = False  # the head's lm_head is its own (draft-vocabulary rows), never the embedding
    return LlamaConfig(**kept, num_hidden_layers=1)


def sliding_window(config) -> int | None:
    """The layer's attention window in positions (a `sliding_attention` layer, as speculators' trainer writes them
    by default: 2048), or None for full attention."""
    types = getattr(config, "layer_types", None) or []
    w = getattr(config, "sliding_window", None)
    return int(w) if w and types and types[0] == "sliding_attention" else None


def windowed(mask: torch.Tensor | None, pos: torch.Tensor, start: int, n: int, w: int) -> torch.Tensor:
    """The (n, start + n) attention mask of n new positions after `start` cached ones (mask None: causal; else a
    token tree's level, its rows at head positions `pos` (n,)), less the keys w or more positions behind each query.
    A cached key's column is its head position, and so is a new one's in a chain."""
    kpos = torch.arange(start + n, device=pos.device)
    if mask is None:
        mask = kpos[None] <= pos[:, None]
    else:
        kpos[start:] = pos
    return mask & (kpos[None] > pos[:, None] - w)


class HeadLayer(torch.nn.Module):
    """EAGLE-3's first layer: attention reads cat(norm(embedding), norm(features)) (2H), the residual is the features
    (their norm under norm_before_residual)."""

    def __init__(self, c: LlamaConfig, norm_before_residual: bool = False):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.norm_before_residual = norm_before_residual
        self.input_layernorm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        bias = bool(getattr(c, "attention_bias", False))
        attn = torch.nn.Module()
        attn.q_proj = torch.nn.Linear(2 * c.hidden_size, self.n_heads * self.head_dim, bias=bias)
        attn.k_proj = torch.nn.Linear(2 * c.hidden_size, self.n_kv * self.head_dim, bias=bias)
        attn.v_proj = torch.nn.Linear(2 * c.hidden_size, self.n_kv * self.head_dim, bias=bias)
        attn.o_proj = torch.nn.Linear(self.n_heads * self.head_dim, c.hidden_size, bias=bias)
        self.self_attn = attn
        self.post_attention_layernorm = LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = LlamaMLP(c)

    def forward(self, emb, hid, cos, sin, past=None, mask=None):
        """emb, hid: (B, T, H); cos, sin: (B, T, hd); past: (k, v) each (B, kv, S, hd) seen before these T positions;
        mask: (T, S + T) bool (True = attend), None = causal over past + these -> (out (B, T, H), k, v (B, kv, T, hd))."""
        B, T, _ = hid.shape
        normed = self.hidden_norm(hid)
        x = torch.cat([self.input_layernorm(emb), normed], -1)  # (B, T, 2H)
        a = self.self_attn
        q = a.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, heads, T, hd)
        k = a.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        kk, vv = (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)) if past is not None else (k, v)
        if mask is None and kk.shape[2] > T:  # T new positions after S cached ones: causal, offset by S
            mask = torch.ones(T, kk.shape[2], dtype=torch.bool, device=q.device).tril(kk.shape[2] - T)
        group = self.n_heads // self.n_kv
        if group > 1:  # one K/V head per query head, so SDPA can take its fused kernels with a mask
            kk, vv = kk.repeat_interleave(group, 1), vv.repeat_interleave(group, 1)
        att = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=mask is None and T > 1)
        h = (normed if self.norm_before_residual else hid) + a.o_proj(att.transpose(1, 2).reshape(B, T, -1))
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class HeadCache:
    """The head's K/V for decoding: (1, kv_heads, max_len, hd) each, `length` positions valid; crop(-n) rolls back."""

    def __init__(self, layer: HeadLayer, max_len: int, dtype, device):
        self.k = torch.empty(1, layer.n_kv, max_len, layer.head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    def crop(self, n: int) -> None:
        assert n <= 0 and -n <= self.length
        self.length += n


class FeatureHead(torch.nn.Module):
    """The head (module docstring). `layers`: the target layers whose input hidden states are its features;
    `draft_ids`: the target id of each draft-vocabulary id (None = the target's whole vocabulary)."""

    def __init__(self, config: LlamaConfig, layers: list[int], draft_ids: list[int] | None = None,
                 verifier: dict | None = None, variant: dict | None = None):
        super().__init__()
        self.config, self.feature_layers = config, list(layers)
        self.verifier = verifier or {}
        self.variant = {k: bool((variant or {}).get(k)) for k in VARIANTS}
        H, V, eps = config.hidden_size, config.vocab_size, config.rms_norm_eps
        self.draft_vocab_size = len(draft_ids) if draft_ids is not None else V
        self.embed_tokens = torch.nn.Embedding(V, H)
        if self.variant["norm_before_fc"]:
            self.input_norm = LlamaRMSNorm(len(layers) * H, eps=eps)
        if self.variant["fc_norm"]:
            self.fc_norm = torch.nn.ModuleList([LlamaRMSNorm(H, eps=eps) for _ in layers])
        self.fc = torch.nn.Linear(len(layers) * H, H, bias=False)
        self.layers = torch.nn.ModuleList([HeadLayer(config, self.variant["norm_before_residual"])])
        self.norm = LlamaRMSNorm(H, eps=eps)
        self.window = sliding_window(config)
        self.lm_head = torch.nn.Linear(H, self.draft_vocab_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        if draft_ids is not None:
            ids = torch.as_tensor(draft_ids, dtype=torch.long)
            self.register_buffer("d2t", ids - torch.arange(len(ids)))  # EAGLE-3's offsets: target id - draft id
            t2d = torch.zeros(V, dtype=torch.bool)
            t2d[ids] = True
            self.register_buffer("t2d", t2d)
        else:
            self.d2t = self.t2d = None

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def draft_ids(self) -> torch.Tensor | None:
        """(V_draft,) target id of each draft id, None for the whole vocabulary."""
        return None if self.d2t is None else self.d2t + torch.arange(len(self.d2t), device=self.d2t.device)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(..., len(layers) * H) target features -> (..., H), the head's hidden input at a verified position."""
        x = features.to(self.dtype)
        if self.variant["norm_before_fc"]:
            x = self.input_norm(x)
        if self.variant["fc_norm"]:
            x = torch.cat([norm(part) for norm, part in zip(self.fc_norm, x.chunk(len(self.fc_norm), -1))], -1)
        return self.fc(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., H) head outputs (forward's: already normed under norm_output) -> (..., V_draft)."""
        return self.lm_head(h if self.variant["norm_output"] else self.norm(h))

    def causal(self, n: int, device) -> torch.Tensor:
        """(n, n) bool: position i attends to j <= i, within the layer's window where it has one."""
        i = torch.arange(n, device=device)
        return (i[None] <= i[:, None]) & (i[None] > i[:, None] - (self.window or n + 1))

    def rope(self, positions: torch.Tensor):
        """(B, T) rotary positions -> cos, sin (B, T, hd)."""
        return self.rotary_emb(self.fc.weight, positions)

    def forward(self, ids, hid, positions, past=None, mask=None):
        """ids (B, T) target ids, hid (B, T, H), positions (B, T) -> (out (B, T, H), k, v) (HeadLayer.forward)."""
        cos, sin = self.rope(positions)
        if mask is None and past is None and self.window and ids.shape[1] > self.window:
            mask = self.causal(ids.shape[1], ids.device)
        out, k, v = self.layers[0](self.embed_tokens(ids), hid, cos, sin, past, mask)
        return (self.norm(out) if self.variant["norm_output"] else out), k, v

    # --- decoding: one sequence, a preallocated cache

    def new_cache(self, max_len: int) -> HeadCache:
        return HeadCache(self.layers[0], max_len, self.dtype, self.device)

    @torch.no_grad()
    def step(self, ids: list[int], hid: torch.Tensor, cache: HeadCache, tree=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run len(ids) positions after the cached ones: ids (n,) target ids, hid (n, H) -> (out (n, H), logits of
        the last position (V_draft,)). Head position p sits at rotary position p + 1.
        tree = (positions (n,), mask (n, start + n) bool): a token tree's level (decode.drafting.tree), each row at head
        position positions[i] attending where mask[i] is True; the logits are then every row's, (n, V_draft)."""
        n, start = len(ids), cache.length
        if start + n > cache.k.shape[2]:
            raise ValueError(f"head cache holds {cache.k.shape[2]} positions; {start + n} needed")
        x = torch.tensor([ids], device=self.device)
        pos, mask = (tree[0], tree[1]) if tree is not None else (torch.arange(start, start + n, device=self.device), None)
        if self.window and start + n > self.window:
            mask = windowed(mask, pos, start, n, self.window)
        past = (cache.k[:, :, :start], cache.v[:, :, :start]) if start else None
        out, k, v = self.forward(x, hid[None].to(self.dtype), (pos + 1)[None], past, mask)
        cache.k[:, :, start:start + n], cache.v[:, :, start:start + n] = k, v
        cache.length = start + n
        return out[0], self.logits(out[0] if tree is not None else out[0, -1])

    # --- the folder

    def speculators_config(self, gamma: int) -> dict:
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": FORMAT,
            "speculators_version": "0.9.0",
            # num_aux_hidden_states: vLLM sizes fc by it (3 when absent), so heads of 1-2 feature layers need it
            "transformer_layer_config": {**{k: v for k, v in self.config.to_diff_dict().items()
                                            if k not in ("architectures", "transformers_version")},
                                         "num_aux_hidden_states": len(self.feature_layers)},
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": None,
            "eagle_aux_hidden_state_layer_ids": self.feature_layers,
            **self.variant,  # norm_before_residual written out either way: vLLM reads a missing one as true
            "embed_requires_grad": False,
            "speculators_config": {
                "algorithm": FORMAT,
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": gamma}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": self.verifier.get("name_or_path"),
                             "architectures": self.verifier.get("architectures", [])},
            },
            "torch_dtype": str(self.dtype).removeprefix("torch."),
        }

    def save(self, folder: str | Path, gamma: int = 3, state_dict: dict | None = None) -> Path:
        """config.json + model.safetensors (every tensor, the frozen embedding too: vLLM then needs nothing else)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        sd = state_dict if state_dict is not None else self.state_dict()
        sd = {k: v.detach().contiguous().cpu() for k, v in sd.items() if not k.startswith("rotary_emb.")}
        if sd.get("d2t") is not None:  # vLLM's eagle3 takes draft ids in ascending target-id order: rows follow
            ids = sd["d2t"] + torch.arange(len(sd["d2t"]))
            order = ids.argsort()
            sd["d2t"] = ids[order] - torch.arange(len(ids))
            sd["lm_head.weight"] = sd["lm_head.weight"][order].contiguous()
        save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
        (folder / "config.json").write_text(json.dumps(self.speculators_config(gamma), indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path, dtype=None, device: str = "cpu") -> FeatureHead:
        folder = Path(folder)
        cfg = json.loads((folder / "config.json").read_text())
        try:
            lc = LlamaConfig(**{k: v for k, v in cfg["transformer_layer_config"].items() if k != "model_type"})
            layers = list(cfg["eagle_aux_hidden_state_layer_ids"])
            verifier = cfg.get("speculators_config", {}).get("verifier", {})
        except (KeyError, TypeError) as e:
            raise UserError(f"{folder}/config.json is not an eagle3 speculators config: missing {e}") from None
        if lc.num_hidden_layers != 1:
            raise UserError(f"{folder}: an eagle3 head of {lc.num_hidden_layers} layers; this decoder runs one-layer "
                            "heads (speculators' eagle3 default, --num-layers 1)")
        sd = load_file(str(folder / "model.safetensors"))
        draft_ids = (sd["d2t"] + torch.arange(len(sd["d2t"]))).tolist() if "d2t" in sd else None
        head = cls(lc, layers, draft_ids, verifier, {k: cfg.get(k) for k in VARIANTS})
        missing, unexpected = head.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.startswith("rotary_emb.")]
        if missing or unexpected:
            raise UserError(f"{folder}/model.safetensors does not match its config: missing {missing[:4]}, "
                            f"unexpected {unexpected[:4]}")
        return head.to(device=device, dtype=dtype or torch.float32).eval()


