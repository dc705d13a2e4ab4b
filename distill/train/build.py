"""The draft as built for training: a standalone draft from its design (designs.py) or a feature head (head.py),
with what evaluation and the export need to know about it (Draft), and a head's features (stored or online)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig

from decode.bench import latency
from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.models.layer_cut import config_dtype
from decode.models.targets import load_target, resolve
from distill.train import batches, copy_circuit, head, parallel
from distill.train.config import TrainConfig
from distill.train.data import Data
from distill.train.designs import (
    DraftDesign,
    apply_freeze,
    build_draft_from_files,
    circuit_sample,
    describe,
    frequent_tokens,
)


@dataclass
class Draft:
    """The draft as built, with what evaluation and the export need to know about it."""
    model: torch.nn.Module        # HF causal LM (a PeftModel with --lora-r) on the accelerator's device
    design: DraftDesign
    layers: list[int]             # the target layers it was built from
    vocab_map: list[int] | None   # (V_draft,) target id of each draft id; None = the target's whole vocabulary
    vocab: VocabMap | None        # the same map both ways, for collate and the proxy
    calib_seqs: list | None       # copy circuit only: draft-id sequences its output gain is measured on
    card: dict                    # describe(): params, trainable params, width, measured ms/token
    width: int = 0                # the width its learning rate is scaled by (the target's; a circuit's private dims not)


def build_model(cfg: TrainConfig, tok, data: Data, accelerator) -> Draft:
    """The draft from the target's folder: target_layers reads only the kept layers' tensors, prune loads the
    whole target for its activations and drops it (designs.build_draft_from_files)."""
    seqs = batches.TokenRows(data.train)  # token ids per row, read from disk as the build needs them
    if cfg.design == "feature_head":
        return build_feature_head(cfg, tok, seqs, accelerator)
    design = cfg.draft_design()
    folder = resolve(cfg.target)
    tc = AutoConfig.from_pretrained(folder)
    model, vocab_map = build_draft_from_files(design, folder, tok, seqs, cfg.seed, str(accelerator.device))
    model.float()  # fp32 weights to train (a bf16 target gives a bf16 cut); autocast runs bf16 on GPU
    mask_card = {}
    if cfg.parallel:  # the mask token (distill/train/parallel.py), in the draft's ids
        vocab_map, mask_card = parallel.add_mask_token(model, vocab_map, seqs.counts(tc.vocab_size), tok, tc.vocab_size)
    layers = design.layer_indices(tc.num_hidden_layers)
    circuit = getattr(model.config, "copy_circuit", None)  # built now, or in the pretrained draft's folder
    if cfg.lora_r:
        if not cfg.init.startswith("pretrained:"):
            raise UserError("--lora-r adapts an existing model: use it with --init pretrained:PATH")
        if circuit:  # dense adapters would write into the circuit's structural zeros (copy_circuit.mask_gradients)
            raise UserError(f"--lora-r: {cfg.init.split(':', 1)[1]} has a copy circuit, which LoRA adapters would "
                            "overwrite; continue it with a full fine-tune (--lora-r 0)")
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, target_modules="all-linear"))
    else:
        apply_freeze(model, design.freeze)
        if cfg.parallel:  # the mask's embedding row trains under --freeze embed too (before the circuit's masks)
            parallel.train_mask_row(model)
        copy_circuit.mask_gradients(model)
    # evaluation and export resize the copy circuit's output to the grown residual, measured on these sequences
    calib_seqs = circuit_sample(seqs, vocab_map, tc.vocab_size) if circuit else None
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    ds_plugin = accelerator.state.deepspeed_plugin
    if ds_plugin is not None and ds_plugin.zero_stage == 3:
        ds_plugin.set_deepspeed_weakref()  # give transformers back the ZeRO-3 config prepare_zero3() unset
    card = describe(model)  # leaves the model in eval mode
    if cfg.parallel:
        card.update(mask_card, parallel=cfg.parallel, trainable_params=parallel.trainable(model))
    model.train()
    vocab = VocabMap(vocab_map, tc.vocab_size) if vocab_map is not None else None
    width = circuit["private"] if circuit else model.config.hidden_size  # the copied layers' width
    return Draft(model, design, layers, vocab_map, vocab, calib_seqs, card, width)


def build_feature_head(cfg: TrainConfig, tok, seqs, accelerator) -> Draft:
    """A feature head (head.py): the target's embedding and head rows frozen, fc + one layer trained."""
    folder = resolve(cfg.target)
    tc = AutoConfig.from_pretrained(folder)
    vocab_map = (frequent_tokens(seqs, int(cfg.vocab), [tok.eos_token_id, tok.pad_token_id])
                 if cfg.vocab != "full" else None)
    model = head.build_head(cfg, folder, vocab_map, cfg.seed).to(accelerator.device)
    head.freeze_head(model, cfg.freeze)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    card = {"kind": "feature_head", "feature_layers": model.feature_layers, "head_layers": 1, "layers": 1,
            "hidden_size": tc.hidden_size, "vocab_size": model.draft_vocab_size, "params": total,
            "trainable_params": trainable, "features": cfg.features, "ttt_steps": cfg.ttt_steps,
            "variant": sorted(k for k, on in model.variant.items() if on),
            "step_ms": round(latency.step_latency(model.eval(), context=128, n_tokens=1) * 1e3, 3)}
    model.train()
    vocab = VocabMap(vocab_map, tc.vocab_size) if vocab_map is not None else None
    design = cfg.draft_design()
    return Draft(model, design, model.feature_layers, vocab_map, vocab, None, card, tc.hidden_size)


FIT_EXAMPLES = 64  # training examples the train-set agreement is measured on at each evaluation


EXTRACT_TOKENS = 4096  # padded tokens a feature-extraction forward (examples of similar length together)


def head_features(cfg: TrainConfig, accelerator, draft: Draft, train_ex, eval_ex, log):
    """stored: the main process extracts every example's features into RUN/features once (resumable), every
    rank reads them with its batches -> None. online: the target on this rank, run inside each step."""
    dtype = torch.bfloat16 if accelerator.device.type == "cuda" and cfg.precision != "fp32" else torch.float32
    if cfg.features == "online":
        return head.OnlineFeatures(load_target(cfg.target, dtype, str(accelerator.device))[0], draft.layers)
    folder = Path(cfg.output) / "features"
    store = head.store_dtype(cfg.feature_dtype, dtype, config_dtype(AutoConfig.from_pretrained(resolve(cfg.target))))
    if accelerator.is_main_process:
        folder.mkdir(parents=True, exist_ok=True)
        target = load_target(cfg.target, dtype, str(accelerator.device))[0]
        t0 = time.perf_counter()
        stores = [head.extract(target, ex, draft.layers, folder / f"{name}.{head.SUFFIX[store]}", EXTRACT_TOKENS, log,
                               store) for name, ex in (("train", train_ex), ("heldout", eval_ex))]
        tokens = int(sum(s.offsets[-1] for s in stores))
        head.write_info(Path(cfg.output), {"layers": draft.layers, "tokens": tokens, "bytes_per_token": stores[0].bytes_per_token,
                                           "bytes": tokens * stores[0].bytes_per_token, "dtype": store,
                                           "seconds_this_start": round(time.perf_counter() - t0, 1)})
        del target
    accelerator.wait_for_everyone()
    width = len(draft.layers) * draft.model.config.hidden_size
    train_ex.features = head.FeatureStore(folder / f"train.{head.SUFFIX[store]}", train_ex.lengths, width, store)
    eval_ex.features = head.FeatureStore(folder / f"heldout.{head.SUFFIX[store]}", eval_ex.lengths, width, store)
    return None


def draft_line(card: dict, device) -> str:
    """The "draft: ..." line: its shape, size and measured single-token latency."""
    return (f"draft: {card['layers']} layers x {card['hidden_size']} wide, vocab {card['vocab_size']}, "
            f"{card['params'] / 1e6:.1f}M params ({card['trainable_params'] / 1e6:.1f}M trainable), "
            f"{card['step_ms']} ms/token on {device}")
