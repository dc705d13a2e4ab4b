"""train: build a draft from a design and distill it on collected target outputs (`accelerate launch distill/train.py`).

    job.py           TrainConfig, main(), and train(): setup, data, model, batches, engine, resume, loop, top to bottom
    loop.py          one optimizer step, metrics, the preemption signal, checkpoint saves (what the loop shares: Run)
    proxy.py         the held-out acceptance proxy (teacher-forced top-1 agreement) and the optional real decode
    export.py        each checkpoint's draft folder: the calibrated weights and specdistill.json (decode.draft_folder)
    designs.py       draft designs: target_layers, prune, random, pretrained; reduced vocabulary; freezing
    copy_circuit.py  the hand-built induction (copy) circuit a shallow draft cannot learn
    student.py       the draft as training sees it (logits at trained positions only)
    losses.py        distillation losses over the teacher's stored top-k
    batches.py       examples, length-bucketed batch order that a resumed run repeats, collation
    checkpoints.py   atomic, resumable checkpoints with an HF draft folder beside each
    copy_probe.py    `python -m distill.train.copy_probe`: does a draft copy from its context?
"""

from distill.train.job import TrainConfig, concatenate, lr_at, main, train

__all__ = ["TrainConfig", "concatenate", "lr_at", "main", "train"]
