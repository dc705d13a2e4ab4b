"""Distill: build a shallow-but-wide draft from a design and train it on collected target outputs.

    accelerate launch -q --config_file configs/accelerate/zero2.yaml distill/train.py \
        --config configs/train/default.yaml [--key value ...]
    python distill/train.py --data runs/collect-default --output runs/train-default     # one CPU process

Rerunning the same command resumes from the newest complete checkpoint in --output and continues exactly
(same data order, optimizer state and RNG), so the loss curve matches an uninterrupted run.

train() reads top to bottom: setup, data, model, batches, optimizer and engine, resume, loop (its steps in loop.py).
The data and examples are in data.py, evaluation in proxy.py, the HF folder written with each checkpoint in export.py.
"""

from __future__ import annotations

from pathlib import Path

from decode import cli
from decode.models.targets import load_target, load_tokenizer
from distill.train import batches, loop, memory_fit, parallel_batches, proxy
from distill.train.build import FIT_EXAMPLES, build_model, draft_line, head_features
from distill.train.config import TrainConfig, data_workers, lr_at, peak_lr
from distill.train.data import batch_order, load_data, make_examples
from distill.train.device_feed import DeviceFeed
from distill.train.engine import make_engine
from distill.train.setup import (
    launch_command,
    make_accelerator,
    prepare_zero3,
    quiet,
    quiet_third_party,
    resume,
    throughput,
)


def main(argv: list[str] | None = None) -> None:
    cli.run_job(TrainConfig, train, argv, __doc__)


def train(cfg: TrainConfig, argv: list[str], command: str | None = None) -> Path:
    """Train (resumable). `command`: the command line to record, when another job (pipeline, sweep) runs this stage."""
    from accelerate.utils import set_seed

    # --- setup: one process per device, bf16 autocast on GPU unless --precision fp32. The seed is set before the
    # draft is built, so its init repeats (random init, the copy circuit, a LoRA adapter); resumes restore the RNG
    quiet_third_party()
    accelerator = make_accelerator(cfg)
    main_proc, world = accelerator.is_main_process, accelerator.num_processes
    log = print if main_proc else quiet
    set_seed(cfg.seed)
    prepare_zero3(cfg, accelerator)

    # --- data: rows collected from this target with its tokenizer (prompt_ids, response_ids, top-k per response
    # token); a fixed held-out split for the acceptance proxy
    tok = load_tokenizer(cfg.target)  # the target's weights: only what build_model and the spec eval need
    data = load_data(cfg, tok)

    # --- examples cut to --max-seq-len, and a check that a step on the longest micro-batch fits the device's
    # memory (memory_fit.py: an estimate from the draft's shape), before any model is built
    train_ex, eval_ex = make_examples(cfg, data)
    memory_fit.check(cfg, train_ex, accelerator)

    # --- model: the draft from its design (designs.py), then LoRA-wrapped, or partly frozen with the copy
    # circuit's structural zeros kept by gradient masks
    draft = build_model(cfg, tok, data, accelerator)
    log(draft_line(draft.card, accelerator.device))
    peak = peak_lr(cfg, draft.width)
    log(f"lr: peak {peak:.3g}" + (f" (--lr {cfg.lr:g} x --lr-width {cfg.lr_width} / width {draft.width})" if peak != cfg.lr else ""))
    mixed = str(accelerator.mixed_precision).replace("no", "fp32")
    log(f"precision: {mixed}" + (f" (--precision {cfg.precision})" if cfg.precision in ("auto", "native") else ""))
    # only the main process's real-decode eval runs the whole target (in fp32, like the draft's weights)
    spec_target = (load_target(cfg.target, "float32", str(accelerator.device))[0]
                   if cfg.spec_eval_prompts > 0 and main_proc else None)

    # --- batches: a step's micro-batches are a function of (seed, step), so a resumed run sees the same data
    # without saving a sampler
    order = batch_order(cfg, train_ex)
    online = head_features(cfg, accelerator, draft, train_ex, eval_ex, log) if cfg.design == "feature_head" else None

    # --- optimizer and engine: accelerate wraps the Student (DDP, or a DeepSpeed engine with its own optimizer)
    student, optimizer, params = make_engine(cfg, accelerator, draft.model)

    # --- resume: weights, optimizer, RNG and the step (= data position) from the newest checkpoint that loads
    run_dir = Path(cfg.output)
    state, tracker = resume(cfg, accelerator, run_dir, log)
    step = state["step"] if state else 0
    command = command or launch_command(argv)
    run = loop.Run(cfg, accelerator, student, optimizer, params, draft, tok, data, command, run_dir, tracker, online,
                   peak, (state or {}).get("skipped", 0))
    fit = train_ex.subset(range(min(FIT_EXAMPLES, len(train_ex))))  # positions 0..: the stored features line up
    fit.features = train_ex.features
    held = proxy.HeldOut(eval_ex, cfg.batch_size, draft.vocab, draft.calib_seqs, spec_target, tok,
                         cfg.spec_eval_prompts, cfg.spec_eval_gamma, online, fit)

    # a parallel draft's examples are packed with mask levels (distill/train/parallel_batches.py)
    packed = dict(block=cfg.parallel, keep=cfg.parallel_keep, mask=draft.card.get("mask_token_id"), seed=cfg.seed)
    kind, extra = (parallel_batches.StepBatches, packed) if cfg.parallel else (batches.StepBatches, {})
    run_steps(run, held, state, step, kind(train_ex, order, draft.vocab, step, cfg.max_steps, cfg.grad_accum, world,
                                           accelerator.process_index, map_inputs=cfg.design == "standalone", **extra), log)
    return run_dir


# --- model ---------------------------------------------------------------------------------------------------


def run_steps(run: loop.Run, held: proxy.HeldOut, state: dict | None, step: int, step_batches: batches.StepBatches,
              log) -> None:
    """Optimizer steps from `step` (0, or the resumed checkpoint's) to --max-steps, or until a stop signal."""
    cfg, accelerator = run.cfg, run.accelerator
    # --- loop: one optimizer step (grad_accum micro-batches) per iteration; train/* metrics every log_every steps,
    # eval/* every eval_every, a checkpoint every save_every or on a preemption signal, each also at the last step
    last_eval: dict = state.get("metrics", {}) if state else {}
    if step == 0:
        last_eval = loop.report_eval(run, held, 0, log)
    # the logging window is saved with each checkpoint, so a resumed run logs the same averages
    window = list(state.get("window", [])) if state else []
    stop = loop.StopSignal()
    # a step's micro-batches are collated ahead, off the main thread, from this step on (batches.feed)
    feed = DeviceFeed(batches.feed(step_batches, data_workers(cfg)), accelerator.device)
    pending = loop.Pending()  # steps' loss rows still on the device: read at logging, evaluation and saving steps
    speed = throughput(cfg, accelerator, run.draft.model)
    cadence = loop.SaveCadence(cfg.save_every)  # which steps save (--save-every; 0: by the time saves take)
    try:
        while step < cfg.max_steps:
            for g in run.optimizer.param_groups:
                g["lr"] = lr_at(cfg, step, run.peak_lr)
            row, names, tokens = loop.train_step(run, feed, step)  # row on the device: no host read
            step = step + 1
            speed.add(tokens)
            pending.add(step, row, names)
            logging = step % cfg.log_every == 0 or step == cfg.max_steps
            evaluating = step % cfg.eval_every == 0 or step == cfg.max_steps
            stopping = step % cfg.signal_every == 0 and stop.agreed(accelerator)
            saving = cadence.due(step, accelerator) or step == cfg.max_steps or stopping  # due(): on every rank
            if logging or evaluating or saving:  # the rows since the last read, checked in step order
                for at, r in pending.flush(accelerator):
                    loop.check_finite(run, r, at, log)
                    window.append(r)
            if logging:
                trained_per_s, more = speed.read()
                metrics = loop.train_metrics(window, lr_at(cfg, step - 1, run.peak_lr), trained_per_s, run.skipped, more)
                window = []
                run.tracker.log(metrics, step=step)
                rate = f"{metrics['train/tokens_per_s']} tok/s" if "train/tokens_per_s" in metrics else "(warm-up)"
                log(f"step {step}: loss {metrics['train/loss']:.4f} lr {metrics['train/lr']:.2e} {rate}")
            if evaluating:
                with speed.pause():
                    last_eval = loop.report_eval(run, held, step, log)
            if saving:
                with speed.pause(), cadence.timing():
                    loop.save_checkpoint(run, step, last_eval, window)
            if stopping:
                log(f"stopped by signal at step {step}; rerun the same command to resume")
                break
    finally:  # stops the collating thread or processes, also when a step raises
        feed.close()
    run.tracker.finish()
