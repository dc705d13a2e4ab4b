"""Will a training step fit? The peak bytes of one step on the run's longest micro-batch, estimated from the draft's
shape before the draft is built (job.train), checked against the memory the device has; a clear error otherwise.

The estimate counts what a step holds at its peak, the end of the forward pass: fp32 weights, gradients and AdamW's
two moments; the tensors autograd keeps per layer for the backward pass (attention is SDPA's fused kernel, so no
(T, T) score matrix per head is kept); the loss's chunks of logits (student.chunk_rows); the feature head's
training-time-test masks, which are (T, (k+1)T) and do grow as T^2; and what the feature head's target holds
when features come online. It errs on the high side (every saved tensor counted, no reuse assumed); it is not
fitted to a measurement. --memory-gb replaces the memory available, e.g. to share a device.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from decode.errors import UserError

GiB = 2**30
LOSS_COPIES = 5  # (rows, V) float32 tensors the loss holds for one chunk: logits, their fp32 copy, log-softmax, probs, grad


@dataclass
class Shape:
    """What the estimate needs to know about a draft (a standalone causal LM, or a feature head)."""
    layers: int          # decoder layers (1 for a feature head, unrolled ttt times)
    hidden: int          # H, the residual stream
    intermediate: int    # I, the FFN's channels
    q: int               # heads x head_dim: the width of queries and, after GQA's repeat, of keys and values
    kv: int              # kv_heads x head_dim
    vocab: int           # V, rows of the output head (the draft's vocabulary)
    embed_vocab: int     # rows of the input embedding (a feature head reads the target's whole one)
    tied: bool           # the head is the embedding
    frozen_embed: bool
    frozen_head: bool
    features: int = 0    # F = feature layers x H for a feature head, else 0
    ttt: int = 1         # training-time-test steps (feature head)


def draft_shape(cfg, tc, source_config=None) -> Shape:
    """The draft `cfg` builds from target config `tc` (source_config: a pretrained:/other_tokenizer: init's model)."""
    from distill.train import head
    from distill.train.prune import head_dim

    if cfg.design == "feature_head":  # one llama layer shaped like the target's (decode.models.feature_head)
        H, heads = tc.hidden_size, tc.num_attention_heads
        kv, hd = getattr(tc, "num_key_value_heads", None) or heads, head_dim(tc)
        V = int(cfg.vocab) if cfg.vocab != "full" else tc.vocab_size
        F = len(head.feature_layers(cfg, tc.num_hidden_layers)) * H
        return Shape(1, H, getattr(tc, "intermediate_size", None) or 4 * H, heads * hd, kv * hd, V, tc.vocab_size,
                     False, True, "head" in cfg.freeze, F, cfg.ttt_steps)
    design = cfg.draft_design()
    design.check(tc)  # the same clear errors build_model would give, before any work
    src = source_config or tc
    w = design.widths(src) if source_config is None else _widths(src)
    hd = w["hidden_size"] // w["num_attention_heads"] if design.init == "random" else head_dim(src)
    V = int(design.vocab) if design.vocab != "full" else (src.vocab_size if cfg.init.startswith("pretrained:")
                                                         else tc.vocab_size)
    tied = bool(getattr(src, "tie_word_embeddings", False))
    return Shape(len(design.layer_indices(tc.num_hidden_layers)), w["hidden_size"], w["intermediate_size"],
                 w["num_attention_heads"] * hd, w["num_key_value_heads"] * hd, V, V, tied,
                 "embed" in design.freeze, "head" in design.freeze or (tied and "embed" in design.freeze))


def _widths(c) -> dict:
    from distill.train.prune import target_widths

    return target_widths(c)


def params(s: Shape) -> tuple[int, int]:
    """(all parameters, trainable ones) of the draft."""
    inp = 2 * s.hidden if s.features else s.hidden  # a feature head's q/k/v read cat(embedding, features): 2H
    layer = inp * (s.q + 2 * s.kv) + s.q * s.hidden + 3 * s.hidden * s.intermediate + 3 * s.hidden
    embed, out = s.embed_vocab * s.hidden, 0 if s.tied else s.vocab * s.hidden
    total = s.layers * layer + embed + out + s.features * s.hidden + s.hidden  # + fc (F, H), final norm
    frozen = (embed if s.frozen_embed else 0) + (out if s.frozen_head and not s.tied else 0)
    return total, total - frozen


def state_bytes(s: Shape, act: int, world: int, zero: bool) -> int:
    """Weights (fp32), gradients (fp32) and AdamW's 2 moments (fp32, split over ranks under ZeRO); under bf16
    autocast (act == 2) the weights' bf16 copies; with DDP (world > 1, no ZeRO) its gradient buckets."""
    total, trainable = params(s)
    moments = 8 * trainable // (world if zero else 1)
    buckets = 4 * trainable if world > 1 and not zero else 0
    return 4 * total + 4 * trainable + moments + (2 * total if act == 2 else 0) + buckets


def layer_bytes(s: Shape, act: int) -> int:
    """Bytes one decoder layer keeps for backward per token. fp32 (4): layer input, the two norms' inputs, the
    attention residual; `act` bytes (2 under bf16 autocast, else 4): normed inputs, q/k/v before and after rotary
    (k, v repeated to q's width for GQA), attention output and SDPA's log-sum-exp, o_proj out, gate, up, act(gate),
    their product, down out."""
    inp = 2 * s.hidden if s.features else s.hidden
    return 4 * (4 * s.hidden + inp) + act * (2 * inp + 4 * s.q + 2 * s.kv + 2 * s.q + 2 * s.hidden + 4 * s.intermediate)


def activation_bytes(s: Shape, B: int, T: int, act: int, checkpointing: bool) -> int:
    """Standalone: L layers over n = B*T tokens (with gradient checkpointing, each layer's input plus one layer
    recomputed), the embedding and final norm, and the backward pass's one-layer working set on top.
    Feature head: ttt unrolled steps, each one layer over n tokens plus K/V concatenated over the steps so far
    ((k+1) n x q each for k and v), its output (n, H); the features (n, F) stored (2 bytes) and cast (fp32)."""
    n, one = B * T, layer_bytes(s, act) * B * T
    if s.features:
        kv_cat = sum(2 * act * (k + 1) * n * s.q for k in range(s.ttt))
        return s.ttt * (one + 4 * n * s.hidden) + kv_cat + 6 * n * s.features + one
    kept = s.layers * 4 * n * s.hidden + one if checkpointing else s.layers * one
    return kept + 3 * 4 * n * s.hidden + one


def mask_bytes(s: Shape, T: int, act: int) -> int:
    """A feature head's TTT masks (head.HeadStudent.unroll), one for the batch: causal and eye (T, T) bool, and at
    step k >= 1 a (T, (k+1) T) bool mask that SDPA also converts to a float mask; both kept for backward."""
    if not s.features:
        return 0
    return 2 * T * T + sum((1 + act) * (k + 1) * T * T for k in range(1, s.ttt))


def loss_bytes(s: Shape, N: int, chunk_bytes: int) -> int:
    """The N trained positions' hidden states (N, H) and their gradient, and LOSS_COPIES (rows, V) float32 tensors
    of one chunk (student.chunk_rows); a feature head keeps a step's unchunked ones (N <= rows) until backward."""
    one = LOSS_COPIES * min(chunk_bytes, 4 * N * s.vocab)
    return 2 * 4 * N * s.hidden + (s.ttt if 4 * N * s.vocab <= chunk_bytes else 1) * one


def target_bytes(tc, tokens: int, act: int) -> int:
    """The target run without gradients over `tokens` tokens (a feature head's features, online or extracted):
    its weights, the L+1 hidden states output_hidden_states keeps (tokens, H), and one layer's working set."""
    H, ffn = tc.hidden_size, getattr(tc, "intermediate_size", None) or 4 * tc.hidden_size
    layer = 4 * H * H + 3 * H * ffn  # q/k/v/o at most H x H each (GQA: less), the FFN's three
    weights = tc.num_hidden_layers * layer + tc.vocab_size * H * (1 if getattr(tc, "tie_word_embeddings", False) else 2)
    return act * (weights + (tc.num_hidden_layers + 1) * tokens * H + tokens * (6 * H + 3 * ffn))


def step_bytes(cfg, s: Shape, tc, B: int, T: int, N: int, act: int, world: int, zero: bool) -> int:
    """Peak bytes of one training step on a micro-batch of B sequences padded to T tokens, N of them trained."""
    if cfg.parallel:  # mask levels packed after the sequence (parallel_batches): longer rows, a (B, 1, L, L) mask
        # levels 1..K-1 keep keep^k of the anchors each (parallel_batches.anchor_levels); keep 1: all of them
        T = T + math.ceil(T * sum(cfg.parallel_keep ** k for k in range(1, cfg.parallel))) + cfg.parallel
        N = B * T
    total = (state_bytes(s, act, world, zero) + activation_bytes(s, B, T, act, cfg.gradient_checkpointing)
             + mask_bytes(s, T, act) + loss_bytes(s, N, cfg.loss_chunk_mb * 2**20) + 24 * B * T)  # ids, mask, sel
    if cfg.parallel:
        total += (1 + act) * B * T * T
    if cfg.spec_eval_prompts > 0:  # the whole target in fp32 on the main process, for the real-decode eval
        total += target_bytes(tc, 0, 4)
    if s.features and cfg.features == "online":
        total += target_bytes(tc, B * T, act)
    elif s.features:  # stored: extracted before the first step, with the draft's weights only, up to 4096 tokens a forward
        total = max(total, 4 * params(s)[0] + target_bytes(tc, max(4096, B * T), act))
    return total


def available(device: torch.device, processes: int = 1) -> int:
    """Bytes free for this process now: CUDA's free device memory; on CPU the host's MemAvailable (what Linux can
    give without swapping: free + reclaimable cache), shared by the processes of this host."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kb * 1024 // processes
    except (OSError, StopIteration, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // processes


def source_config(cfg):
    """A pretrained:/other_tokenizer: init's own config (its widths), None for the other inits; raises UserError
    when it cannot be read (build_model names the problem the same way)."""
    from transformers import AutoConfig

    from decode.models.targets import resolve
    from distill.train import transplant

    spec = transplant.source(cfg.init) or (cfg.init.split(":", 1)[1] if cfg.init.startswith("pretrained:") else None)
    if spec is None:
        return None
    try:
        return AutoConfig.from_pretrained(resolve(spec))
    except (OSError, ValueError):
        return None  # build_model says what is wrong with it; nothing to estimate from


def check(cfg, examples, accelerator) -> None:
    """UserError, before the draft is built, when a step on the longest micro-batch of `examples` (batches.Examples)
    would need more memory than this process has, naming the --max-seq-len (or --batch-tokens) that fits."""
    from transformers import AutoConfig

    from decode.models.targets import resolve
    from distill.train.config import batch_tokens

    src = source_config(cfg) if cfg.design == "standalone" else None
    if src is None and cfg.design == "standalone" and ":" in cfg.init:  # unreadable: build_model names the problem
        return
    tc = AutoConfig.from_pretrained(resolve(cfg.target))
    s = draft_shape(cfg, tc, src)
    act = 2 if accelerator.mixed_precision == "bf16" else 4
    ds = accelerator.state.deepspeed_plugin
    world, zero = accelerator.num_processes, ds is not None and ds.zero_stage >= 1
    budget, n_max = batch_tokens(cfg), int(examples.n.max())

    def need(t: int) -> tuple[int, int]:  # (bytes, B) for the longest micro-batch when examples are t tokens
        B = min(max(1, budget // t) if budget > 0 else cfg.batch_size, len(examples))
        return step_bytes(cfg, s, tc, B, t, B * min(t, n_max), act, world, zero), B

    T = int(examples.lengths.max())
    (est, B), have = need(T), int(cfg.memory_gb * GiB) or available(accelerator.device,
                                                                    int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if est <= have:
        return
    where = ("--memory-gb allows" if cfg.memory_gb else
             f"{'this host' if accelerator.device.type == 'cpu' else accelerator.device} has available")
    lo, hi = 1, T  # the longest length that fits: need(lo) fits, need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid)[0] <= have else (lo, mid)
    one = B > 1 and step_bytes(cfg, s, tc, 1, T, min(T, n_max), act, world, zero) <= have
    fixes = ([f"--max-seq-len {lo - lo % 64 if lo >= 128 else lo} (prompts are cut from the left)"] if lo >= 2 else []) \
        + ([f"--batch-tokens {T} (one such example a micro-batch)"] if one else [])
    fix = (f"give {' or '.join(fixes)}" if fixes else "even a 2-token example does not fit beside the draft's weights and "
           "optimizer state: use a smaller draft (--layers, --vocab) or more memory")
    raise UserError(f"the longest training example has {T:,} tokens: a step on {B} x {T:,} tokens needs about "
                    f"{est / GiB:.2f} GiB (distill/train/memory_fit.py's estimate for this draft), more than the "
                    f"{have / GiB:.2f} GiB {where}; {fix}")
