"""Distill: build a shallow-but-wide draft from a design and train it on collected target outputs.

    accelerate launch --config_file configs/accelerate/zero2.yaml distill/train.py \
        --config configs/train/default.yaml [--key value ...]
    python distill/train.py --data runs/collect-default --output runs/train-default     # one CPU process

Rerunning the same command resumes from the newest complete checkpoint in --output and continues exactly
(same data order, optimizer state and RNG), so the loss curve matches an uninterrupted run.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from decode import cli, draft_folder
from decode.draft_folder import VocabMap
from decode.errors import UserError
from decode.prompts import encode_prompt
from decode.sampling import SamplingParams
from decode.speculative import generate
from decode.targets import DEFAULT_HUB_ID, DEFAULT_TARGET, load_target
from distill.collect.shards import collect_info, load_collected, tokenizer_fingerprint
from distill.prompts import load_prompts
from distill.tracking import Tracker
from distill.train import batches, checkpoints, copy_circuit, losses
from distill.train.designs import DraftDesign, apply_freeze, build_draft, circuit_sample, describe
from distill.train.student import Student


@dataclass
class TrainConfig:
    target: str = field(default="default", metadata={"help": "target the data was collected from"})
    data: str | list = field(default="runs/collect-default",
                             metadata={"help": "collected dataset (distill.collect --output), or a list of them (e.g. + on-policy rows)"})
    eval_data: str | None = field(default=None, metadata={"help": "collected held-out dataset (default: 5%% of --data by id)"})
    output: str = field(default="runs/train-default", metadata={"help": "run dir: checkpoints, metrics.jsonl, W&B"})
    # --- draft design (distill/train/designs.py)
    layers: int | list = field(default=2, metadata={"help": "draft depth, or target layer indices e.g. [0, 29]"})
    hidden_size: int | None = field(default=None, metadata={"help": "draft width (prune init); None = target's"})
    intermediate_size: int | None = field(default=None, metadata={"help": "FFN width; None = target's"})
    num_attention_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    num_key_value_heads: int | None = field(default=None, metadata={"help": "None = target's"})
    init: str = field(default="target_layers", metadata={"help": "target_layers | prune | random | pretrained:PATH"})
    vocab: int | str = field(default="full", metadata={"help": "'full' or N most frequent target tokens"})
    freeze: list = field(default_factory=lambda: ["embed"], metadata={"help": "parts kept frozen: embed, head, norm"})
    copy_circuit: bool = field(default=False, metadata={"help": "widen the draft with a hand-built induction (copy) circuit"})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank for init=pretrained (0 = full fine-tune)"})
    # --- objective and optimisation
    loss: dict = field(default_factory=lambda: {"fkl": 1.0}, metadata={"help": "weights over fkl, rkl, jsd, tvd, ce, top1 (distill/train/losses.py)"})
    jsd_beta: float = field(default=0.5, metadata={"help": "beta of the jsd term"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: int = field(default=20, metadata={"help": "linear warm-up steps, then cosine decay"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "the cosine decays to this fraction of --lr at --max-steps"})
    max_steps: int = field(default=300, metadata={"help": "optimizer steps"})
    batch_size: int = field(default=8, metadata={"help": "sequences per micro-batch per process"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    max_seq_len: int = field(default=512, metadata={"help": "prompt is cut from the left beyond this"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm"})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for activation memory"})
    seed: int = field(default=0, metadata={"help": "data order and init seed"})
    # --- checkpoints, evaluation, tracking
    save_every: int = field(default=100, metadata={"help": "checkpoint every N steps (and at the end)"})
    keep_last: int = field(default=3, metadata={"help": "checkpoints kept (0 = all)"})
    eval_every: int = field(default=50, metadata={"help": "held-out acceptance proxy every N steps"})
    eval_rows: int = field(default=128, metadata={"help": "held-out rows for the proxy (0 = all)"})
    spec_eval_prompts: int = field(default=0, metadata={"help": "held-out prompts decoded for real at each eval (0 = off)"})
    spec_eval_gamma: int = field(default=4, metadata={"help": "gamma of that real decode"})
    log_every: int = field(default=10, metadata={"help": "train/* metrics every N steps"})
    report_to: str = field(default="wandb", metadata={"help": "wandb | none (metrics.jsonl is always written)"})
    wandb_project: str = field(default="specdistill", metadata={"help": "W&B project"})

    def __post_init__(self):
        if self.report_to not in ("wandb", "none"):
            raise UserError(f"--report-to must be 'wandb' or 'none', got {self.report_to!r}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise UserError(f"--precision must be auto, bf16 or fp32, got {self.precision!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise UserError(f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("max_steps", "batch_size", "grad_accum", "save_every", "eval_every", "log_every"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1")
        if self.copy_circuit and self.lora_r:
            raise UserError("--lora-r with --copy-circuit: LoRA's dense low-rank updates would write into the circuit's "
                            "private dims; use one or the other")
        bad = set(self.loss) - set(losses.LOSS_NAMES)
        if bad or not any(v > 0 for v in self.loss.values()):
            raise UserError(f"--loss {self.loss}: give positive weights over {list(losses.LOSS_NAMES)}")

    def design(self) -> DraftDesign:
        keys = ("layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "init", "vocab", "freeze",
                "copy_circuit")
        return DraftDesign(**{k: getattr(self, k) for k in keys})


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of optimizer step `step` (0-based): linear warm-up, then cosine to min_lr_ratio x lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    floor = cfg.min_lr_ratio
    return cfg.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = cli.parse(TrainConfig, argv, __doc__)
        train(cfg, argv)
    except UserError as e:
        sys.exit(f"error: {e}")


def train(cfg: TrainConfig, argv: list[str], command: str | None = None) -> Path:
    """Train (resumable). `command`: the command line to record, when another job (pipeline, sweep) runs this stage."""
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs, set_seed

    run_dir = Path(cfg.output)
    cuda = torch.cuda.is_available()
    multi_cpu = not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1
    precision = ("bf16" if cuda else "fp32") if cfg.precision == "auto" else cfg.precision
    # gloo on CPU: without it, multi-process CPU runs each believe they are rank 0 (DESIGN.md)
    accelerator = Accelerator(mixed_precision="bf16" if precision == "bf16" else "no", step_scheduler_with_optimizer=False,
                              gradient_accumulation_steps=cfg.grad_accum,
                              kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")] if multi_cpu else [])
    main_proc, rank, world = accelerator.is_main_process, accelerator.process_index, accelerator.num_processes
    log = print if main_proc else (lambda *a, **k: None)
    set_seed(cfg.seed)

    # --- data: collected by the same target and tokenizer
    ds_plugin = accelerator.state.deepspeed_plugin
    zero3 = ds_plugin is not None and ds_plugin.zero_stage == 3
    if zero3 and cfg.copy_circuit:
        raise UserError("--copy-circuit keeps its structural zeros with gradient masks, which are not checked under "
                        "ZeRO-3's partitioned parameters; use configs/accelerate/zero2.yaml, ddp.yaml or cpu.yaml")
    if zero3:  # accelerate registers its ZeRO-3 config with transformers, which then builds every model
        # partitioned (zero.Init) even with zero3_init_flag false; the draft is copied from the whole target,
        # so build both as plain models (prepare() partitions the draft) and restore the config after
        from transformers.integrations import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    target, tok = load_target(cfg.target, "float32", str(accelerator.device))
    data_dirs = cfg.data if isinstance(cfg.data, list) else [cfg.data]
    infos = [collect_info(d) for d in data_dirs]
    for d, info in zip(data_dirs, infos):
        if info.get("tokenizer") != tokenizer_fingerprint(tok):
            raise UserError(f"{d} was collected with another tokenizer (target {info.get('target')!r}); "
                            f"collect data with --target {cfg.target} or train against that target")
    info = infos[0]
    ds = concatenate([load_collected(d) for d in data_dirs])
    if len(ds) == 0:
        raise UserError(f"{cfg.data} is empty")
    if cfg.eval_data:
        eval_ds = load_collected(cfg.eval_data)
    else:  # a fixed 5% by id, so it never moves between runs
        held = [i for i, x in enumerate(ds["id"]) if hash_id(x) % 20 == 0]
        eval_ds, ds = ds.select(held), ds.select(sorted(set(range(len(ds))) - set(held)))
    needs_topk = any(cfg.loss.get(k, 0) > 0 for k in losses.NEEDS_TOPK)
    if needs_topk and not all(i.get("k") for i in infos):
        raise UserError(f"{cfg.data} has no top-k logprobs (collected with --topk 0); use --loss '{{ce: 1.0}}' or recollect")

    # --- the draft
    seqs = [p + r for p, r in zip(ds["prompt_ids"], ds["response_ids"])]
    design = cfg.design()
    draft, vocab_map = build_draft(design, target, tok, seqs, cfg.seed)
    target_layers = design.layer_indices(target.config.num_hidden_layers)  # recorded in specdistill.json
    if cfg.lora_r:
        if not cfg.init.startswith("pretrained:"):
            raise UserError("--lora-r adapts an existing model: use it with --init pretrained:PATH")
        from peft import LoraConfig, get_peft_model

        draft = get_peft_model(draft, LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, target_modules="all-linear"))
    else:
        apply_freeze(draft, design.freeze)
        copy_circuit.mask_gradients(draft)
    # evaluation and export resize the copy circuit's output to the grown residual, measured on these sequences
    calib_seqs = circuit_sample(seqs, vocab_map, target.config.vocab_size) if design.copy_circuit else None
    if cfg.gradient_checkpointing:
        draft.gradient_checkpointing_enable()
    if zero3:
        ds_plugin.set_deepspeed_weakref()
    card = describe(draft)
    log(f"draft: {card['layers']} layers x {card['hidden_size']} wide, vocab {card['vocab_size']}, "
        f"{card['params'] / 1e6:.1f}M params ({card['trainable_params'] / 1e6:.1f}M trainable), "
        f"{card['step_ms']} ms/token on {accelerator.device}")
    draft.train()
    vocab = VocabMap(vocab_map, target.config.vocab_size) if vocab_map is not None else None
    d2t = vocab.d2t if vocab is not None else None
    keep_target = cfg.spec_eval_prompts > 0 and main_proc
    if not keep_target:
        del target

    train_ex = batches.make_examples(ds, cfg.max_seq_len)
    eval_ex = batches.make_examples(eval_ds, cfg.max_seq_len)
    eval_ex = eval_ex[: cfg.eval_rows] if cfg.eval_rows else eval_ex
    eval_ex.sort(key=lambda e: len(e["input_ids"]))  # batches of similar length pad less; the proxy is a sum over rows
    if not train_ex:
        raise UserError(f"{cfg.data} has no rows with a response to train on")
    lengths = [len(e["input_ids"]) for e in train_ex]
    order = functools.lru_cache(maxsize=4)(lambda epoch: batches.batch_order(lengths, cfg.batch_size, cfg.seed, epoch))

    # --- optimizer and engine (DeepSpeed takes grad accumulation and micro-batch size from us)
    student = Student(draft)
    params = [p for p in student.parameters() if p.requires_grad]
    # fused: one kernel over every parameter (52 -> 11 ms a step for the default draft's 9.9M trainable parameters
    # on 2 CPU cores); under DeepSpeed the ZeRO optimizer steps its own flat partitions, so the default kernel there
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95),
                                  fused=ds_plugin is None)
    if ds_plugin is not None:
        ds_plugin.deepspeed_config["gradient_accumulation_steps"] = cfg.grad_accum
        ds_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
        ds_plugin.deepspeed_config["gradient_clipping"] = cfg.grad_clip
    student, optimizer = accelerator.prepare(student, optimizer)

    # --- resume
    run_dir.mkdir(parents=True, exist_ok=True)
    state = checkpoints.resume(accelerator, run_dir)
    step = state["step"] if state else 0
    if state:
        log(f"resumed from {state['path']} at step {step}")
    tracker = Tracker(run_dir, asdict(cfg), cfg.report_to, cfg.wandb_project, run_dir.name, enabled=main_proc,
                      resume_id=(state or {}).get("wandb_run_id"))
    if main_proc:
        cli.save(cfg, run_dir / "train.config.json")
    command = command or "accelerate launch distill/train.py " + " ".join(argv)

    def export(state_dict, hf_dir: Path) -> None:
        model = accelerator.unwrap_model(student).model
        sd = {k.removeprefix("model."): v for k, v in state_dict.items()}
        gain = copy_circuit.output_gain(model, calib_seqs) if calib_seqs else None
        if gain is not None:  # the exported draft is the calibrated one that evaluate() measured
            norm = sd["model.norm.weight"] = sd["model.norm.weight"].clone()
            norm[model.config.copy_circuit["private"]:] = gain
        if hasattr(model, "merge_and_unload"):  # LoRA: export merged weights as a plain model
            import copy

            merged = copy.deepcopy(model)
            merged.load_state_dict(sd)
            model, sd = merged.merge_and_unload(), None
        meta = {
            "target": cfg.target,
            "target_name": DEFAULT_HUB_ID if cfg.target == DEFAULT_TARGET else cfg.target,
            "design": {**asdict(design), **card, "layers": target_layers},
            "init": cfg.init,
            "loss": cfg.loss,
            "data": {"path": cfg.data, "rows": len(ds), "tokens": sum(len(r) for r in ds["response_ids"]),
                     "prompts": info.get("settings", {}).get("prompts"), "collect_command": info.get("command"),
                     "collect_commands": [i.get("command") for i in infos]},
            "step": step,
            "metrics": last_eval,
            "commands": list(dict.fromkeys(c for c in (*(i.get("command") for i in infos), command) if c)),
            "wandb": tracker.run_info,
            "train_config": asdict(cfg),
        }
        draft_folder.save(hf_dir, model, tok, meta, vocab_map, state_dict=sd)

    # --- evaluation: teacher-forced top-1 agreement on held-out target outputs (≈ α for greedy decoding)
    @torch.no_grad()
    def evaluate() -> dict:
        with copy_circuit.calibrated(accelerator.unwrap_model(student).model, calib_seqs):
            return _evaluate()

    def _evaluate() -> dict:
        student.eval()
        agree = torch.zeros(2, device=accelerator.device)
        for i in range(rank * cfg.batch_size, len(eval_ex), world * cfg.batch_size):
            b = batches.collate(eval_ex[i: i + cfg.batch_size], vocab)
            b = {k: v.to(accelerator.device) for k, v in b.items()}
            pred = student(b["input_ids"], b["attention_mask"], b["sel"]).argmax(-1)
            pred = d2t.to(pred.device)[pred] if d2t is not None else pred
            agree += torch.stack([(pred == b["target_top1"]).sum().float(), torch.tensor(float(len(pred)), device=pred.device)])
        agree = accelerator.reduce(agree, "sum")
        metrics = {"eval/acceptance_proxy": round((agree[0] / agree[1].clamp_min(1)).item(), 4)}
        if keep_target and (ds_plugin is None or ds_plugin.zero_stage < 3):  # ZeRO-3 shards the weights
            metrics.update(spec_eval(accelerator.unwrap_model(student).model))
        student.train()
        return metrics

    def spec_eval(model) -> dict:
        model.eval()
        rows = load_prompts("heldout", limit=cfg.spec_eval_prompts)
        proposed = accepted = rounds = 0
        for row in rows:
            ids = encode_prompt(tok, row)
            _, st = generate(target, model, ids, 64, cfg.spec_eval_gamma, "constant", SamplingParams(),
                             (tok.eos_token_id,), vocab_map=d2t)
            proposed, accepted, rounds = proposed + st.proposed, accepted + st.accepted, rounds + st.rounds
        model.train()
        return {"eval/acceptance_rate": round(accepted / max(proposed, 1), 4), "eval/tau": round((accepted + rounds) / max(rounds, 1), 4)}

    # --- train
    last_eval: dict = state.get("metrics", {}) if state else {}
    if step == 0:
        last_eval = evaluate()
        tracker.log(last_eval, step=0)
        log(f"step 0: {last_eval}")
    # the logging window is saved with each checkpoint, so a resumed run logs the same averages
    t0, tokens_seen, window = time.perf_counter(), 0, list(state.get("window", [])) if state else []
    stop_signal = {"set": False}

    def on_signal(signum, frame):
        stop_signal["set"] = True

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    while step < cfg.max_steps:
        for g in optimizer.param_groups:
            g["lr"] = lr_at(cfg, step)
        step_loss, parts_sum = torch.zeros((), device=accelerator.device), {}
        for micro in range(cfg.grad_accum):
            b = batches.collate(batches.micro_batch(train_ex, order, step, cfg.grad_accum, world, rank, micro), vocab)
            b = {k: v.to(accelerator.device) for k, v in b.items()}
            with accelerator.accumulate(student):
                logits = student(b["input_ids"], b["attention_mask"], b["sel"])
                mask = torch.ones(len(b["sel"]), dtype=torch.bool, device=logits.device)
                loss, parts = losses.combined_loss(logits, b.get("topk_ids"), b.get("topk_logprobs"), b["labels"], mask,
                                                   cfg.loss, cfg.jsd_beta)
                accelerator.backward(loss)
                if accelerator.sync_gradients and ds_plugin is None:
                    accelerator.clip_grad_norm_(params, cfg.grad_clip)
                optimizer.step()
                optimizer.zero_grad()
            step_loss += loss.detach() / cfg.grad_accum
            for k, v in parts.items():
                parts_sum[k] = parts_sum.get(k, 0.0) + float(v) / cfg.grad_accum
            tokens_seen += len(b["sel"])
        # the loss and its parts, averaged over ranks (one collective for all of them)
        names = list(parts_sum)
        reduced = accelerator.reduce(torch.stack([step_loss, *(torch.tensor(float(parts_sum[k]), device=step_loss.device)
                                                               for k in names)]), "mean")
        step_loss = reduced[0]
        if not torch.isfinite(step_loss):
            last = checkpoints.complete(run_dir)
            raise UserError(f"loss is {step_loss.item()} at step {step + 1}; stopped without saving. The last good "
                            f"checkpoint is {last[0] if last else 'none (no checkpoint yet)'}; lower --lr or check the data")
        step += 1
        window.append(dict(zip(["loss", *names], reduced.tolist())))
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            dt = time.perf_counter() - t0
            mean = {k: sum(w[k] for w in window) / len(window) for k in window[0]}  # over the logging window
            metrics = {"train/loss": round(mean.pop("loss"), 5), "train/lr": lr_at(cfg, step - 1),
                       "train/tokens_per_s": round(tokens_seen * world / dt, 1),
                       **{f"train/loss_{k}": round(v, 5) for k, v in mean.items()}}
            window = []
            tracker.log(metrics, step=step)
            log(f"step {step}: loss {metrics['train/loss']:.4f} lr {metrics['train/lr']:.2e} {metrics['train/tokens_per_s']} tok/s")
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            last_eval = evaluate()
            tracker.log(last_eval, step=step)
            log(f"step {step}: {last_eval}")
        # a preemption signal (SLURM sends USR1/TERM before the time limit): every rank agrees, then save and stop
        stop = accelerator.reduce(torch.tensor(float(stop_signal["set"]), device=accelerator.device), "sum").item() > 0
        if step % cfg.save_every == 0 or step == cfg.max_steps or stop:
            path = checkpoints.save(accelerator, student, run_dir, step,
                                    {"metrics": last_eval, "window": window, "wandb_run_id": (tracker.run_info or {}).get("run_id")},
                                    export)
            if main_proc:
                checkpoints.prune(run_dir, cfg.keep_last)
                log(f"saved {path}")
        if stop:
            log(f"stopped by signal at step {step}; rerun the same command to resume")
            break
    tracker.finish()
    return run_dir


def concatenate(parts):
    """Several collected datasets as one, on the columns every one of them has."""
    import datasets

    if len(parts) == 1:
        return parts[0]
    common = set.intersection(*(set(p.column_names) for p in parts))
    return datasets.concatenate_datasets([p.remove_columns(sorted(set(p.column_names) - common)) for p in parts])


def hash_id(x: str) -> int:
    """A stable (process-independent) hash of a prompt id."""
    import zlib

    return zlib.crc32(x.encode())
