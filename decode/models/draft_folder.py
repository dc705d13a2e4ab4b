"""The draft-folder format, read and written here only: training writes it, every stage and the decoder read it.

    DRAFT/config.json, model.safetensors (or shards + index), tokenizer files, generation_config.json
                            a plain HF model folder: AutoModelForCausalLM loads it, generate(assistant_model=) takes it
    DRAFT/specdistill.json  what the draft is: target, design, init, loss, data, training step, metrics, commands
    DRAFT/draft_vocab.json  a reduced vocabulary only: {"draft_to_target": [target id of draft id j, ...]}

A reduced-vocabulary draft speaks N of the target's V ids. `VocabMap` holds the map and its one inversion.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from decode.errors import UserError

META_FILE = "specdistill.json"
VOCAB_MAP_FILE = "draft_vocab.json"


class VocabMap:
    """Draft ids <-> target ids. d2t: (N,) target id of each draft id; t2d: (V,) draft id of each target id, -1 where
    the draft has none. VocabMap(None, V) is the identity (a full-vocabulary draft), so callers need no branch.

    Context tokens outside the draft vocabulary are read by the draft as draft id 0 (`inputs`): its context is
    slightly lossy, but the target verifies every token. Teacher ids keep -1 (`teacher`): losses put that mass
    in a tail bin.
    """

    def __init__(self, draft_to_target, target_vocab: int):
        self.reduced = draft_to_target is not None
        self.target_vocab = target_vocab
        if not self.reduced:
            return
        self.d2t = torch.as_tensor(draft_to_target, dtype=torch.long)
        self.t2d = torch.full((target_vocab,), -1, dtype=torch.long)
        self.t2d[self.d2t.cpu()] = torch.arange(len(self.d2t))
        self._inputs = self.t2d.clamp(min=0).tolist()  # list lookups beat tensor indexing for a few decode-loop ids
        self._d2t = self.d2t.tolist()

    def teacher(self, ids: torch.Tensor) -> torch.Tensor:
        """Target ids (any shape) -> draft ids, -1 outside the draft vocabulary."""
        return self.t2d.to(ids.device)[ids] if self.reduced else ids

    def inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """Target ids (any shape) -> draft input ids, 0 outside the draft vocabulary."""
        return self.teacher(ids).clamp(min=0) if self.reduced else ids

    def targets(self, ids: torch.Tensor) -> torch.Tensor:
        """Draft ids (any shape) -> target ids."""
        return self.d2t.to(ids.device)[ids] if self.reduced else ids

    def to_draft(self, ids: list[int]) -> list[int]:
        """A few target ids -> draft input ids (the decode loop's per-round feed)."""
        return [self._inputs[t] for t in ids] if self.reduced else ids

    def to_target(self, j: int) -> int:
        return self._d2t[j] if self.reduced else j

    def expand(self, q: torch.Tensor) -> torch.Tensor:
        """(V_draft,) draft probs -> (V_target,), zero outside the draft vocabulary."""
        if not self.reduced:
            return q
        out = torch.zeros(self.target_vocab, dtype=q.dtype, device=q.device)
        return out.index_copy_(0, self.d2t.to(q.device), q)


# --- writing


def save(folder: str | Path, model, tokenizer, meta: dict, vocab_map: list[int] | None = None,
         state_dict: dict | None = None) -> Path:
    """Write a draft folder: the model (or `state_dict` through the model's class), tokenizer, map and metadata."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if vocab_map is not None:
        (folder / VOCAB_MAP_FILE).write_text(json.dumps({"draft_to_target": [int(t) for t in vocab_map]}))
    (folder / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return folder


def assistant_config(generation_config, gamma: int, schedule: str = "constant", confidence: float = 0.0):
    """A copy of a draft's generation config set up for transformers' assisted generation at γ.

    transformers reads these from the *assistant's* generation config (kwargs to generate() are ignored there)
    and defaults to 20 tokens with an adaptive threshold, far from a measured γ; its heuristic schedule would
    persist across calls, hence the transient one."""
    gc = copy.deepcopy(generation_config)
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "heuristic_transient" if schedule == "heuristic" else "constant"
    gc.assistant_confidence_threshold = confidence
    return gc


# --- reading


def read_meta(folder: str | Path) -> dict:
    """specdistill.json of a draft folder; {} for a folder without one (a plain HF model, `layers:` cuts)."""
    path = Path(folder) / META_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from None


def read_vocab_map(folder: str | Path, vocab_size: int | None = None) -> list[int] | None:
    """The draft's map to target ids (None: full vocabulary), checked against the draft's vocab_size."""
    path = Path(folder) / VOCAB_MAP_FILE
    if not path.is_file():
        return None
    try:
        d2t = json.loads(path.read_text())["draft_to_target"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{path}: expected {{\"draft_to_target\": [target ids]}} ({e})") from None
    if vocab_size is not None and len(d2t) != vocab_size:
        raise UserError(f"{path}: {len(d2t)} entries but the draft has vocab_size {vocab_size}")
    return d2t


def weight_files(folder: str | Path) -> list[Path]:
    """model.safetensors, or the shards a model.safetensors.index.json names."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    return [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []


def require(folder: str | Path) -> dict:
    """The metadata of a complete draft folder (config, weights, specdistill.json), or a UserError naming what is
    missing and, for a training run's folder, the checkpoints inside it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder; give the draft checkpoint folder distill.train wrote")
    missing = [f for f in ("config.json", META_FILE) if not (folder / f).is_file()]
    if not weight_files(folder):
        missing.append("model.safetensors")
    if missing:
        inner = sorted(str(p.parent) for p in folder.glob(f"*/{META_FILE}"))
        hint = (f"; checkpoints inside it: {', '.join(inner[:5])}" if inner else
                " (distill.train writes config.json, model.safetensors and specdistill.json into each checkpoint)")
        raise UserError(f"{folder} is not a draft checkpoint: it has no {', '.join(missing)}{hint}")
    return read_meta(folder)


# --- the window evaluate's long check chose (decode.drafting.prompt_read)

WINDOW_FIELD = "draft_context"  # specdistill.json: {"window": W, ... the measurements behind it}


def read_window(folder: str | Path) -> int | None:
    """The prompt window stored with a draft (its specdistill.json's draft_context.window), None without one."""
    record = read_meta(folder).get(WINDOW_FIELD) if Path(folder, META_FILE).is_file() else None
    window = record.get("window") if isinstance(record, dict) else None
    return window if isinstance(window, int) and window > 0 else None


def store_window(folder: str | Path, record: dict) -> bool:
    """Store the window and what it was chosen from in a draft folder's specdistill.json (written whole, then
    renamed into place); False for a folder without one (nothing of ours to add to)."""
    path = Path(folder) / META_FILE
    if not path.is_file():
        return False
    meta = read_meta(folder)
    meta[WINDOW_FIELD] = record
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    tmp.replace(path)
    return True
