"""A draft cut from the target: a model of the target's class with a chosen subset of its decoder layers.

`layers:0,1` as a --draft spec cuts from the loaded target (draft_from_layers); the `target_layers` draft design
cuts from the target's safetensors files (draft_from_files), reading only the tensors the draft keeps, so a 2-layer
draft of a 70B target never needs the 70B in memory. Both find the decoder-layer list through the model's own
modules (model.layers, transformer.h, gpt_neox.layers, model.decoder.layers, ...) and rename keys under exactly
that prefix, so every layer's cache index is right and the result is a plain HF model that saves and reloads.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from decode.errors import UserError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def parse_layers(text: str, n_layers: int) -> list[int]:
    """'0,1,28,29' -> [0, 1, 28, 29], checked against the target's depth."""
    try:
        idx = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"layer list {text!r} must be comma-separated integers, e.g. layers:0,1,28,29") from None
    if not idx:
        raise UserError("layer list is empty; e.g. layers:0,1")
    bad = [i for i in idx if not 0 <= i < n_layers]
    if bad:
        raise UserError(f"layer indices {bad} out of range: the target has {n_layers} layers (0..{n_layers - 1})")
    if len(set(idx)) != len(idx):
        raise UserError(f"layer list {text!r} repeats an index")
    return idx


# --- where the layers are, and what a cut keeps


def layer_list(model) -> tuple[str, torch.nn.ModuleList]:
    """(qualified name, module) of the model's decoder-layer list: the shallowest ModuleList of the decoder-layer
    class (transformers names it in _no_split_modules), else of length num_hidden_layers."""
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    for pick in (lambda m: type(m[0]).__name__ in layer_classes, lambda m: len(m) == model.config.num_hidden_layers):
        found = sorted(((n, m) for n, m in lists if pick(m)), key=lambda nm: nm[0].count("."))
        if found:
            return found[0]
    raise UserError(f"cannot find the decoder layers of {type(model).__name__}: no ModuleList of its layers")


def skeleton(config):
    """The model of `config` on the meta device: its module tree and parameter shapes, no memory."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def cut_keys(keys, prefix: str, layers: list[int]) -> dict[str, str]:
    """{draft key: source key}: every key outside `prefix` as is, and the chosen layers' keys renumbered
    ({prefix}.{layers[d]}.x -> {prefix}.{d}.x). Works on model keys and on file keys alike."""
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.(.*)")
    dst = {s: d for d, s in enumerate(layers)}
    out = {}
    for key in keys:
        m = pattern.fullmatch(key)
        if m is None:
            out[key] = key
        elif int(m.group(1)) in dst:
            out[f"{prefix}.{dst[int(m.group(1))]}.{m.group(2)}"] = key
    return out


def cut_config(config, layers: list[int]):
    """The target's config with only `layers`, each keeping its per-layer settings (attention kind, MoE or dense)."""
    cfg = AutoConfig.for_model(**config.to_dict())
    cfg.num_hidden_layers = len(layers)
    for name in ("layer_types", "no_rope_layers"):  # one entry per layer: sliding/full attention, RoPE or not
        if getattr(config, name, None):
            setattr(cfg, name, [getattr(config, name)[i] for i in layers])
    if getattr(config, "decoder_sparse_step", None) is not None:  # Qwen2-MoE: MoE or dense MLP per layer
        def sparse(i):
            return i not in config.mlp_only_layers and config.num_experts > 0 and (i + 1) % config.decoder_sparse_step == 0

        cfg.decoder_sparse_step = 1
        cfg.mlp_only_layers = [d for d, s in enumerate(layers) if not sparse(s)]
    return cfg


def check_structure(target, draft, layers: list[int]) -> None:
    """Refuse a cut whose draft layer d is not built like target layer layers[d] (a per-layer setting the cut
    does not carry over), rather than load it with some weights left random."""
    t_list, d_list = layer_list(target)[1], layer_list(draft)[1]
    for d, s in enumerate(layers):
        want = {k: v.shape for k, v in t_list[s].state_dict().items()}
        if {k: v.shape for k, v in d_list[d].state_dict().items()} != want:
            raise UserError(f"cannot cut layer {s} of this {target.config.model_type} target: its layers differ in a "
                            "setting the cut does not carry over; choose other layers or use init=random")


# --- the cut from a loaded target


def draft_from_layers(target, layers: list[int]):
    """A draft of the target's class holding copies of the chosen target layers, embeddings, final norm and head."""
    draft = AutoModelForCausalLM.from_config(cut_config(target.config, layers), dtype=target.dtype)
    check_structure(target, draft, layers)
    src = target.state_dict()
    mapping = cut_keys(src, layer_list(target)[0], layers)
    draft.load_state_dict({k: src[mapping[k]] for k in draft.state_dict()}, strict=True)
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.to(target.device).eval()


# --- the cut from the target's files


def has_safetensors(folder) -> bool:
    return (Path(folder) / INDEX_FILE).is_file() or (Path(folder) / SINGLE_FILE).is_file()


def weight_files(folder) -> dict[str, Path]:
    """{file key: safetensors file holding it}, from the shard index or the single file's header."""
    folder = Path(folder)
    if (folder / INDEX_FILE).is_file():
        index = json.loads((folder / INDEX_FILE).read_text())["weight_map"]
        return {k: folder / f for k, f in index.items()}
    if not (folder / SINGLE_FILE).is_file():
        raise UserError(f"{folder} has no safetensors weights ({SINGLE_FILE} or {INDEX_FILE}); save the target "
                        "with save_pretrained(..., safe_serialization=True)")
    with safe_open(folder / SINGLE_FILE, "pt") as f:
        return {k: folder / SINGLE_FILE for k in f.keys()}


def read_tensors(files: dict[str, Path], keys) -> dict[str, torch.Tensor]:
    """The named tensors only, each read from its file (safe_open reads a tensor's bytes, not the whole file)."""
    by_file: dict[Path, list[str]] = {}
    for key in keys:
        by_file.setdefault(files[key], []).append(key)
    out = {}
    for path, names in by_file.items():
        with safe_open(path, "pt") as f:
            out.update({k: f.get_tensor(k) for k in names})
    return out


def file_layer_prefix(file_keys, model_prefix: str, n_layers: int) -> str:
    """The files' name for the layer list: the model's (model.layers) or a name ending in a tail of it (h.N in
    old GPT-2 checkpoints, language_model.model.layers.N in multimodal ones), holding exactly n_layers layers."""
    parts = model_prefix.split(".")
    for i in range(len(parts)):
        pattern = re.compile(r"((?:.*\.)?" + re.escape(".".join(parts[i:])) + r")\.(\d+)\.")
        found: dict[str, set] = {}
        for key in file_keys:
            if m := pattern.match(key):
                found.setdefault(m.group(1), set()).add(int(m.group(2)))
        for prefix, idx in found.items():
            if idx == set(range(n_layers)):
                return prefix
    raise UserError(f"the target's weight files have no layer list like {model_prefix}.N with {n_layers} layers; "
                    "is the folder's config.json the one of its weights?")


def config_dtype(config) -> torch.dtype:
    """The dtype the target's weights are stored in, as its config says (fp32 when it does not say)."""
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def draft_from_files(folder, layers: list[int], dtype: torch.dtype | None = None):
    """The draft_from_layers draft, read from the target folder's safetensors: only the chosen layers' tensors and
    the ones outside the layer list (embeddings, final norm, head). transformers loads them, so its own key
    conversions (fused MoE experts, old prefixes) and tied heads apply as for the target itself."""
    tc = AutoConfig.from_pretrained(folder)
    dtype = dtype or config_dtype(tc)
    cfg = cut_config(tc, layers)
    target_skeleton, draft_skeleton = skeleton(tc), skeleton(cfg)
    check_structure(target_skeleton, draft_skeleton, layers)
    files = weight_files(folder)
    prefix = file_layer_prefix(files, layer_list(target_skeleton)[0], tc.num_hidden_layers)
    mapping = cut_keys(files, prefix, layers)
    src = read_tensors(files, mapping.values())
    state = {k: src[v] for k, v in mapping.items()}
    draft, info = type(draft_skeleton).from_pretrained(None, config=cfg, state_dict=state, dtype=dtype,
                                                       output_loading_info=True)
    if info["missing_keys"]:
        raise UserError(f"the target's weight files in {folder} lack {sorted(info['missing_keys'])[:3]} (needed by the "
                        f"draft); check that the folder holds all of the target's weights")
    draft.generation_config = target_generation_config(folder, tc)
    return draft.eval()


def target_generation_config(folder, config) -> GenerationConfig:
    try:
        return GenerationConfig.from_pretrained(folder)
    except OSError:  # no generation_config.json: the model config's token ids
        return GenerationConfig.from_model_config(config)
