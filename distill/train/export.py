"""The draft as a plain HF folder beside each checkpoint (RUN/checkpoint-N/hf), with its specdistill.json record.

decode, distill.evaluate and distill.publish load this folder (decode.models.draft_folder), never the accelerate state,
so it holds the draft as the last evaluation measured it: the copy circuit calibrated, LoRA merged into plain
weights, a reduced vocabulary's map beside it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path

import torch

from decode.models import draft_folder
from decode.models.feature_head import FeatureHead
from decode.models.targets import DEFAULT_HUB_ID, DEFAULT_TARGET
from distill.train import batches, copy_circuit


def record(cfg, draft, data, command: str, step: int, metrics: dict, wandb: dict | None) -> dict:
    """specdistill.json: the target, design, data and commands behind the draft, its step and last eval metrics.

    draft: job.Draft; data: data.Data (the training split: its rows and response tokens are counted).
    """
    infos = data.infos  # collect_info() of each --data dir, in order; the first one's settings name the prompts
    design = ({**draft.card, "init": cfg.init, "freeze": cfg.freeze} if cfg.design == "feature_head"
              else {**asdict(draft.design), **draft.card, "layers": draft.layers})
    return {
        "target": cfg.target,
        "target_name": DEFAULT_HUB_ID if cfg.target == DEFAULT_TARGET else cfg.target,
        "design": design,
        "init": cfg.init,
        "loss": cfg.loss,
        "data": {"path": cfg.data, "rows": len(data.train), "tokens": int(batches.row_lengths(data.train)[1].sum()),
                 "prompts": infos[0].get("settings", {}).get("prompts"), "collect_command": infos[0].get("command"),
                 "collect_commands": [i.get("command") for i in infos]},
        "step": step,
        "metrics": metrics,
        "commands": list(dict.fromkeys(c for c in (*(i.get("command") for i in infos), command) if c)),
        "wandb": wandb,
        "train_config": asdict(cfg),
    }


def train_dtype(accelerator) -> torch.dtype:
    """The dtype the student computes in: bf16/fp16 under mixed precision (accelerate's autocast, or DeepSpeed's
    16-bit engine), float32 otherwise. The HF folder is written in it."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(accelerator.mixed_precision), torch.float32)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def write(state_dict: dict, hf_dir: Path, model, tok, vocab_map: list[int] | None, calib_seqs: list | None,
          meta: dict, dtype: torch.dtype = torch.float32) -> None:
    """Write the HF folder from the gathered state dict (checkpoints.save calls this on the main process).

    state_dict: the Student's ("model." + the draft's keys), gathered from ZeRO-3 shards where there are any;
    model: the draft module itself (a PeftModel under LoRA), for its config and to merge the adapter; dtype: the
    floating tensors' dtype in the folder (train_dtype: a bf16 run's draft is served in bf16, so its fp32 master
    weights are rounded once here, at half the bytes; the checkpoint beside it keeps them in fp32), named in
    config.json ("dtype", speculators' "torch_dtype") and specdistill.json ("dtype").
    """
    sd = {k.removeprefix("model."): v for k, v in state_dict.items()}
    meta = {**meta, "dtype": dtype_name(dtype)}
    if isinstance(model, FeatureHead):  # the speculators folder vLLM loads, with the tokenizer and our record
        model.save(hf_dir, meta["train_config"].get("spec_eval_gamma", 3), state_dict=_cast(sd, dtype))
        _set_config_dtype(hf_dir, "torch_dtype", dtype)
        tok.save_pretrained(hf_dir)
        (hf_dir / draft_folder.META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
        return
    gain = copy_circuit.output_gain(model, calib_seqs) if calib_seqs else None
    if gain is not None:  # the exported draft is the calibrated one that the proxy measured
        norm = sd["model.norm.weight"] = sd["model.norm.weight"].clone()
        norm[model.config.copy_circuit["private"]:] = gain
    if hasattr(model, "merge_and_unload"):  # LoRA: a copy merges the adapter (in fp32), so training's model keeps it
        merged = copy.deepcopy(model)
        merged.load_state_dict(sd)
        model, sd = merged.merge_and_unload().to(dtype), None
    draft_folder.save(hf_dir, model, tok, meta, vocab_map, state_dict=None if sd is None else _cast(sd, dtype))
    _set_config_dtype(hf_dir, "dtype", dtype)  # save_pretrained names the module's dtype (fp32), not the tensors'


def _cast(sd: dict, dtype: torch.dtype) -> dict:
    """Floating tensors in `dtype`; integer ones (a head's d2t map) as they are."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}


def _set_config_dtype(hf_dir: Path, key: str, dtype: torch.dtype) -> None:
    path = hf_dir / "config.json"
    cfg = json.loads(path.read_text())
    cfg[key] = dtype_name(dtype)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=key == "dtype") + "\n")
