"""The model card's design and training sections, from the draft folder's specdistill.json (a standalone draft or
a feature head)."""

from __future__ import annotations

from decode.models.draft_folder import VOCAB_MAP_FILE
from decode.models.feature_head import FORMAT as HEAD_FORMAT
from distill.publish import card_parallel


def fmt(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec) if isinstance(x, (int, float)) else str(x)


def design_section(meta: dict, config: dict, target_config: dict, n_params: int) -> str:
    d = meta.get("design") or {}
    layers = d.get("layers") or config.get("num_hidden_layers")
    n_target = target_config.get("num_hidden_layers")
    if isinstance(layers, list):
        layers = f"{len(layers)} of the target's {n_target}: {layers}"
    vocab = d.get("vocab") or "full"
    vocab = (
        f"full ({config.get('vocab_size'):,})"
        if vocab == "full"
        else f"{vocab:,} of {target_config.get('vocab_size'):,} (reduced; map in `{VOCAB_MAP_FILE}`)"
        if isinstance(vocab, int)
        else str(vocab)
    )
    # widths come from config.json (what was actually published; the design leaves None for "the target's")
    rows = [
        ("layers", layers),
        ("hidden size", config.get("hidden_size")),
        ("intermediate size", config.get("intermediate_size")),
        (
            "attention heads / KV heads",
            f"{config.get('num_attention_heads')} / {config.get('num_key_value_heads')}",
        ),
        ("init", d.get("init") or meta.get("init") or "unknown"),
        ("vocabulary", vocab),
        ("parameters", f"{d.get('params') or n_params:,}"),
        ("architecture", ", ".join(config.get("architectures") or [])),
    ]
    if d.get("freeze"):
        rows.append(("frozen in training", ", ".join(map(str, d["freeze"]))))
    if card_parallel.mask_of(config) is not None:
        rows += card_parallel.design_rows(meta, config)
    return "\n".join(["## Design", "", "| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


def is_head(config: dict) -> bool:
    """Whether a published config.json is a feature head's (speculators eagle3) rather than an HF model's."""
    return config.get("speculators_model_type") == HEAD_FORMAT


def head_design_section(meta: dict, config: dict, target_config: dict, n_params: int) -> str:
    """A feature head's design: feature layers, its one layer's shape, draft vocabulary, training-time unroll."""
    d, layer = meta.get("design") or {}, config.get("transformer_layer_config") or {}
    ids = config.get("eagle_aux_hidden_state_layer_ids") or d.get("feature_layers") or []
    n_target, v_target = target_config.get("num_hidden_layers"), target_config.get("vocab_size")
    n_draft = config.get("draft_vocab_size")
    vocab = (f"{n_draft:,} of {v_target:,} (reduced; `d2t`/`t2d` in model.safetensors map its ids)"
             if isinstance(n_draft, int) and isinstance(v_target, int) and n_draft != v_target
             else f"full ({fmt(n_draft or layer.get('vocab_size'), ',')})")
    rows = [
        ("kind", "feature head (EAGLE-3 style): one llama decoder layer over the target's hidden states"),
        ("format", f"speculators `{HEAD_FORMAT}` ({', '.join(config.get('architectures') or [])}); "
                   "vLLM `method: eagle3`"),
        ("feature layers", f"{len(ids)} of the target's {n_target}: {ids} (the hidden states entering them)"),
        ("hidden size", layer.get("hidden_size")),
        ("intermediate size", layer.get("intermediate_size")),
        ("attention heads / KV heads", f"{layer.get('num_attention_heads')} / {layer.get('num_key_value_heads')}"),
        ("init", d.get("init") or meta.get("init") or "unknown"),
        ("vocabulary", vocab),
        ("parameters", f"{d.get('params') or n_params:,} (the target's embedding, frozen, included)"),
    ]
    if d.get("trainable_params"):
        rows.append(("trained parameters", f"{d['trainable_params']:,}"))
    if d.get("ttt_steps"):
        rows.append(("training-time test steps", d["ttt_steps"]))
    if d.get("features"):
        rows.append(("features in training", d["features"]))
    if d.get("freeze"):
        rows.append(("frozen in training", ", ".join(map(str, d["freeze"]))))
    return "\n".join(["## Design", "", "| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


def training_section(meta: dict) -> str:
    data, loss = meta.get("data") or {}, meta.get("loss") or {}
    loss_s = " + ".join(f"{w} × {name}" for name, w in loss.items()) or "unknown"
    lines = [
        "## Training",
        "",
        f"- data: `{data.get('path', 'unknown')}` ({fmt(data.get('rows'), ',')} rows, {fmt(data.get('tokens'), ',')} tokens), "
        f"target outputs on prompts `{data.get('prompts', 'unknown')}`",
        f"- loss: {loss_s}",
        f"- steps: {fmt(meta.get('step'), ',')}",
        "",
        "Exact commands that produced this draft:",
        "",
        "```bash",
    ]
    lines += list(meta.get("commands") or ["# (not recorded in specdistill.json)"])
    return "\n".join(lines + ["```"])
