"""Tiny random targets of the architectures users bring: 4 layers x 64 wide, the default tokenizer's vocabulary.

    save_target("gemma2", folder) -> folder     a saved HF model folder (config, safetensors, tokenizer)
    save_target("llama3-bf16", folder)          the same in bfloat16 (BF16: the shapes GPU users bring)

Each entry is the model_type plus what that architecture needs to be itself at this size: a sliding window
that the short test prompts actually cross, Gemma2's soft-capping, a MoE's experts, Phi-1/2's head bias. The
weights are random with a large initializer range, so next-token distributions are peaked and greedy outputs are
not decided by near-ties.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

HIDDEN, LAYERS, HEADS, KV_HEADS = 64, 4, 4, 2

# model_type -> config settings beyond the common ones (sizes, token ids)
ARCHITECTURES = {
    "llama": {"head_dim": 64},  # the copy circuit's least head_dim, so the default recipe runs whole here
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "mistral": {"sliding_window": 8},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": 8, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
               "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16},
    "phi": {"partial_rotary_factor": 0.5},
    "phi3": {},
    "gpt2": {},
    "opt": {},
    "gpt_neox": {"rotary_pct": 0.5},
    "starcoder2": {"sliding_window": 8},
    "olmo2": {},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 64, "decoder_sparse_step": 2, "mlp_only_layers": [0]},
}

# Targets as GPU users bring them, saved in bfloat16 (name -> model_type and its settings): Llama-3.x (llama3 RoPE,
# grouped-query attention, untied head), a Llama with default RoPE and GQA (the copy circuit's case) and a Qwen2.
# Greedy output is judged by the low-precision rule there (decode/drafting/lossless.py), exact in float32.
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
BF16 = {
    "llama3-bf16": ("llama", {"head_dim": 64, "rope_parameters": LLAMA3_ROPE, "tie_word_embeddings": False}),
    "llama-bf16": ("llama", {"head_dim": 64}),
    "qwen2-bf16": ("qwen2", {}),
}

# names some configs use for the common sizes
_ALIASES = {"gpt2": {"n_embd": HIDDEN, "n_layer": LAYERS, "n_head": HEADS, "n_positions": 512},
            "opt": {"ffn_dim": 2 * HIDDEN, "word_embed_proj_dim": HIDDEN}}


def config(arch: str, tok):
    """The tiny config of an ARCHITECTURES or BF16 name."""
    arch, extra = BF16[arch] if arch in BF16 else (arch, ARCHITECTURES[arch])
    common = dict(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=512,
                  initializer_range=0.3, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    return AutoConfig.for_model(arch, **{**common, **_ALIASES.get(arch, {}), **extra})


def save_target(arch: str, folder: str | Path, tok, seed: int = 0) -> str:
    """Save a tiny random `arch` target with tokenizer `tok` to folder (created) and return its path."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(arch, tok)).eval()
    if arch in BF16:
        model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
