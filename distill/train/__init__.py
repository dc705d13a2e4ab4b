"""train: build a draft from a design and distill it on collected target outputs (`accelerate launch distill/train.py`).

    job.py           main() and train(): setup, data, model, batches, engine, resume, loop, top to bottom
    config.py        TrainConfig (every setting, its default and checks) and the learning-rate schedule
    setup.py         the accelerator, ZeRO-3's plain builds, the command recorded, the resumed state, the throughput meter
    build.py         the draft as built (Draft): a standalone design or a feature head, and a head's features
    data.py          the collected rows loaded and split, examples over them left on disk, their batch order
    loop.py          one optimizer step, metrics, the preemption signal, checkpoint saves (what the loop shares: Run)
    proxy.py         the held-out acceptance proxy (teacher-forced top-1 agreement) and the optional real decode
    export.py        each checkpoint's draft folder: the calibrated weights and specdistill.json (decode.models.draft_folder)
    designs.py       draft designs built from the target's files: target_layers, prune, random, pretrained; reduced
                     vocabulary; freezing
    prune.py         Sheared-LLaMA width pruning by weight roles, and the target's activation importance
    copy_circuit.py  the hand-built induction (copy) circuit a shallow draft cannot learn
    student.py       the draft as training sees it: the head and loss in chunks of trained positions
    engine.py        the optimizer and engine: --compile, AdamW, accelerate's prepare (DDP, DeepSpeed settings)
    flops.py         training FLOPs from a draft's shapes, for MFU
    speed.py         `python -m distill.train.speed`: tokens/s and MFU of the training step on synthetic data
    losses.py        distillation losses over the teacher's stored top-k
    batches.py       examples read per micro-batch from Arrow, batch order a resumed run repeats, collation ahead
    checkpoints.py   atomic, resumable checkpoints with an HF draft folder beside each
    copy_probe.py    `python -m distill.train.copy_probe`: does a draft copy from its context?
"""

from distill.train.config import TrainConfig, lr_at
from distill.train.data import concatenate
from distill.train.job import main, train

__all__ = ["TrainConfig", "concatenate", "lr_at", "main", "train"]
