"""Model shapes for measuring with random weights: Llama-3.1-8B's, and a tiny one of the same structure.

    shape_config("8b")    LlamaConfig of Llama-3.1-8B's shape: 32 layers x 4096, GQA 32/8, FFN 14336, llama3 RoPE,
                          untied head, bf16; its vocabulary is the default tokenizer's 49,152 ids (not Llama's 128,256)
    shape_config("tiny")  4 layers x 256 with the same structure (GQA 4:1, FFN 3.5x, head_dim 64): CPU dry runs

A random model of a real shape times every GPU path as real weights do (distill.gpu_check, distill.train.speed).
"""

from __future__ import annotations

from transformers import LlamaConfig

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128),
    "tiny": dict(hidden_size=256, intermediate_size=896, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=64),
}
VOCAB = 49152  # the default target's tokenizer, so its files serve every shape


def shape_config(shape: str) -> LlamaConfig:
    """The config of `shape` (a key of SHAPES); ValueError naming the shapes otherwise."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")
    return LlamaConfig(vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2, pad_token_id=2, rope_parameters=dict(LLAMA3_ROPE),
                       dtype="bfloat16", **SHAPES[shape])
