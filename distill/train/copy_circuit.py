"""A hand-built copy (induction) circuit for a shallow draft, in residual dimensions of its own.

Small targets repeat their prompt and themselves: where the context's last two tokens occurred before, the
token that followed them then is the default target's next token 73% of the time, at 38% of its held-out
positions (distill.train.copy_probe). Copying needs an induction circuit: previous-token heads feeding a head that
matches "the tokens before position n" against "the latest tokens" and reads out token n. Gradient descent
does not form one in a few hundred CPU steps (random-span copy stayed at 0.1-3% in every attempt), so this
module writes one into the draft before training, and training tunes it.

The draft is widened by private residual dimensions that no copied weight reads or writes, so the copied
layers compute what they did (norm weights are rescaled by sqrt(H / H_wide) so that zero private dims change
nothing; on the default target the private content moves the first layer's norm by ~4% and the later
ones' by well under 1%):

    private dims   [code (C) | code of token m-1 (K) | of token m-2 (K) | sink flag | output (C)]
    embedding      code: a random +-1 vector per token (C dims), scaled to EPS x the typical residual rms;
                   sink flag: set on the token nearly every sequence starts with (<|im_start|> in chat data),
                   whose code is zero (resting on the sink copies nothing)
    first layer    one new KV group (the target's group size of query heads): previous-token heads with
                   constant q and k (biases) whose RoPE dot product peaks at offset 1 (and 2): a sum of cosines
                   over the fastest-rotating frequency pairs. v reads the code, o writes it into "m-1" ("m-2")
    last layer     one new KV group: the induction head. Its q reads the codes of tokens m and m-1, its k those
                   of n-1 and n-2, into the slowest-rotating RoPE slots (< 0.5 rad over a few hundred tokens),
                   so q.k peaks where the two tokens before n equal the last two; a constant q bias meets the
                   sink flag with a lower score, so with no match the head rests on the sink. v reads the
                   attended token's code, o writes it into "output"
    head           untied from the embedding; its output-dim columns hold every token's code, so the copied
                   token's logit rises by ~GAIN and the others' by noise ~GAIN / sqrt(C)

Entries that are zero by construction stay zero while training (mask_gradients): Adam moves any zero entry
with a gradient by ~lr a step, which within a few dozen steps buries the codes under the copied layers' output.
The private dims' norm weights stay 1 too: evaluation and export set the final norm's (calibrated,
output_gain) so the boost keeps its built size as training grows the residual.

Measured on the default target (configs/train/default.yaml, 500 steps, held-out teacher-forced proxy): the
untrained [0, 1] cut scores 0.042 and 0.223 with the circuit; trained, 0.279 without, 0.366-0.379 with it
uncalibrated and 0.405 calibrated (matching one token instead of two, uncalibrated: 0.356).
"""

from __future__ import annotations

import contextlib
import math

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from decode.errors import UserError

CODE_DIMS = 64     # C: token code width (random +-1 codes: self dot C, cross dot ~N(0, C))
MATCH_PAIRS = 14   # K/2: the slowest-rotating RoPE pairs carry the match
EPS = 0.05         # private content size relative to the typical residual rms
PREV_GAP = 15.0    # previous-token head: score margin of offset 1 over every other offset
PREV_PAIRS = 16    # fastest-rotating RoPE pairs used by the previous-token head
MATCH_SCORE = 40.0  # induction score of an exact match
SINK_SCORE = 26.0   # score of the sink (<|im_start|>), below a match and above chance matches
GAIN = 45.0        # logit boost of the copied token
SCALE_SEQUENCES = 32  # sequences the residual scale is measured on
NGRAM = 2           # match this token and the one before (1: this token only)


# RoPE types whose frequencies are fixed and whose cos/sin are unscaled (attention_scaling 1): the circuit reads the
# model's own frequencies. llama3 (Llama-3.x) keeps the fast pairs the previous-token head uses and slows the slow
# pairs the match uses further, so both heads keep their margins
ROPE_TYPES = ("default", "llama3")
ALIGN = 8  # the widened hidden size is a multiple of this (and of the head count): bf16 GEMMs stay aligned


def check_architecture(c) -> None:
    """The circuit is written for Llama-architecture models with fixed RoPE frequencies (ROPE_TYPES); c: the
    draft's config, or the target's, whose architecture a draft cut or pruned from it keeps (so a pipeline can
    refuse before collecting)."""
    if c.model_type != "llama":
        raise UserError(f"copy_circuit builds into Llama-architecture drafts; this draft is {c.model_type!r}: "
                        "train without it (copy_circuit: false)")
    if _rope_type(c) not in ROPE_TYPES:
        raise UserError(f"copy_circuit reads fixed RoPE frequencies ({', '.join(ROPE_TYPES)}); this draft uses "
                        f"{_rope_type(c)!r}: train without it (copy_circuit: false)")
    d, group = _head_dim(c), c.num_attention_heads // c.num_key_value_heads
    if not (PREV_PAIRS <= d // 2 and MATCH_PAIRS + 1 <= d // 2 and CODE_DIMS <= d and NGRAM <= group):
        raise UserError(f"copy_circuit: head_dim {d} / group size {group} too small for the circuit (it needs "
                        f"head_dim >= {max(2 * PREV_PAIRS, 2 * MATCH_PAIRS + 2, CODE_DIMS)} and {NGRAM} query heads "
                        "per KV head): train without it (copy_circuit: false)")


def _check(model) -> None:
    check_architecture(model.config)
    if model.config.num_hidden_layers < 2:
        raise UserError("copy_circuit needs a draft of 2 or more layers (a previous-token head feeds the induction head)")


def _rope_type(c) -> str:
    """The RoPE type of a config of either transformers layout (rope_parameters, or rope_scaling)."""
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    return rope.get("rope_type", rope.get("type", "default"))


@torch.no_grad()
def residual_rms(model, sequences: list[list[int]], layer: int) -> float:
    """Median rms of the residual entering `layer` (num_hidden_layers: the final norm) over the sequences
    (draft token ids)."""
    got = []
    module = model.model.norm if layer == model.config.num_hidden_layers else model.model.layers[layer]
    hook = module.register_forward_pre_hook(
        lambda mod, args, kwargs: got.append((args[0] if args else kwargs["hidden_states"])[0].pow(2).mean(-1).sqrt()),
        with_kwargs=True)
    try:
        with torch.compiler.set_stance("force_eager"):  # a compiled draft (--compile) would recompile per hooked call
            for s in sequences:
                model.model(input_ids=torch.tensor([s], device=model.device))
    finally:
        hook.remove()
    return torch.cat(got).median().item()


def _widen(model, hp: int, nq: int, nk: int, dtype: torch.dtype | None = None):
    """A copy of `model` with hidden size hp, nq query / nk KV heads and attention biases, computing the same
    function: new rows/columns are zero and norm weights are rescaled for the wider rms. dtype: the copy's
    (None: the model's)."""
    c = model.config
    h, d, nh, nkv = c.hidden_size, _head_dim(c), c.num_attention_heads, c.num_key_value_heads
    # the norms' eps scales with the mean square (x h/hp), so zero private dims leave every norm exactly as it was
    cfg = AutoConfig.for_model(**{**c.to_dict(), "hidden_size": hp, "num_attention_heads": nq, "num_key_value_heads": nk,
                                  "head_dim": d, "attention_bias": True, "tie_word_embeddings": False,
                                  "rms_norm_eps": c.rms_norm_eps * h / hp})
    wide = AutoModelForCausalLM.from_config(cfg, dtype=dtype or model.dtype)
    src = model.state_dict()
    src.setdefault("lm_head.weight", model.get_output_embeddings().weight)
    dst = {k: torch.zeros_like(v) for k, v in wide.state_dict().items()}
    fix = math.sqrt(h / hp)  # rms over hp dims of a vector that is zero outside the first h is fix * its rms over h
    for k, v in src.items():
        v = v.to(dst[k].dtype) if k in dst else v
        if k.endswith("norm.weight"):
            dst[k][:h], dst[k][h:] = v * fix, 1.0
        elif k.endswith("q_proj.weight"):
            dst[k][: nh * d, :h] = v
        elif k.endswith(("k_proj.weight", "v_proj.weight")):
            dst[k][: nkv * d, :h] = v
        elif k.endswith("o_proj.weight"):
            dst[k][:h, : nh * d] = v
        elif k.endswith(("gate_proj.weight", "up_proj.weight", "embed_tokens.weight", "lm_head.weight")):
            dst[k][:, :h] = v
        elif k.endswith("down_proj.weight"):
            dst[k][:h] = v
        elif k.endswith("bias"):
            raise UserError(f"copy_circuit: the draft already has biases ({k}); use a draft without them")
        else:
            raise UserError(f"copy_circuit: unexpected weight {k} in the draft")
    wide.load_state_dict(dst)
    wide.generation_config = model.generation_config
    return wide.to(model.device), fix


def rope_frequencies(model) -> torch.Tensor:
    """(head_dim / 2,) float64: the frequencies the model's own rotary embedding applies (its inv_freq, computed by
    transformers from the config: llama3's rescaled ones included), for a float32 model."""
    rotary = model.model.rotary_emb
    if getattr(rotary, "attention_scaling", 1.0) != 1.0:
        raise UserError(f"copy_circuit: this draft's RoPE scales cos/sin by {rotary.attention_scaling}; "
                        "train without it (copy_circuit: false)")
    return rotary.inv_freq.detach().double().cpu()


def _head_dim(c) -> int:
    return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


def widened_size(h: int, nq: int, ngram: int = NGRAM) -> int:
    """The draft's hidden size with the private dims: h + codes + matched codes + sink flag, rounded up to a
    multiple of the query head count nq (transformers requires it) and of ALIGN (bf16 GEMMs stay aligned):
    Llama-3.1-8B's 4096 with 36 heads gives 4320, not 4284; the default target's 744 is both already."""
    k = 2 * MATCH_PAIRS // ngram
    step = math.lcm(nq, ALIGN)
    return -(-(h + 2 * CODE_DIMS + ngram * k + 1) // step) * step



def _previous_token_heads(p: dict, inv: torch.Tensor, d: int, nh: int, nkv: int, k: int, match: slice,
                          prevs: list[slice], out_scale: float) -> None:
    """The first layer's part of the circuit, written into the parameters p (name -> tensor) in place."""
    # first layer: previous-token heads (query heads nh + j look j+1 back). Constant k = a_i (cos w_i, sin w_i)
    # and q = a_i (cos(-j w_i), sin(-j w_i)) per pair: RoPE makes q.k = sum_i a_i^2 cos(w_i (m - n - 1 - j)),
    # largest at n = m - 1 - j.
    half, ngram, kvh = d // 2, len(prevs), slice(nkv * d, (nkv + 1) * d)  # kvh: the new KV group
    fast = torch.arange(PREV_PAIRS)
    deltas = torch.arange(-1, 8192, dtype=torch.float64)
    s = torch.cos(inv[fast, None] * deltas[None]).sum(0)  # (len,) score per unit a^2 at offset m-n-1 = delta
    margin = (s[1] - torch.cat([s[:1], s[2:]]).max()).item()
    a = math.sqrt(PREV_GAP / margin * math.sqrt(d))
    a0 = "model.layers.0.self_attn."
    kb = torch.zeros(d, dtype=torch.float64)
    kb[fast], kb[fast + half] = a * torch.cos(inv[fast]), a * torch.sin(inv[fast])
    p[a0 + "k_proj.bias"][kvh] = kb.to(p[a0 + "k_proj.bias"])
    p[a0 + "v_proj.weight"][nkv * d: nkv * d + k, match] = torch.eye(k)
    for j in range(ngram):
        qb = torch.zeros(d, dtype=torch.float64)
        qb[fast], qb[fast + half] = a * torch.cos(-j * inv[fast]), a * torch.sin(-j * inv[fast])
        p[a0 + "q_proj.bias"][(nh + j) * d: (nh + j + 1) * d] = qb.to(p[a0 + "k_proj.bias"])
        p[a0 + "o_proj.weight"][prevs[j], (nh + j) * d: (nh + j) * d + k] = torch.eye(k) * out_scale


def add_copy_circuit(model, sequences: list[list[int]], sink_id: int | None, seed: int = 0, ngram: int = NGRAM):
    """The draft widened with the copy circuit (module docstring). sequences: a few token id lists (draft ids)
    to measure the residual scale on; sink_id: the draft id of the token every prompt starts with (or None);
    ngram: 1 matches this token, 2 this token and the one before (each term gets half the match slots).

    The circuit is built in float32 whatever the draft's dtype (a bf16 target gives a bf16 cut) and returned in the
    draft's dtype: its scores are sized against each other (match 40 vs sink 26) and rounding them first to bf16
    and then building on them would compound."""
    _check(model)
    c = model.config
    h, d, nh, nkv, nl = c.hidden_size, _head_dim(c), c.num_attention_heads, c.num_key_value_heads, c.num_hidden_layers
    half = d // 2
    k = 2 * MATCH_PAIRS // ngram  # match dims per n-gram term
    group = nh // nkv  # one new KV group keeps grouped-query attention's group size
    if not (PREV_PAIRS <= half and MATCH_PAIRS + 1 <= half and CODE_DIMS <= d and ngram <= group and ngram in (1, 2)):
        raise UserError(f"copy_circuit: head_dim {d} / group size {group} too small for the circuit (ngram {ngram})")
    if not sequences:
        raise UserError("copy_circuit measures the draft's residual scale on collected data: give --data")
    r_last = residual_rms(model, sequences[:SCALE_SEQUENCES], nl - 1)  # typical rms entering the last layer
    emb = model.get_input_embeddings().weight.detach().float()
    r_emb = emb.pow(2).mean(-1).sqrt().median().item()

    nq, nk = nh + group, nkv + 1
    hp = widened_size(h, nq, ngram)
    wide, fix = _widen(model, hp, nq, nk, torch.float32)
    code = slice(h, h + CODE_DIMS)
    match = slice(h, h + k)  # the code's first k dims are matched
    prevs = [slice(h + CODE_DIMS + j * k, h + CODE_DIMS + (j + 1) * k) for j in range(ngram)]  # code of token m-1-j
    flag = h + CODE_DIMS + ngram * k
    out = slice(flag + 1, flag + 1 + CODE_DIMS)

    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 2, (emb.shape[0], CODE_DIMS), generator=g).to(emb) * 2 - 1  # (V, C)
    inv = rope_frequencies(wide)  # (d/2,) the RoPE frequencies the draft applies
    slow = torch.arange(half - MATCH_PAIRS, half).view(ngram, -1)  # (ngram, k/2) slowest pairs, one row a term
    slots = [torch.cat([s, s + half]) for s in slow]  # per term: (k,) q/k dims rotated by slow frequencies
    sink_slot = half - MATCH_PAIRS - 1

    p = dict(wide.named_parameters())
    with torch.no_grad():
        E = p["model.embed_tokens.weight"]
        E[:, code] = EPS * r_last * codes / fix  # after a norm: ~EPS * code
        if sink_id is not None:
            E[sink_id, flag] = r_last / fix
            E[sink_id, code] = 0.0  # resting on the sink copies nothing (its code would boost <|im_start|>)

        _previous_token_heads(p, inv, d, nh, nkv, k, match, prevs, r_emb * fix)

        # last layer: induction head (query head nh). Term j matches the code of token m-j (q) against that of
        # token n-1-j (k); an exact match of every term scores ~MATCH_SCORE.
        al = f"model.layers.{nl - 1}.self_attn."
        f = math.sqrt(MATCH_SCORE / ngram * math.sqrt(d) / k) / EPS
        for j in range(ngram):
            p[al + "q_proj.weight"][nh * d + slots[j], match if j == 0 else prevs[0]] = torch.eye(k) * f
            p[al + "k_proj.weight"][nkv * d + slots[j], prevs[j]] = torch.eye(k) * f
        p[al + "k_proj.weight"][nkv * d + sink_slot, flag] = 1.0
        p[al + "q_proj.bias"][nh * d + sink_slot] = SINK_SCORE * math.sqrt(d)
        p[al + "v_proj.weight"][nkv * d: nkv * d + CODE_DIMS, code] = torch.eye(CODE_DIMS)
        p[al + "o_proj.weight"][out, nh * d: nh * d + CODE_DIMS] = torch.eye(CODE_DIMS)
        # the output dims after the final norm hold ~EPS * code of the copied token
        p["lm_head.weight"][:, out] = codes * GAIN / (EPS * CODE_DIMS)
    wide = wide.to(model.dtype)
    wide._copy_circuit_masks = _masks(wide, h, nh, nkv, d)
    # where the private dims start and the residual scale the output is sized for (saved in config.json)
    wide.config.copy_circuit = {"private": h, "r_final": residual_rms(wide, sequences[:SCALE_SEQUENCES], nl)}
    return wide.eval()


@torch.no_grad()
def output_gain(model, sequences: list[list[int]]) -> float | None:
    """The final norm's gain on the circuit's private dims that gives the copied token the boost it had as
    built (None for a draft without the circuit).

    The circuit writes its output into a few small private dims, and the final norm divides them by the rms of
    the whole residual. Training grows the copied layers' output (the residual entering the final norm went
    2.3 -> 5.6 in 500 steps on the default target), so the boost to the copied token shrank from ~28 logits to
    ~4. Gradient descent does not undo that: the draft memorises its training rows and needs no copying there.
    Resizing the boost back (this gain) raised the held-out proxy of that step-500 draft from 0.366 to 0.405.
    Resizing it during training does not work: the draft then grew its residual without bound (rms 667 entering
    the last layer after 400 steps) to keep shrinking the circuit, and the proxy fell to 0.36. So training runs
    with the gain at 1 (its gradient is masked) and evaluation and export apply it (calibrated). Measured on
    training sequences only: residual rms entering the final norm now / at the build."""
    cc = getattr(model.config, "copy_circuit", None)
    return residual_rms(model, sequences, model.config.num_hidden_layers) / cc["r_final"] if cc else None


@contextlib.contextmanager
def calibrated(model, sequences: list[list[int]] | None):
    """Within the block, the model's final norm applies output_gain on the private dims; restored after."""
    gain = output_gain(model, sequences) if sequences else None
    if gain is None:
        yield None
        return
    w, h = model.model.norm.weight, model.config.copy_circuit["private"]
    before = w.detach()[h:].clone()
    with torch.no_grad():
        w[h:] = gain
    try:
        yield gain
    finally:
        with torch.no_grad():
            w[h:] = before


def _masks(wide, h: int, nh: int, nkv: int, d: int) -> dict:
    """name -> bool mask of the entries that may train: the copied weights' own block and the circuit's
    nonzero entries. The rest stays zero: Adam moves a zero entry with any gradient by ~lr a step, which
    within a few dozen steps would write the copied layers' output into the private dims and bury the codes."""
    blocks = {"q_proj.weight": (slice(0, nh * d), slice(0, h)), "k_proj.weight": (slice(0, nkv * d), slice(0, h)),
              "v_proj.weight": (slice(0, nkv * d), slice(0, h)), "o_proj.weight": (slice(0, h), slice(0, nh * d)),
              "gate_proj.weight": (slice(None), slice(0, h)), "up_proj.weight": (slice(None), slice(0, h)),
              "down_proj.weight": (slice(0, h), slice(None)), "embed_tokens.weight": (slice(None), slice(0, h)),
              "lm_head.weight": (slice(None), slice(0, h))}
    masks = {}
    for name, prm in wide.named_parameters():
        if name.endswith("norm.weight"):  # the copied dims' scales train; the private dims' stay 1 (calibrated)
            masks[name] = torch.arange(len(prm)) < h
            continue
        m = prm.detach() != 0
        block = next((b for k, b in blocks.items() if name.endswith(k)), None)
        if block is not None:
            m[block] = True
        masks[name] = m
    return masks


def resume_training(model) -> bool:
    """A trained copy-circuit draft loaded from its folder (--init pretrained:, an on-policy round), made ready to
    train as add_copy_circuit left it: the structural-zero masks rebuilt from its weights (training kept those
    entries at exactly zero) and the private dims' final-norm gain, which export set (calibrated), back at 1.
    Without this, Adam moves every zero with a gradient and the circuit is buried within a few dozen steps (the
    held-out proxy fell from 0.40 to 0.12 in 25 steps). False for a draft without the circuit."""
    cc = getattr(model.config, "copy_circuit", None)
    if not cc or getattr(model, "_copy_circuit_masks", None):
        return False
    c = model.config
    group = c.num_attention_heads // c.num_key_value_heads  # the circuit added one KV group of this many heads
    with torch.no_grad():
        model.model.norm.weight[cc["private"]:] = 1.0
    model._copy_circuit_masks = _masks(model, cc["private"], c.num_attention_heads - group,
                                       c.num_key_value_heads - 1, _head_dim(c))
    return True


def mask_gradients(model) -> int:
    """Keep the structural zeros of a copy-circuit draft at zero during training (see _masks); returns how
    many parameters got a gradient mask (0 for a draft without the circuit)."""
    masks = getattr(model, "_copy_circuit_masks", None)
    if not masks:
        return 0
    n = 0
    for name, prm in model.named_parameters():
        m = masks.get(name.removeprefix("base_model.model."))
        if m is not None and prm.requires_grad:
            m = m.to(prm.device)
            prm.register_hook(lambda g, m=m: g * m)
            n += 1
    return n
