"""Draft construction: a standard HF causal LM of the target's class, built from a design.

    layers             count (the target's first N layers) or explicit target layer indices
    hidden_size, intermediate_size, num_attention_heads, num_key_value_heads   (None = the target's)
    init               target_layers | prune | random | pretrained:PATH | other_tokenizer:PATH (a model with another
                       tokenizer: its layers, rows mapped onto the target's vocabulary; distill/train/transplant.py)
    vocab              "full" or N: the draft's vocabulary is the N most frequent target tokens in the data
    freeze             parts that do not train: embed (tied heads freeze with it), head, norm
    copy_circuit       widen the draft with a hand-built induction (copy) circuit (distill/train/copy_circuit.py)

build_draft_from_files builds from the target's folder, reading only the tensors the draft keeps (the training
job's way: a 2-layer draft of a 70B target never holds the 70B); build_draft from a target already in memory.
`prune` is Sheared-LLaMA-style structured width pruning (distill/train/prune.py); it alone loads the whole target.
A reduced vocabulary keeps the matching rows of the embedding and head, in place; `vocab_map[i]` is the target id
of draft id i (stored as decode.models.draft_folder.VOCAB_MAP_FILE).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from decode.bench import latency
from decode.errors import UserError
from decode.models.draft_folder import VocabMap, read_vocab_map
from decode.models.layer_cut import (
    config_dtype,
    cut_config,
    draft_from_files,
    draft_from_layers,
    has_safetensors,
    target_generation_config,
)
from decode.models.targets import check_tokenizers, load_model, resolve
from distill.train import copy_circuit, transplant
from distill.train.prune import PRUNE_TYPES, ffn_name, importance, prune, target_widths


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
        t = target_widths(tc)
        heads = self.num_attention_heads or t["num_attention_heads"]
        return {"hidden_size": self.hidden_size or t["hidden_size"],
                "intermediate_size": self.intermediate_size or t["intermediate_size"],
                "num_attention_heads": heads,
                "num_key_value_heads": self.num_key_value_heads or min(t["num_key_value_heads"], heads)}

    @staticmethod
    def _check_prune(tc, widths: dict, t: dict) -> None:
        if tc.model_type not in PRUNE_TYPES:
            raise UserError(f"init=prune does not support {tc.model_type!r} targets (width pruning knows "
                            f"{', '.join(PRUNE_TYPES)}); use init=target_layers")
        wider = [k for k, v in widths.items() if v > t[k]]
        if wider:
            raise UserError(f"init=prune can only narrow the target: {wider} exceed the target's")
        heads, kv = widths["num_attention_heads"], widths["num_key_value_heads"]
        t_group = t["num_attention_heads"] // t["num_key_value_heads"]
        if heads // kv > t_group:
            raise UserError(f"init=prune: {heads} heads over {kv} KV heads needs {heads // kv} query heads per KV "
                            f"group; the target has {t_group}")

    def check(self, tc) -> None:
        """Reject designs that are impossible for target config `tc`, naming the problem."""
        self.layer_indices(tc.num_hidden_layers)
        if self.init not in ("target_layers", "prune", "random") and not str(self.init).startswith("pretrained:") \
                and not transplant.source(self.init):
            raise UserError(f"init={self.init!r}: use target_layers, prune, random, pretrained:PATH or "
                            "other_tokenizer:PATH")
        widths, t = self.widths(tc), target_widths(tc)
        h, heads, kv = widths["hidden_size"], widths["num_attention_heads"], widths["num_key_value_heads"]
        if heads % kv:
            raise UserError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}; "
                            "set --num-key-value-heads to a divisor of it")
        if self.init == "random" and h % heads:
            raise UserError(f"hidden_size={h} is not divisible by num_attention_heads={heads}")
        if self.init == "target_layers":
            changed = [k for k, v in widths.items() if v != t[k]]
            if changed:
                raise UserError(f"init=target_layers copies layers whole, so {changed} must equal the target's; use init=prune to narrow them")
        if self.init == "prune":
            self._check_prune(tc, widths, t)
        if kv != heads and not hasattr(tc, "num_key_value_heads") and self.init in ("random", "prune"):
            raise UserError(f"num_key_value_heads={kv}: {tc.model_type} has no grouped-query attention; "
                            f"leave it unset or equal to num_attention_heads={heads}")
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


# --- token frequency (for a reduced vocabulary), measured on collected data


def frequent_tokens(sequences, n: int, always: list[int]) -> list[int]:
    """The n most frequent token ids (ties by id), always including `always` (e.g. EOS); where the data holds
    fewer than n distinct tokens, the lowest unused ids fill the rest. sequences: token id lists, or
    batches.TokenRows (counted on disk)."""
    counts = token_counts(sequences)
    keep = list(dict.fromkeys(t for t in always if t is not None))  # e.g. EOS and PAD are often the same id
    kept = set(keep)
    order = np.lexsort((np.arange(len(counts)), -counts))  # every counted id: most frequent first, ties by id
    for t in itertools.chain(order.tolist(), itertools.count(len(counts))):  # then ids past the counted ones
        if len(keep) >= n:
            break
        if t not in kept:
            keep.append(t)
            kept.add(t)
    return keep


def token_counts(sequences) -> np.ndarray:
    """(V',) how often each token id occurs in sequences (token id lists, or batches.TokenRows)."""
    if hasattr(sequences, "counts"):
        return sequences.counts(1)
    flat = np.fromiter((t for seq in sequences for t in seq), dtype=np.int64)
    return np.bincount(flat, minlength=1)


# --- construction: from a loaded target, or from the target's folder (reading only what the draft needs)


class _Loaded:
    """A target already in memory (tests, and callers that have it loaded anyway)."""

    def __init__(self, target):
        self.target, self.config, self.dtype, self.device = target, target.config, target.dtype, target.device
        self.generation_config = target.generation_config

    def cut(self, layers):
        return draft_from_layers(self.target, layers)

    def model(self):
        return self.target


class _Files:
    """A target folder (or Hub id): its config, generation config and single tensors; the whole model only on
    request (init=prune measures activations), in the dtype its config names."""

    def __init__(self, folder, device):
        if not Path(folder).is_dir():  # a Hub id: its config and safetensors, to disk (never all into memory)
            from huggingface_hub import snapshot_download

            folder = snapshot_download(folder, allow_patterns=["*.json", "*.safetensors"])
        self.folder, self.device = folder, torch.device(device)
        self.config = AutoConfig.from_pretrained(folder)
        self.dtype = config_dtype(self.config)
        self.generation_config = target_generation_config(folder, self.config)

    def cut(self, layers):
        if not has_safetensors(self.folder):  # .bin weights cannot be read a tensor at a time
            return draft_from_layers(self.model(), layers)
        return draft_from_files(self.folder, layers, self.dtype)

    def model(self):
        return load_model(self.folder, self.dtype, str(self.device))[0]


def build_draft(design: DraftDesign, target, tokenizer, sequences=None, seed: int = 0):
    """Build the draft from a loaded target (on the target's device) and return (model, vocab_map or None).

    sequences: token id lists from the collected data, needed for init=prune and a reduced vocabulary.
    """
    return _build(design, _Loaded(target), tokenizer, sequences, seed)


def build_draft_from_files(design: DraftDesign, target_folder: str, tokenizer, sequences=None, seed: int = 0,
                           device: str = "cpu"):
    """build_draft from the target's folder, in the target's dtype, onto `device`: target_layers reads only the
    kept layers' tensors (plus embeddings, final norm, head) from its safetensors, random reads only its config;
    init=prune loads the whole target (it ranks channels by the target's activations) and drops it after."""
    return _build(design, _Files(target_folder, device), tokenizer, sequences, seed)


def _build(design: DraftDesign, src, tokenizer, sequences, seed: int):
    tc = src.config
    design.check(tc)
    layers = design.layer_indices(tc.num_hidden_layers)
    torch.manual_seed(seed)
    if design.init == "target_layers":
        draft = src.cut(layers)
    elif design.init == "prune":
        if not sequences:
            raise UserError("init=prune ranks channels on collected data: give --data")
        target = src.model()
        draft = prune(target, layers, design.widths(tc), importance(target, sequences[:32]))
        del target
    elif design.init == "random":
        draft = AutoModelForCausalLM.from_config(_random_config(design, tc, layers), dtype=src.dtype)
    elif transplant.source(design.init):  # another tokenizer's model, its rows mapped onto the target's ids
        draft = transplant.build(transplant.source(design.init), tokenizer, tc, layers, src.dtype, src.device)
    else:  # a draft trained before (an on-policy round continues it): it keeps its own vocabulary and circuit
        folder = design.init.split(":", 1)[1]
        draft, tok = load_model(folder, src.dtype, str(src.device))
        vocab_map = read_vocab_map(resolve(folder), draft.config.vocab_size)
        check_tokenizers(tokenizer, tok, vocab_map)
        copy_circuit.resume_training(draft)
        return draft, vocab_map
    draft.generation_config = copy.deepcopy(src.generation_config)
    vocab_map = None
    if design.vocab != "full":
        if not sequences:
            raise UserError("a reduced vocabulary is chosen by token frequency in collected data: give --data")
        vocab_map = frequent_tokens(sequences, int(design.vocab), [tokenizer.eos_token_id, tokenizer.pad_token_id])
        reduce_vocab(draft, vocab_map)
    if design.copy_circuit:
        draft = _with_copy_circuit(draft, sequences or [], vocab_map, tc.vocab_size, seed)
    draft.to(src.device)
    return draft, vocab_map


def _random_config(design: DraftDesign, tc, layers: list[int]):
    """The target's config at the design's depth and widths, each under the name this architecture reads."""
    cfg = cut_config(tc, layers)
    w = design.widths(tc)
    cfg.hidden_size, cfg.num_attention_heads = w["hidden_size"], w["num_attention_heads"]
    setattr(cfg, ffn_name(cfg), w["intermediate_size"])
    if hasattr(cfg, "num_key_value_heads"):
        cfg.num_key_value_heads = w["num_key_value_heads"]
    cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
    return cfg


def reduce_vocab(draft, vocab_map: list[int]) -> None:
    """Keep only the embedding/head rows of vocab_map (draft id i = target id vocab_map[i]), in place: the
    modules keep their classes (Gemma's embedding scales by sqrt(hidden)), the head keeps its bias (Phi)."""
    idx = torch.tensor(vocab_map, device=draft.device)
    emb, head = draft.get_input_embeddings(), draft.get_output_embeddings()
    tied = head.weight is emb.weight
    pad = draft.config.pad_token_id
    emb.weight = torch.nn.Parameter(emb.weight.data[idx], requires_grad=emb.weight.requires_grad)
    emb.num_embeddings = len(idx)
    emb.padding_idx = vocab_map.index(pad) if pad in vocab_map else None  # as a reload builds it
    head.weight = emb.weight if tied else torch.nn.Parameter(head.weight.data[idx], requires_grad=head.weight.requires_grad)
    if getattr(head, "bias", None) is not None:
        head.bias = torch.nn.Parameter(head.bias.data[idx], requires_grad=head.bias.requires_grad)
    head.out_features = len(idx)
    draft.config.vocab_size = len(idx)
    position = {t: i for i, t in enumerate(vocab_map)}
    for cfg in (draft.config, draft.generation_config):  # special ids in draft ids, in both places they are read
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            setattr(cfg, name, _draft_ids(getattr(cfg, name, None), position))


def _draft_ids(tid, position: dict):
    """A special token id (or a list of them, e.g. Llama-3.1's EOS ids) in draft ids; None where none is kept."""
    if isinstance(tid, list):
        kept = [position[t] for t in tid if t in position]
        return kept or None
    return position.get(tid) if isinstance(tid, int) else None


# --- the copy circuit, freezing, description


SINK_ROWS = 4096  # rows the copy circuit's sink token is read from


def _with_copy_circuit(draft, sequences, vocab_map, target_vocab: int, seed: int):
    """The copy circuit on the draft's ids; its sink is the token that starts (nearly) every sequence, if any."""
    from distill.train.copy_circuit import add_copy_circuit

    head = sequences[:SINK_ROWS]  # enough rows to tell; all of them would be read into Python
    first = Counter(s[0] for s in head if s).most_common(1)
    sink = first[0][0] if first and first[0][1] >= 0.9 * len(head) else None
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
