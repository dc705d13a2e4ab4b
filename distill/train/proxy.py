"""Evaluation during training: the held-out acceptance proxy, and optionally a real speculative decode.

The proxy is teacher-forced top-1 agreement with the target's stored outputs on held-out rows (≈ α, the
acceptance rate of greedy decoding), summed over every rank's share of the rows. With --spec-eval-prompts N
the main process also decodes N held-out prompts with the target and the draft and reports the measured
acceptance rate and τ (tokens per target forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from decode.drafting.speculative import generate
from decode.models.draft_folder import VocabMap
from decode.models.targets import eos_ids
from decode.options import DecodeOptions
from decode.prompts import encode_prompt
from distill.prompts import load_prompts
from distill.train import batches, copy_circuit

NEW_TOKENS = 64  # per prompt in the real decode


@dataclass
class HeldOut:
    """What evaluation reads; fixed for the run."""
    examples: batches.Examples      # held-out examples, shortest first (similar lengths pad less); read per batch
    batch_size: int                 # rows per forward on each rank
    vocab: VocabMap | None          # reduced vocabulary: its d2t maps draft ids to target ids; None = full
    calib_seqs: list | None         # copy circuit only: where output_gain is measured (designs.circuit_sample)
    target: Any = None              # the real decode's target: on the main process with --spec-eval-prompts > 0
    tok: Any = None
    prompts: int = 0                # --spec-eval-prompts
    gamma: int = DecodeOptions.gamma
    online: Any = None              # a feature head's online features (head.OnlineFeatures)
    fit: Any = None                 # the first training examples: the same agreement on data it trains on


@torch.no_grad()
def evaluate(accelerator, student, held: HeldOut) -> dict:
    """eval/* metrics of the draft as exported: the copy circuit calibrated for the duration (weights restored)."""
    model = accelerator.unwrap_model(student).model
    ds_plugin = accelerator.state.deepspeed_plugin
    with copy_circuit.calibrated(model, held.calib_seqs):
        student.eval()
        metrics = {"eval/acceptance_proxy": acceptance_proxy(accelerator, student, held)}
        if held.fit is not None:  # far above the held-out proxy: the draft has learnt its data, and more would help
            metrics["eval/train_agreement"] = acceptance_proxy(accelerator, student, held, held.fit)
        if held.target is not None and (ds_plugin is None or ds_plugin.zero_stage < 3):  # ZeRO-3 shards the weights
            metrics.update(spec_eval(held, model))
        student.train()
    return metrics


def acceptance_proxy(accelerator, student, held: HeldOut, examples=None) -> float:
    """Share of held-out positions (or of `examples`') where the draft's argmax is the target's top-1; rank r
    takes every world-th batch from r, and one reduce sums (agreements, positions) over ranks."""
    rank, world, size = accelerator.process_index, accelerator.num_processes, held.batch_size
    examples = examples if examples is not None else held.examples
    agree = torch.zeros(2, device=accelerator.device)  # (agreements, positions)
    head = examples.features is not None or held.online is not None  # a feature head: target ids in, features
    for i in range(rank * size, len(examples), world * size):
        b = batches.collate(examples.take(range(i, min(i + size, len(examples)))), held.vocab, map_inputs=not head)
        b = {k: v.to(accelerator.device) for k, v in b.items()}
        if held.online is not None:
            b["features"] = held.online(b)
        # the head in chunks of positions, with the model's final soft-capping (Student.logits)
        kw = {"features": b["features"]} if head else {}
        pred = student(b["input_ids"], b["attention_mask"], b["sel"], argmax=True, **kw)  # (N,) draft ids
        if held.vocab is not None:  # (N,) target ids; -1 (no prediction) stays -1
            pred = torch.where(pred >= 0, held.vocab.targets(pred.clamp(min=0)), pred)
        agree += torch.stack([(pred == b["target_top1"]).sum().float(), torch.tensor(float(len(pred)), device=pred.device)])
    agree = accelerator.reduce(agree, "sum")
    return round((agree[0] / agree[1].clamp_min(1)).item(), 4)


def spec_eval(held: HeldOut, model) -> dict:
    """Greedy speculative decoding of the first held.prompts held-out prompts: acceptance rate and τ."""
    d2t = held.vocab.d2t if held.vocab is not None else None
    model.eval()
    proposed = accepted = rounds = 0
    for row in load_prompts("heldout", limit=held.prompts):
        ids = encode_prompt(held.tok, row)
        _, st = generate(held.target, model, ids, NEW_TOKENS, DecodeOptions(gamma=held.gamma),
                         eos_token_ids=eos_ids(held.target, held.tok), vocab_map=d2t)
        proposed, accepted, rounds = proposed + st.proposed, accepted + st.accepted, rounds + st.rounds
    model.train()
    return {"eval/acceptance_rate": round(accepted / max(proposed, 1), 4), "eval/tau": round((accepted + rounds) / max(rounds, 1), 4)}
