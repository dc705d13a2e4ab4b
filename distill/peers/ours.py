"""What a pipeline run holds for the comparison: its drafts, its head's training examples and what each draft saw.

    drafts(run)          {design: the last checkpoint's folder} of each design the run trained, and the shipped one
    head_config(run)     the feature head's TrainConfig, as it trained (RUN/train-head/train.config.json)
    tokens_seen(cfg, n)  input tokens of a run's first n optimizer steps, replayed from its own batch order
    head_proxy(...)      teacher-forced top-1 agreement of a feature head folder on held-out examples: the training
                         proxy (distill.train.proxy.acceptance_proxy), the same function for our head and a peer's
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from decode.errors import UserError
from decode.models.draft_folder import VocabMap
from decode.models.feature_head import FeatureHead
from distill.collect.shards import check_collection
from distill.train import TrainConfig, batches, checkpoints
from distill.train import head as head_design
from distill.train.data import batch_order, load_data, make_examples
from distill.train.head import HeadStudent, OnlineFeatures
from distill.train.proxy import HeldOut, acceptance_proxy

RUNS = {"standalone": "train", "feature_head": "train-head", "parallel": "train-parallel"}  # the pipeline's folders


def check_run(run: Path) -> None:
    """A pipeline folder with a finished collection and a trained feature head, or one line saying what to run."""
    if not (run / "pipeline.config.json").is_file():
        raise UserError(f"--run {run}: not a pipeline folder (no pipeline.config.json); run python -m distill.pipeline "
                        f"--config configs/pipeline/default.yaml --designs all --output {run} first")
    for part in ("collect", "heldout"):
        if not (run / part / "collect.json").is_file():
            raise UserError(f"--run {run} has no finished collection in {run / part}: rerun its pipeline command "
                            "(it resumes) before comparing")
        check_collection(run / part)
    if last(run / RUNS["feature_head"]) is None:
        raise UserError(f"--run {run} has no trained feature head ({run / RUNS['feature_head']}): rerun its pipeline with "
                        "--designs all (on a CPU its plan skips the head)")


def drafts(run: Path) -> dict:
    """{design: last checkpoint's hf folder} for each design trained in the run, plus "shipped": the design
    pipeline.json says it shipped (None before the pipeline's evaluation)."""
    found = {d: str(last(run / sub)) for d, sub in RUNS.items() if last(run / sub) is not None}
    summary = json.loads((run / "pipeline.json").read_text()) if (run / "pipeline.json").is_file() else {}
    shipped = (summary.get("shipped") or {}).get("from")
    return {**found, "shipped": next((d for d, f in found.items() if shipped and Path(f) == Path(shipped)), None)}


def last(run_dir: Path) -> Path | None:
    """The newest complete checkpoint's draft folder of a training run (None: no run, or none complete)."""
    done = checkpoints.complete(run_dir) if (run_dir / "train.config.json").is_file() else []
    return done[0] / "hf" if done else None


def train_config(run_dir: Path) -> TrainConfig:
    """A training run's resolved TrainConfig (train.config.json: every field, as the run used it)."""
    saved = json.loads((run_dir / "train.config.json").read_text())
    return TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.__dataclass_fields__})


def examples(cfg: TrainConfig, tok):
    """(training examples, held-out examples) exactly as the run's training reads them."""
    return make_examples(cfg, load_data(cfg, tok))


def feature_layers(cfg: TrainConfig, target) -> list[int]:
    """The target layers the run's feature head reads (its --feature-layers, or the default)."""
    return head_design.feature_layers(cfg, target.config.num_hidden_layers)


def tokens_seen(cfg: TrainConfig, train_ex: batches.Examples, steps: int) -> int:
    """Input tokens (prompt + response, no padding) of the first `steps` optimizer steps of a run, from its own
    seeded batch order (epoch by epoch) and gradient accumulation."""
    order, lengths = batch_order(cfg, train_ex), train_ex.lengths
    left, total, epoch = steps * cfg.grad_accum, 0, 0
    while left > 0:
        batch_list = order(epoch)[:left]
        total += int(sum(lengths[np.asarray(b)].sum() for b in batch_list))
        left, epoch = left - len(batch_list), epoch + 1
    return total


def trained_steps(run_dir: Path) -> int:
    """The optimizer steps of a run's last checkpoint (its trainer_state.json)."""
    state = json.loads((last(run_dir).parent / "trainer_state.json").read_text())
    return int(state["step"])


@torch.no_grad()
def head_proxy(folder: str, target, heldout: batches.Examples, batch_size: int) -> float:
    """Held-out top-1 agreement of the head in `folder` with the target's stored outputs, its features computed by
    the target as it runs (distill.train.head.OnlineFeatures), over the same examples for every head."""
    head = FeatureHead.load(folder, dtype=torch.float32, device=str(target.device))
    ids = head.draft_ids()
    vocab = VocabMap(ids.tolist(), target.config.vocab_size) if ids is not None else None
    student = HeadStudent(head, weights={}, jsd_beta=0.5, chunk_bytes=256 << 20, ttt_steps=1, ttt_decay=1.0).eval()
    held = HeldOut(examples=heldout, batch_size=batch_size, vocab=vocab, calib_seqs=None,
                   online=OnlineFeatures(target, head.feature_layers))
    one = SimpleNamespace(process_index=0, num_processes=1, device=target.device, reduce=lambda x, op: x)
    return acceptance_proxy(one, student, held)
