"""speculators' own trainer, `python -m speculators.train`, able to run on a CPU.

    .venv-vllm/bin/python -m distill.peers.speculators_cpu --speculator-type eagle3 --verifier-name-or-path T ...
    .venv-vllm/bin/python -m distill.peers.speculators_cpu plan DATA TOKENS_PER_STEP TRAIN_RATIO SEED STEPS

It takes speculators' flags unchanged and runs in the interpreter speculators is installed in (scripts/setup.sh puts
speculators 0.9.0 in .venv-vllm; distill.peers starts it there). Without an accelerator speculators 0.9.0 still moves
every batch and the model to device 0 (`tensor.to(local_rank)`: cuda:0), autocasts on "cuda", loads a resumed
run's state onto "cuda:0" and times each logged step with torch.accelerator.synchronize(), which raises without an
accelerator. Where torch finds no accelerator this module points those at the CPU (a CPU's work is done when its
call returns: nothing to wait for) before speculators' own `main` runs; nothing of its recipe (model, data, loss,
optimizer, schedule) changes. On a GPU it changes nothing.
"""

from __future__ import annotations

import json
import sys

import torch


def cpu_defaults() -> None:
    """speculators' device choices, on the CPU (see the module docstring); nothing where an accelerator exists."""
    if torch.accelerator.current_accelerator() is not None:
        return
    from speculators.train import checkpointer, trainer

    torch.accelerator.synchronize = lambda device=None: None  # _StepTimer's, at every logged step
    trainer.get_local_rank = lambda: "cpu"  # Trainer.local_rank: where the model and each batch go
    checkpointer.get_current_device = lambda: "cpu"  # where a resumed run's state loads
    init = trainer.Trainer.__init__

    def cpu_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.device_type = "cpu"  # torch.autocast's device (speculators falls back to "cuda")

    trainer.Trainer.__init__ = cpu_init


def plan(data: str, tokens_per_step: float, ratio: float, seed: int, steps: int) -> dict:
    """How speculators' own packing (MultipackDistributedBatchSamplerV2 over the train split's lengths, one rank)
    lays out `steps` optimizer steps: the --total-seq-len whose packed batches carry `tokens_per_step` on average
    (a batch holds a little less than its limit, so the limit is corrected once or twice), the epochs that hold those
    steps (--epochs: more would each run one step past --max-steps, at the schedule's zero learning rate, and save
    and validate again) and the tokens they carry."""
    import datasets
    import numpy as np
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    lengths = np.asarray(datasets.load_from_disk(data)["seq_len"])
    lengths = lengths[:int(len(lengths) * ratio)]  # speculators' train split: the first rows (ArrowDataset)

    def lay_out(seq: int) -> dict:
        sampler = MultipackDistributedBatchSamplerV2(seq, lengths, num_replicas=1, rank=0, seed=seed)
        epochs = tokens = taken = 0
        while taken < steps:
            batches = sampler._generate_batches(epochs)[:steps - taken]
            if not batches:
                raise SystemExit(f"{data}: no batch of {seq} tokens in the train split")
            tokens += sum(int(np.minimum(lengths[b], seq).sum()) for b in batches)
            taken, epochs = taken + len(batches), epochs + 1
        return {"total_seq_len": seq, "epochs": epochs, "steps": taken, "tokens": tokens}

    seq = max(int(round(tokens_per_step)), int(lengths.max()))
    for _ in range(3):
        out = lay_out(seq)
        better = max(int(round(seq * tokens_per_step * steps / max(out["tokens"], 1))), int(lengths.max()))
        if better == seq:
            break
        seq = better
    return lay_out(seq)


def main() -> None:
    if sys.argv[1:2] == ["plan"]:
        data, per_step, ratio, seed, steps = sys.argv[2:7]
        print(json.dumps(plan(data, float(per_step), float(ratio), int(seed), int(steps))))
        return
    cpu_defaults()
    from speculators.train.cli import main as train
    from speculators.train.config import TrainConfig

    train(TrainConfig.resolve())


if __name__ == "__main__":
    main()
