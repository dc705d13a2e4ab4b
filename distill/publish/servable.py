"""A reduced-vocabulary draft in a form transformers' `assistant_model=` and vLLM's draft model load as is.

A reduced draft speaks N of the target's V ids (draft_vocab.json maps draft id j -> target id d2t[j]); both
transformers and vLLM assume draft id = target id. Publish therefore ships two forms of the same function:

    REPO/           the *expanded* draft: a full-vocabulary (V) plain HF model, the target's special-token ids
    REPO/reduced/   the reduced draft as trained (N ids + draft_vocab.json): the bundled decoder's fast form

Expansion, per target id t (t2d[t]: its draft id, -1 outside the draft vocabulary):

    embedding   row t = reduced row t2d[t], or reduced row 0 outside: an OOV context token is read as draft id 0,
                exactly as the bundled decoder feeds it (VocabMap.inputs), so hidden states are unchanged;
    head        row t = reduced row t2d[t]; outside, the *mean* of the N reduced rows (and the mean bias): an OOV
                logit is then mean_j z_j <= max_j z_j, strictly below the max unless all N logits are equal, so
                no OOV token can win the argmax and greedy proposals are d2t[the reduced draft's argmax];
    tying       embedding and head now differ outside the vocabulary, so the expanded draft is untied;
    mask        a parallel draft's mask token (its last draft id N, decode.drafting.parallel) lands on its reserved
                target id d2t[N]: the embedding row there is the trained mask row, the output row an OOV row (never
                proposed), and config.json's mask_token_id / pard_token name d2t[N] (vLLM's parallel_drafting).

`check_servable` proves the two forms propose the same tokens on real prompts before anything is uploaded.

A feature head (decode.models.feature_head) needs no second form: vLLM's eagle3 maps its draft ids itself (d2t).
`head_problems` lists what in its folder vLLM would read differently from the bundled decoder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from decode.drafting.parallel import mask_token
from decode.errors import UserError
from decode.models import draft_folder
from decode.models.draft_folder import VOCAB_MAP_FILE, VocabMap

REDUCED_DIR = "reduced"  # the subfolder of a published repo that holds the reduced (bundled-decoder) form
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


# --- the two vocabulary-sized matrices


def expand_embedding(emb: torch.Tensor, vm: VocabMap) -> torch.Tensor:
    """(N, H) draft embedding -> (V, H): target id t reads draft row t2d[t], an OOV id reads row 0 (VocabMap.inputs)."""
    return emb[vm.inputs(torch.arange(vm.target_vocab))]


def expand_head(head: torch.Tensor, vm: VocabMap, bias: torch.Tensor | None = None):
    """(N, H) draft head (+ (N,) bias) -> (V, H) (+ (V,)): kept rows in place, every OOV row the mean of the N rows.

    Logits are linear in the row, so an OOV logit is the mean of the N kept logits (bias included): never above
    their max. The mean is taken in float32 and cast back, so a bf16 head gets the rounded mean, not a sum's drift.
    """
    d2t = vm.d2t.to(head.device)
    mean = head.float().mean(0).to(head.dtype)  # (H,)
    w = mean.expand(vm.target_vocab, -1).clone().index_copy_(0, d2t, head)  # (V, H)
    if bias is None:
        return w, None
    b = bias.float().mean().to(bias.dtype).expand(vm.target_vocab).clone().index_copy_(0, d2t, bias)  # (V,)
    return w, b


# --- the folder


def vocab_keys(config) -> tuple[str, str, str | None]:
    """State-dict names of (input embedding, head weight, head bias or None), read off a weightless model."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # by module, not parameter: a tied head's weight *is* the embedding's, so a parameter has two names
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    where = {id(m): n for n, m in model.named_modules()}
    bias = f"{where[id(head)]}.bias" if getattr(head, "bias", None) is not None else None
    return f"{where[id(emb)]}.weight", f"{where[id(head)]}.weight", bias


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for f in draft_folder.weight_files(folder):
        with safe_open(f, framework="pt") as sf:
            tensors.update({k: sf.get_tensor(k) for k in sf.keys()})
    return tensors


def _target_ids(target_config, target_gc, name: str):
    """A special-token id as the target has it: its generation config first (what generate reads), then config."""
    value = getattr(target_gc, name, None) if target_gc is not None else None
    return value if value is not None else getattr(target_config, name, None)


def expand_folder(reduced: Path, out: Path, target_config, target_gc=None) -> int:
    """Write the expanded draft of the assembled reduced folder into out (weights, config, generation config).

    Weights keep the reduced folder's dtype. Returns the expanded draft's parameter count.
    """
    d2t = draft_folder.read_vocab_map(reduced)
    config = AutoConfig.from_pretrained(reduced)
    V = target_config.vocab_size
    vm = VocabMap(d2t, V)
    emb_key, head_key, bias_key = vocab_keys(config)
    tensors = _read_tensors(reduced)
    if emb_key not in tensors:
        raise UserError(f"{reduced}: no {emb_key} in the weights; re-save the draft with its embedding")
    head = tensors.get(head_key, tensors[emb_key])  # a tied draft stores only the embedding
    tensors[emb_key] = expand_embedding(tensors[emb_key], vm)
    reduced_bias = tensors.get(bias_key) if bias_key else None
    tensors[head_key], bias = expand_head(head, vm, reduced_bias)
    mask = mask_token(config)  # a parallel draft: its mask id moves to its reserved target id (d2t[mask])
    if mask is not None:  # whose output row is an OOV row's, the mean: never proposed there either
        tensors[head_key][d2t[mask]] = head.float().mean(0).to(head.dtype)
        if bias is not None:
            bias[d2t[mask]] = reduced_bias.float().mean().to(bias.dtype)
    if bias is not None:
        tensors[bias_key] = bias
    save_file({k: t.contiguous() for k, t in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})

    raw = json.loads((reduced / "config.json").read_text())
    raw.update(vocab_size=V, tie_word_embeddings=False, **{n: _target_ids(target_config, None, n) for n in SPECIAL_IDS})
    if mask is not None:  # where vLLM (parallel_drafting) and TensorRT-LLM read the mask token
        raw.update(mask_token_id=d2t[mask], pard_token=d2t[mask])
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    gc = GenerationConfig.from_pretrained(reduced)
    for n in SPECIAL_IDS:
        setattr(gc, n, _target_ids(target_config, target_gc, n))
    gc.save_pretrained(out)
    return sum(t.numel() for t in tensors.values())


def split_reduced(out: Path, target_config, target_gc=None) -> int:
    """Move an assembled reduced draft in out/ into out/reduced/ and write its expanded form in out/.

    The tokenizer files and specdistill.json are in both (the bundled decoder loads reduced/ on its own).
    Returns the expanded draft's parameter count.
    """
    reduced = out / REDUCED_DIR
    reduced.mkdir()
    for f in [p for p in out.iterdir() if p.is_file()]:
        shutil.move(str(f), str(reduced / f.name))
    for f in reduced.iterdir():
        if f.name not in ("model.safetensors", "config.json", "generation_config.json", VOCAB_MAP_FILE):
            shutil.copy2(f, out / f.name)
    return expand_folder(reduced, out, target_config, target_gc)


# --- the check


@torch.inference_mode()
def same_proposals(expanded, reduced, d2t: torch.Tensor, sequences: list[list[int]]) -> tuple[bool, str]:
    """(ok, detail): at every position of every sequence (target ids), the expanded draft's argmax is d2t[the
    reduced draft's argmax] and its best out-of-vocabulary logit is strictly below its best kept one.

    The reduced draft reads the sequence as the bundled decoder feeds it (VocabMap.inputs: OOV -> draft id 0).
    """
    vm = VocabMap(d2t, expanded.config.vocab_size)
    oov = vm.t2d < 0  # (V,)
    positions, margin = 0, float("inf")
    for seq in sequences:
        x = torch.tensor([seq], device=expanded.device)
        z = expanded(input_ids=x).logits[0].float()  # (T, V)
        zr = reduced(input_ids=vm.inputs(x)).logits[0].float()  # (T, N)
        want, got = vm.targets(zr.argmax(-1)), z.argmax(-1)  # (T,) target ids
        if not torch.equal(want, got):
            i = int((want != got).nonzero()[0])
            return False, (f"the expanded draft proposes {int(got[i])} where the reduced one proposes {int(want[i])} "
                           f"(position {i}); the expansion changed the draft's function")
        if oov.any():
            m = z[:, ~oov.to(z.device)].max(-1).values - z[:, oov.to(z.device)].max(-1).values  # (T,)
            margin = min(margin, m.min().item())
        positions += len(seq)
    if margin <= 0:
        return False, f"an out-of-vocabulary token reaches the top logit (margin {margin:.3g}); it could be proposed"
    kept = int((~oov).sum())
    return True, (f"expanded ({vm.target_vocab:,} ids) and reduced ({kept:,} ids, in {REDUCED_DIR}/) drafts propose "
                  f"the same token at all {positions} positions; best OOV logit ≥ {margin:.2f} below the best kept one")


# --- feature heads (decode.models.feature_head): served by vLLM as an eagle3 speculator, as they are


EAGLE3_LAYER_TYPES = ("llama", "qwen3")  # vLLM's eagle3 draft classes (transformers_utils/configs/speculators/algos.py)


def head_problems(folder: Path, target_config) -> list[str]:
    """What in a feature head's folder vLLM's eagle3 would serve differently from the bundled decoder, or refuse,
    read off config.json and the vocabulary tensors (no model is built): [] when there is nothing.

    vLLM collects the target's aux hidden states in layer order and concatenates them so: the ids must ascend, as
    the head's features do. It reads a missing `norm_before_residual` as true (speculators as false), so it must be
    written out (either value: the bundled decoder runs both). d2t (target id - draft id) and t2d (the draft ids' mask over the target's vocabulary) must agree.
    """
    folder = Path(folder)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        layer = cfg["transformer_layer_config"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        return [f"{folder}/config.json is not an eagle3 speculators config ({type(e).__name__}: {e})"]
    problems = []
    if layer.get("model_type", "llama") not in EAGLE3_LAYER_TYPES:
        problems.append(f"transformer_layer_config.model_type {layer.get('model_type')!r}: vLLM's eagle3 has "
                        f"{' and '.join(EAGLE3_LAYER_TYPES)} layers only")
    for key in ("hidden_size", "vocab_size"):
        if layer.get(key) != getattr(target_config, key):
            problems.append(f"transformer_layer_config.{key} {layer.get(key)} is not the target's "
                            f"{getattr(target_config, key)}")
    ids, n = cfg.get("eagle_aux_hidden_state_layer_ids"), target_config.num_hidden_layers
    if not (isinstance(ids, list) and ids and all(isinstance(j, int) and 0 <= j < n for j in ids)
            and ids == sorted(set(ids))):
        problems.append(f"eagle_aux_hidden_state_layer_ids {ids}: give distinct ascending target layer ids in "
                        f"0..{n - 1} (vLLM concatenates the features in layer order)")
    if not isinstance(cfg.get("norm_before_residual"), bool):
        problems.append(f"norm_before_residual is {cfg.get('norm_before_residual')!r}: write true or false as the "
                        "head was trained (vLLM reads a missing one as true, speculators as false)")
    try:
        with safe_open(folder / "model.safetensors", framework="pt") as sf:
            keys = set(sf.keys())
            rows = sf.get_slice("lm_head.weight").get_shape()[0] if "lm_head.weight" in keys else None
            d2t = sf.get_tensor("d2t") if "d2t" in keys else None
            t2d = sf.get_tensor("t2d") if "t2d" in keys else None
    except (OSError, SafetensorError) as e:
        return problems + [f"{folder}/model.safetensors does not open: {type(e).__name__}: {e}"]
    n_draft = cfg.get("draft_vocab_size")
    if rows != n_draft:
        problems.append(f"lm_head.weight has {rows} rows, draft_vocab_size is {n_draft}")
    if n_draft != layer.get("vocab_size"):  # a reduced vocabulary: vLLM maps draft ids through d2t
        if d2t is None or t2d is None:
            problems.append("a reduced draft vocabulary without d2t and t2d in model.safetensors")
        elif len(d2t) != n_draft or t2d.dtype != torch.bool or len(t2d) != target_config.vocab_size:
            problems.append(f"d2t has {len(d2t)} entries (draft_vocab_size {n_draft}), t2d {len(t2d)} of "
                            f"{t2d.dtype} (the target's {target_config.vocab_size} bools)")
        elif not torch.equal(t2d.nonzero().flatten(), d2t + torch.arange(n_draft)):
            problems.append("d2t + draft id is not the ascending list of t2d's target ids")
    return problems
