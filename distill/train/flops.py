"""Training FLOPs of a draft from its shapes, for MFU (model FLOPs utilisation): what one step must compute.

Counted (a multiply-add is 2 FLOPs; norms, rotary, softmax, the loss and the optimizer are elementwise and left out):

    forward    every matmul the step runs, trained or frozen: each decoder layer at every input token (a feature
               head: its fc once, its layer once per TTT step), attention over the causal pairs, the output head
               only at the trained positions (Student and HeadStudent compute it only there)
    backward   activation gradients through every matmul between the loss and the first trainable parameter
               (the layers and the head, frozen or not: 1 x their forward; attention: 2 x, for Q, K, the
               probabilities and V), plus weight gradients of the trainable matrices (1 x their forward); a
               feature head's fc has no activation gradient (its input, the target's features, needs none), and
               the frozen embedding is a lookup

Attention counts the causal (query, key) pairs a position really uses, sum over sequences of L (L + 1) / 2, at
4 x heads x head_dim FLOPs a pair forward (scores and mixing); a feature head's TTT step k adds each position's
k keys of its own earlier steps. Padding is not counted (it is work the hardware did for nothing), nor the head's
forward that the chunked loss recomputes in backward (activation checkpointing: hardware FLOPs, not model FLOPs).
docs/training-speed.md explains the choices; tests/test_train_speed.py checks the matmul part against
torch.utils.flop_counter on real training steps and the attention part by hand.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DraftShape:
    """What the FLOPs of a draft depend on. A feature head is one layer (layers=1) whose q/k/v read 2 x hidden
    (qkv_in) after an fc from `features` wide, unrolled ttt_steps times; a standalone draft has features=0."""
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int                 # the draft's vocabulary: its output head's rows
    mlp_matrices: int = 3      # gate, up, down (llama-style); 2 for a plain MLP
    qkv_in: int = 0            # width q/k/v read; 0 = hidden
    features: int = 0          # feature head: fc input width (feature layers x target width); 0 = standalone
    ttt_steps: int = 1
    train_layers: bool = True  # the layers' matrices get weight gradients
    train_head: bool = False   # the output head gets weight gradients (gpu-8b.yaml freezes it)
    train_fc: bool = True


@dataclass
class StepTokens:
    """Token counts of one or more steps, on one rank: input tokens (padding excluded), sequences, their squared
    lengths summed (for attention), and trained positions."""
    inputs: int = 0
    sequences: int = 0
    squares: int = 0
    trained: int = 0

    def add(self, other: StepTokens) -> None:
        self.inputs, self.sequences = self.inputs + other.inputs, self.sequences + other.sequences
        self.squares, self.trained = self.squares + other.squares, self.trained + other.trained


def layer_weights(s: DraftShape) -> int:
    """Matrix entries of one decoder layer: q, k, v (reading qkv_in), o, and the MLP."""
    qkv_in = s.qkv_in or s.hidden
    return (qkv_in * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * s.hidden
            + s.mlp_matrices * s.hidden * s.intermediate)


def attention_pairs(s: DraftShape, t: StepTokens) -> int:
    """Causal (query, key) pairs summed over sequences, layers and TTT steps. A feature head runs over L - 1
    positions of a sequence of L inputs (position p reads token p + 1), and its step k adds k keys a position."""
    if not s.features:
        return s.layers * (t.squares + t.inputs) // 2  # sum L (L + 1) / 2
    n_sq, n = t.squares - 2 * t.inputs + t.sequences, t.inputs - t.sequences  # sum (L - 1)^2, sum (L - 1)
    k = s.ttt_steps
    return s.layers * (k * (n_sq + n) // 2 + k * (k - 1) // 2 * n)


def train_flops(s: DraftShape, t: StepTokens) -> dict[str, int]:
    """{"forward", "backward", "total", "attention", "matmul"} FLOPs of training steps with token counts t (one
    rank), from the module docstring's rules; "attention" is the part of the total that attention makes (forward
    and backward), "matmul" the rest (what the weights' matrices make)."""
    positions = t.inputs - t.sequences if s.features else t.inputs  # where the layers run, per pass
    passes = s.ttt_steps if s.features else 1
    layers = 2 * s.layers * layer_weights(s) * positions * passes
    head = 2 * s.hidden * s.vocab * t.trained * passes
    fc = 2 * s.features * s.hidden * positions
    attention = 4 * s.heads * s.head_dim * attention_pairs(s, t)
    matmul_fwd = layers + head + fc
    matmul_bwd = (layers + head  # activation gradients: dX = dY W^T, one matmul of the forward's size each
                  + (layers if s.train_layers else 0) + (head if s.train_head else 0)  # weight gradients: dW = X^T dY
                  + (fc if s.train_fc else 0))
    forward, backward = matmul_fwd + attention, matmul_bwd + 2 * attention  # attention: dQ, dK, dP, dV
    return {"forward": forward, "backward": backward, "total": forward + backward, "attention": 3 * attention,
            "matmul": matmul_fwd + matmul_bwd}


# --- shapes of the drafts training builds


def _trains(params) -> bool:
    return any(p.requires_grad for p in params)


def standalone_shape(model) -> DraftShape:
    """The DraftShape of an HF causal LM draft (a PeftModel too: its base's layers carry the FLOPs, and their
    weights count as trained only when most of their entries are, so LoRA's adapters add no weight gradients).
    The MLP's matrix count is read from the layers' parameters (3 gated, 2 plain), not from the model type."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    c = base.config
    hidden, heads = c.hidden_size, c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    hd = getattr(c, "head_dim", None) or hidden // heads
    inter = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden
    n = c.num_hidden_layers
    emb, out = base.get_input_embeddings().weight, base.get_output_embeddings().weight
    matrices = [p for p in base.parameters() if p.dim() == 2 and p is not emb and p is not out]
    per_layer = sum(p.numel() for p in matrices) / n
    attn = hidden * (heads + 2 * kv) * hd + heads * hd * hidden
    mlp = max(1, round((per_layer - attn) / (hidden * inter)))
    trained = sum(p.numel() for p in matrices if p.requires_grad)  # LoRA: only its small adapters train
    return DraftShape(n, hidden, inter, heads, kv, hd, out.shape[0], mlp_matrices=mlp,
                      train_layers=2 * trained >= sum(p.numel() for p in matrices), train_head=out.requires_grad)


def head_shape(head, ttt_steps: int) -> DraftShape:
    """The DraftShape of a decode.models.feature_head.FeatureHead trained with ttt_steps TTT steps."""
    c, layer = head.config, head.layers[0]
    return DraftShape(1, c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                      head.draft_vocab_size, qkv_in=2 * c.hidden_size, features=head.fc.in_features,
                      ttt_steps=ttt_steps, train_layers=_trains(layer.parameters()),
                      train_head=head.lm_head.weight.requires_grad, train_fc=head.fc.weight.requires_grad)
