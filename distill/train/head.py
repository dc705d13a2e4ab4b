"""Feature-conditioned heads (`--design feature_head`, EAGLE-3 style): how they are built, where their features
come from, and their training-time test.

    build_head      the head of decode.models.feature_head: the target's embedding, final norm and head rows (frozen,
                    as EAGLE-3 keeps them), plus fc and one decoder layer, from the target's last layer
                    (--init target_layers: fc passes the highest feature layer through) or random (--init random)
    features        stored: the target runs once over every example at the start of the run; its hidden states
                    at the feature layers go to RUN/features/{train,heldout}.f16 (float16, 3H values a token;
                    .bf16 for bf16 targets: --feature-dtype), checked finite as they are written, resumable,
                    reused by resumed runs. online: the target runs inside every step instead
                    (nothing stored; the step pays a target forward), the choice for targets whose features
                    would not fit on disk
    HeadStudent     the training-time test: the head runs --ttt-steps times over a batch; step 0 reads the
                    target's features, step k > 0 its own step k-1 outputs (as decoding does), attending to
                    step 0's keys up to its position and to its own earlier steps' keys at that position only.
                    Step k at head position p predicts x_{p+2+k}; the loss is distillation on the stored top-k
                    there, weighted ttt_decay^k.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig

from decode.errors import UserError
from decode.models.feature_head import FeatureHead, default_layers, layer_config
from decode.models.layer_cut import draft_from_files
from distill.train import losses
from distill.train.student import chunk_rows, pads_invisible

FEATURE_SOURCES = ("stored", "online")
FEATURE_DTYPES = ("float16", "bfloat16")  # how stored features are kept: float16 is finer, bfloat16 reaches 3e38
SUFFIX = {"float16": "f16", "bfloat16": "bf16"}


def store_dtype(choice: str, *target_dtypes: torch.dtype) -> str:
    """--feature-dtype as stored: auto is bfloat16 when the target is bf16 (any of `target_dtypes`: its weights'
    dtype, the dtype it runs in), whose hidden states float16 need not hold (Llama-class massive activations reach
    thousands; the float16 maximum is 65,504); float16 otherwise (finer, and what fp32 targets were measured with)."""
    if choice != "auto":
        return choice
    return "bfloat16" if torch.bfloat16 in target_dtypes else "float16"
# targets whose layers are llama-style (q/k/v/o and gate/up/down projections, an RMSNorm scaled by its weight):
# --init target_layers copies their last layer and final norm into the head; other targets take --init random
LAYER_INIT_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def check_init(init: str, model_type: str) -> None:
    if init == "target_layers" and model_type not in LAYER_INIT_TYPES:
        raise UserError(f"--design feature_head --init target_layers copies a llama-style layer ({', '.join(LAYER_INIT_TYPES)} "
                        f"targets); this target is {model_type!r}: use --init random (embedding and head rows still come "
                        "from the target)")


def feature_layers(cfg, n_layers: int) -> list[int]:
    layers = sorted(set(cfg.feature_layers)) if cfg.feature_layers else default_layers(n_layers)
    if not layers or not all(isinstance(j, int) and 1 <= j < n_layers for j in layers):
        raise UserError(f"--feature-layers {cfg.feature_layers}: give target layer ids in 1..{n_layers - 1} (the "
                        f"hidden state entering that layer); default {default_layers(n_layers)}")
    return layers


# --- construction


@torch.no_grad()
def build_head(cfg, folder: str, draft_ids: list[int] | None, seed: int) -> FeatureHead:
    """The head for the target in `folder` (its last layer's tensors only are read, besides embedding, norm, head)."""
    tc = AutoConfig.from_pretrained(folder)
    n = tc.num_hidden_layers
    src = draft_from_files(folder, [n - 1], torch.float32)  # a 1-layer model: the target's last layer + ends
    torch.manual_seed(seed)
    head = FeatureHead(layer_config(tc), feature_layers(cfg, n), draft_ids,
                       {"name_or_path": folder, "architectures": list(tc.architectures or [])},
                       dict.fromkeys(cfg.head_variant, True))
    std = getattr(tc, "initializer_range", 0.02)
    for p in head.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
    head.embed_tokens.weight.copy_(src.get_input_embeddings().weight)
    out = src.get_output_embeddings().weight
    head.lm_head.weight.copy_(out[torch.tensor(draft_ids)] if draft_ids is not None else out)
    if cfg.init not in ("target_layers", "random"):
        raise UserError(f"--init {cfg.init!r} with --design feature_head: use target_layers or random")
    check_init(cfg.init, tc.model_type)
    if cfg.init == "target_layers":
        head.norm.weight.copy_(src.model.norm.weight)
        _from_layer(head, src.model.layers[0])
    return head


def _from_layer(head: FeatureHead, layer) -> None:
    """The head's layer from a target layer: q/k/v read the features half as that layer reads its input (the
    embedding half starts small and random), fc passes the highest feature layer through unchanged."""
    mine, a = head.layers[0], layer.self_attn
    H = head.config.hidden_size
    for name in ("q_proj", "k_proj", "v_proj"):
        w = getattr(mine.self_attn, name).weight  # (out, 2H): [embedding half | features half]
        w[:, H:].copy_(getattr(a, name).weight)
        if getattr(a, name).bias is not None and getattr(mine.self_attn, name).bias is not None:
            getattr(mine.self_attn, name).bias.copy_(getattr(a, name).bias)  # (qwen2's q/k/v biases: not in the head)
    mine.self_attn.o_proj.weight.copy_(a.o_proj.weight)
    mine.mlp.load_state_dict(layer.mlp.state_dict())
    for norm in ("input_layernorm", "hidden_norm"):
        getattr(mine, norm).weight.copy_(layer.input_layernorm.weight)
    mine.post_attention_layernorm.weight.copy_(layer.post_attention_layernorm.weight)
    head.fc.weight.zero_()
    head.fc.weight[:, -H:].copy_(torch.eye(H))


def freeze_head(head: FeatureHead, parts: list[str]) -> None:
    """The embedding is always the target's (frozen); `head` freezes lm_head, `norm` the final norm."""
    for p in head.parameters():
        p.requires_grad_(True)
    head.embed_tokens.weight.requires_grad_(False)
    if "head" in parts:
        head.lm_head.weight.requires_grad_(False)
    if "norm" in parts:
        head.norm.weight.requires_grad_(False)


# --- features


def target_features(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: list[int]) -> torch.Tensor:
    """(B, T) -> (B, T, len(layers) * H): the hidden states entering `layers` (HF output_hidden_states[j])."""
    out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    return torch.cat([out.hidden_states[j] for j in layers], -1)


class FeatureStore:
    """Features of examples 0..E-1 of one Examples, in one float16 or bfloat16 file (bfloat16 as its int16 bits:
    numpy has no bfloat16): rows offsets[i]:offsets[i+1] are example i's input positions, read as a float16 or
    bfloat16 tensor. `done` (a side file) counts the examples written, so an interrupted extraction resumes."""

    def __init__(self, path: Path, lengths: np.ndarray, width: int, dtype: str = "float16"):
        self.path, self.width, self.dtype = path, width, dtype
        self.offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        total = int(self.offsets[-1])
        mode = "r+" if path.is_file() and path.stat().st_size == total * width * 2 else "w+"
        raw = np.float16 if dtype == "float16" else np.int16
        self.data = np.memmap(path, dtype=raw, mode=mode, shape=(max(total, 1), width))
        self._done = path.with_suffix(".done")

    @property
    def done(self) -> int:
        return int(self._done.read_text()) if self._done.is_file() else 0

    def mark(self, n: int) -> None:
        self.data.flush()
        self._done.write_text(str(n))

    def __getitem__(self, i: int) -> torch.Tensor:
        """(T_i, F) example i's features in the store's dtype: a view of the file, not a copy. On their way to the
        device they are copied twice on the host: into the batch by collate (in shared memory inside a DataLoader
        worker, so handing it to the loop copies nothing) and into pinned memory; the head casts them on the device
        (FeatureHead.fuse). Widening bf16 to float32 here made 5 host copies at twice the bytes."""
        rows = torch.from_numpy(self.data[self.offsets[i]:self.offsets[i + 1]])
        return rows if self.dtype == "float16" else rows.view(torch.bfloat16)

    def write(self, start: int, f: torch.Tensor) -> None:
        """Rows start.. from f (n, width), already in this store's dtype."""
        a = f.cpu().numpy() if self.dtype == "float16" else f.cpu().view(torch.int16).numpy()
        self.data[start:start + len(a)] = a

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.width


@torch.no_grad()
def extract(model, examples, layers: list[int], path: Path, tokens: int, log, dtype: str = "float16") -> FeatureStore:
    """Run the target over every example into a FeatureStore at `path` (stored as `dtype`; a value it cannot hold
    is an error): shortest first, about `tokens` padded tokens a forward (similar lengths pad little); `done`
    counts examples in that order, so a rerun resumes."""
    width = len(layers) * model.config.hidden_size
    lengths = examples.lengths
    store = FeatureStore(path, lengths, width, dtype)
    order = np.argsort(lengths, kind="stable")
    start, n = store.done, len(examples)
    if start >= n:
        return store
    log(f"features: {n - start} of {n} examples into {path} ({store.bytes_per_token} bytes a token)")
    i, chunks = start, 0
    while i < n:
        size = 1  # grow the chunk while its longest (last, in this order) example keeps it within `tokens`
        while i + size < n and (size + 1) * int(lengths[order[i + size]]) <= tokens:
            size += 1
        idx = [int(j) for j in order[i:i + size]]
        seqs = [np.asarray(e["input_ids"]) for e in examples.take(idx)]
        T = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), T, dtype=torch.long)
        mask = torch.zeros(len(seqs), T, dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, :len(s)], mask[b, :len(s)] = torch.from_numpy(s), 1
        f = target_features(model, ids.to(model.device), mask.to(model.device), layers)
        kept, real = f.to(getattr(torch, store.dtype)), mask.to(f.device).bool()
        if not torch.isfinite(kept[real]).all():  # one check a chunk, on what is stored
            raise nonfinite_features(f[real], layers, store.dtype)
        for b, (j, s) in enumerate(zip(idx, seqs)):
            store.write(int(store.offsets[j]), kept[b, :len(s)])
        i, chunks = i + len(idx), chunks + 1
        if chunks % 16 == 0 or i == n:
            store.mark(i)
    return store


def nonfinite_features(f: torch.Tensor, layers: list[int], dtype: str) -> UserError:
    """The error for features that would be stored non-finite: the target's own (then nothing stores them), or
    beyond float16's range (then bfloat16 does)."""
    if not torch.isfinite(f).all():
        return UserError(f"the target's hidden states entering layers {layers} are not finite in {f.dtype} (the "
                         "target itself overflows on this data): run it in another dtype or use other --feature-layers")
    return UserError(f"features of layers {layers} reach {f.abs().max().item():.4g}, beyond {dtype}'s range "
                     f"(float16 ends at 65,504): store them as bfloat16 (--feature-dtype bfloat16)")


def write_info(run_dir: Path, info: dict) -> None:
    (run_dir / "features" / "features.json").write_text(json.dumps(info, indent=2) + "\n")


# --- the training-time test


class HeadStudent(torch.nn.Module):
    """The head as training sees it. forward(input_ids (B, T) target ids, attention_mask, sel (N,) flat indices
    into B*T of predicting positions (position i predicts x_{i+1}, as for standalone drafts), features (B, T, F))
    -> (loss, parts) with targets (collate's topk_ids, topk_logprobs, labels in draft ids), or (N,) draft-id
    argmax at step 0 (-1 where no head position predicts that token: i = 0) with argmax=True."""

    def __init__(self, head: FeatureHead, weights: dict, jsd_beta: float, chunk_bytes: int, ttt_steps: int,
                 ttt_decay: float):
        super().__init__()
        self.model = head
        self.weights, self.jsd_beta, self.rows = weights, jsd_beta, chunk_rows(head.draft_vocab_size, chunk_bytes)
        self.ttt_steps, self.ttt_decay = ttt_steps, ttt_decay

    def compile_layers(self) -> None:
        """torch.compile the head's forward in place (its state dict keeps its keys); the loss stays eager."""
        self.model.compile()

    def unroll(self, input_ids: torch.Tensor, features: torch.Tensor, steps: int):
        """Yield the head's outputs (B, n = T-1, H) for TTT steps 0..steps-1: at step k head position p reads
        x_{p+1+k} (the target's token; 0 past the end) at rotary position p+1+k, and f_p (k = 0) or its own step
        k-1 output at p; it attends to step 0's keys at positions <= p and to steps 1..k's keys at p only."""
        head = self.model
        B, T = input_ids.shape
        n = T - 1
        tok, hid = input_ids[:, 1:], head.fuse(features[:, :-1])  # (B, n), (B, n, H)
        pos = torch.arange(1, T, device=input_ids.device)[None].expand(B, n)
        causal = head.causal(n, tok.device)  # (n, n), within the layer's window where it has one
        eye = torch.eye(n, dtype=torch.bool, device=tok.device)
        past = None
        for k in range(steps):
            mask = None if k == 0 else torch.cat([causal] + [eye] * k, 1)  # (n, (k + 1) n)
            out, kk, vv = head(tok, hid, pos + k, past, mask)  # (B, n, H)
            past = (kk, vv) if past is None else (torch.cat([past[0], kk], 2), torch.cat([past[1], vv], 2))
            yield out
            tok = torch.cat([input_ids[:, k + 2:], input_ids.new_zeros(B, k + 2)], 1)[:, :n]
            hid = out

    def forward(self, input_ids, attention_mask, sel, targets: dict | None = None, argmax: bool = False,
                features: torch.Tensor | None = None):
        head = self.model
        feats = features if features is not None else targets["features"]
        T = input_ids.shape[1]
        b_idx, i_idx = sel // T, sel % T
        total, parts, weight = 0.0, {}, 0.0
        for k, out in enumerate(self.unroll(input_ids, feats, 1 if argmax else self.ttt_steps)):
            p = i_idx - 1 - k  # the head position whose step k predicts the token of sel's position i
            # (N,) rows that have such a position (none before the sequence starts): a mask for the loss's masked
            # mean, not a boolean index, whose data-dependent shape would be a host sync
            ok = p >= 0
            h = out[b_idx, p.clamp(min=0)]  # (N, H)
            if argmax:
                pred = torch.cat([head.logits(h[s:s + self.rows]).argmax(-1) for s in range(0, len(h), self.rows)])
                return torch.where(ok, pred, -1)
            loss_k, parts_k = losses.chunked_loss(h, head.logits, targets.get("topk_ids"), targets.get("topk_logprobs"),
                                                  targets.get("labels"), ok, self.weights, self.jsd_beta, self.rows)
            w = self.ttt_decay ** k
            total, weight = total + w * loss_k, weight + w
            parts[f"step{k}"] = loss_k.detach()
            if k == 0:
                parts.update(parts_k)
        return total / weight, parts


class OnlineFeatures:
    """--features online: the target (frozen, not part of the trained module) runs inside each step."""

    def __init__(self, model, layers: list[int]):
        self.model, self.layers = model, layers
        self.needs_mask = not pads_invisible(model)  # as Student: no padding mask, no host read, where it changes nothing

    @torch.no_grad()
    def __call__(self, batch: dict) -> torch.Tensor:
        """(B, T, F) in the target's dtype (the head casts them: FeatureHead.fuse)."""
        mask = batch["attention_mask"] if self.needs_mask else None
        return target_features(self.model, batch["input_ids"], mask, self.layers)
