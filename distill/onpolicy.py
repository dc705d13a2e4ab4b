"""On-policy rounds (DistillSpec's on-policy data, as online distillation does it): after the standalone draft's
first training, the draft writes answers to the train prompts, the target scores its text (distill.collect
--generator: top-k at every position, one forward pass per batch instead of one per token), and training
continues from that draft on the mix of the first collection and every round's draft-written data.

The pipeline's `onpolicy` section:

    onpolicy:
      rounds: 1                       # 0 = off
      collect: {temperature: 0.0}     # distill.collect overrides for the draft-written data
      train: {max_steps: 150}         # distill.train overrides for the continued training (defaults: continued())

Round r writes RUN/onpolicy-r/collect and RUN/onpolicy-r/train; each resumes like the stages it reuses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from decode.errors import UserError
from distill import collect, train
from distill.train import checkpoints

KEYS = ("rounds", "collect", "train")
KEPT = ("target", "prompts", "columns", "split", "categories", "limit", "chat_template", "max_new_tokens", "topk",
        "stop", "seed", "batch_size", "device", "dtype")  # what the draft's answers share with the first collection


@dataclass
class Round:
    collect: collect.CollectConfig   # its generator is set when the round starts (the previous run's last draft)
    train: train.TrainConfig         # its init likewise: pretrained:<that draft>


def plan(section: dict, out: Path, c, t, stage_config) -> list[Round]:
    """The rounds' configs, checked before the pipeline's first stage (stage_config: the pipeline's, which names
    the section in every error)."""
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise UserError(f"pipeline `onpolicy` section: unknown key(s) {unknown}; valid: {list(KEYS)}")
    rounds = section.get("rounds", 0)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        raise UserError(f"pipeline `onpolicy` section: rounds must be a whole number >= 0 (0 = off), got {rounds!r}")
    plans, data = [], [c.output]
    for r in range(1, rounds + 1):
        d = out / f"onpolicy-{r}"
        oc = stage_config(collect.CollectConfig, {**{k: getattr(c, k) for k in KEPT}, "output": str(d / "collect"),
                                                  "generator": "<the previous round's draft>"},
                          section.get("collect") or {}, "onpolicy collect")
        data = [*data, oc.output]
        base = {**{k: v for k, v in vars(t).items() if k not in ("output", "data", "init")}, **continued(t)}
        ot = stage_config(train.TrainConfig, {**base, "output": str(d / "train"), "data": data,
                                              "init": "pretrained:<the previous round's draft>"},
                          section.get("train") or {}, "onpolicy train")
        plans.append(Round(oc, ot))
    return plans


def continued(t) -> dict:
    """The continued training's defaults, from the first run's recipe `t`: half its steps at half its peak lr after
    a short warm-up (a fresh optimizer on a trained draft). Measured on the default target
    (configs/sweep/onpolicy.yaml): 275 steps at 1.5e-3 after the 550-step draft left its held-out proxy where it
    was on its own data (0.398 -> 0.399 in the run of docs/results.md), so what a round's data adds shows."""
    return {"max_steps": max(1, t.max_steps // 2), "lr": t.lr / 2, "warmup_steps": min(t.warmup_steps, 10)}


def last_draft(run_dir: Path) -> Path:
    """The newest complete checkpoint's draft folder of a training run."""
    done = checkpoints.complete(run_dir)
    if not done:
        raise UserError(f"{run_dir} holds no complete checkpoint after training; rerun the same command to resume it")
    return done[0] / "hf"


def run(rounds: list[Round], first_run: Path, train_one, command: str) -> tuple[Path, list[dict]]:
    """Each round: the previous run's last draft writes, the target scores, training continues from that draft.
    Returns (the last round's run folder, one summary per round)."""
    prev, summary = first_run, []
    for i, rnd in enumerate(rounds, 1):
        draft = str(last_draft(prev))
        oc, ot = replace(rnd.collect, generator=draft), replace(rnd.train, init=f"pretrained:{draft}")
        print(f"== on-policy round {i}: {draft} writes, the target scores -> {oc.output}", flush=True)
        info = collect.run(oc, command=command) or {}
        print(f"== on-policy round {i}: training continues on {len(ot.data)} collections -> {ot.output}", flush=True)
        train_one(ot)
        summary.append({"round": i, "from": draft, "tokens": info.get("tokens"), "tokens_per_s": info.get("tokens_per_s"),
                        "run": ot.output})
        prev = Path(ot.output)
    return prev, summary
