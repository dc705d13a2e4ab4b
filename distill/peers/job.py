"""Our drafts against a peer's trainer at equal data: speculators' own EAGLE-3 training on the pipeline's collection,
measured beside our drafts in one evaluation per prompt set.

    python -m distill.peers --run runs/pipeline-default
    python -m distill.peers --run runs/pipeline-default --recipes defaults --prompts heldout --anchors hf

1. data      our feature head's training examples (the same prompts, target answers and tokens) as speculators'
             offline data: its prepare-data on speculator-format rows, the target's hidden states in its file format
             (distill/peers/speculators_data.py)
2. train     each speculators recipe (config.RECIPES: its defaults; its documented small-data recipe) with
             speculators' own trainer (`python -m speculators.train`, CPU device defaults set by
             distill/peers/speculators_cpu.py), for our head's optimizer steps at our head's tokens a step, timed;
             its last checkpoint written as a draft folder (the eagle3 format: distill.evaluate and vLLM take it)
3. evaluate  ours (standalone, feature head, parallel; which one the pipeline shipped) and theirs in one
             `distill.evaluate` run per prompt set (held-out and OOD by default): α, τ, speedup, lossless; vLLM's α on
             the first set for each draft vLLM serves (through --peer-python, where vLLM is installed beside it)
4. report    RUN/peers/report.md and report.json: one table (design, trainer, tokens, steps, train wall time,
             held-out proxy, α, τ, speedup, vLLM α), the commands and the evaluation folders

speculators runs in the interpreter that has it (--peer-python; scripts/setup.sh installs speculators 0.9.0 into
.venv-vllm); a missing peer, or one that fails partway, is one line in the report and on stderr, and our own drafts
are still evaluated. Rerunning the command resumes: finished data, hidden states and trained recipes are kept.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import fields
from pathlib import Path

from decode import cli
from decode.errors import UserError
from decode.models.targets import load_target, resolve
from distill import evaluate
from distill.peers import ours, report, speculators_data, speculators_train
from distill.peers.config import PeersConfig
from distill.peers.speculators_train import VERSION

EVAL_KEPT = ("gamma", "parallel_gamma", "lookup", "lookup_tokens", "tree_nodes", "draft_weights", "max_new_tokens",
             "temperature", "schedule", "dtype", "device", "seed")  # the pipeline's evaluate settings, as it ran them


def run(cfg: PeersConfig, argv: list[str] | None = None) -> dict:
    run_dir = Path(cfg.run)
    ours.check_run(run_dir)
    out = Path(cfg.output or run_dir / "peers")
    out.mkdir(parents=True, exist_ok=True)
    cli.save(cfg, out / "peers.config.json")
    command = "python -m distill.peers " + " ".join(argv or [])
    mine = ours.drafts(run_dir)
    head_cfg = ours.train_config(run_dir / ours.RUNS["feature_head"])
    target, tok = load_target(head_cfg.target, "auto", "auto")
    train_ex, held_ex = ours.examples(head_cfg, tok)
    steps = cfg.steps or ours.trained_steps(run_dir / ours.RUNS["feature_head"])
    our_tokens = ours.tokens_seen(head_cfg, train_ex, steps)
    print(f"peers: our feature head trained {steps} steps on {our_tokens:,} tokens ({run_dir / 'train-head'}); "
          f"speculators {VERSION} gets the same", file=sys.stderr, flush=True)

    peers = train_peers(cfg, out, head_cfg, target, tok, train_ex, steps, our_tokens)
    heads = [mine["feature_head"], *(p["draft"] for p in peers if p.get("draft"))]
    proxies = {h: ours.head_proxy(h, target, held_ex, head_cfg.batch_size) for h in heads}
    del target
    drafts = [mine[d] for d in ours.RUNS if d in mine] + [p["draft"] for p in peers if p.get("draft")]
    evals = {name: evaluate_set(cfg, run_dir, out, name, drafts, i == 0 and cfg.anchors == "vllm", command)
             for i, name in enumerate(cfg.prompts)}
    result = {"run": str(run_dir), "command": command, "config": cli.to_dict(cfg), "ours": mine, "peers": peers,
              "steps": steps, "our_tokens": our_tokens, "proxies": proxies,
              "evaluations": {k: v["output"] for k, v in evals.items()},
              "rows": report.rows(run_dir, mine, peers, proxies, evals, steps, our_tokens, tok)}
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(report.markdown(result))
    return result


def train_peers(cfg: PeersConfig, out: Path, head_cfg, target, tok, train_ex, steps: int, our_tokens: int) -> list[dict]:
    """Each recipe's {"recipe", "draft", "train_s", "extract_s", "steps", "tokens", "flags"}, or {"recipe", "error"}:
    a peer that is missing or fails is recorded, never the end of the comparison."""
    problem = speculators_train.available(cfg.peer_python)
    if problem is None:
        try:
            data = peer_data(cfg, out / "speculators", head_cfg, target, train_ex)
        except UserError as e:
            problem = str(e)
    if problem is not None:
        print(f"peers: {problem}", file=sys.stderr, flush=True)
        return [{"recipe": r, "error": problem} for r in cfg.recipes]
    folder, n = out / "speculators", data["rows"]
    ratio = (n - 0.5) / n  # speculators validates on the rows past int(n * ratio): one row, so it trains on the rest
    log = folder / "plan.log"
    try:
        packing = speculators_train.plan(cfg.peer_python, folder / "data", our_tokens / steps, ratio, cfg.seed, steps, log)
    except UserError as e:
        return [{"recipe": r, "error": str(e)} for r in cfg.recipes]
    return [train_recipe(cfg, folder, r, head_cfg, tok, data, packing, ratio) for r in cfg.recipes]


def peer_data(cfg: PeersConfig, folder: Path, head_cfg, target, train_ex) -> dict:
    """speculators' data folder from our head's examples (resumable); data.json records what it holds and took."""
    record = folder / "data.json"
    if record.is_file():
        return json.loads(record.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    counts = speculators_data.write_rows(train_ex, folder / "rows.jsonl")
    seq_len = max(int(train_ex.lengths.max()) + 1, 1)
    speculators_data.prepare(cfg.peer_python, resolve(head_cfg.target), folder / "rows.jsonl", folder / "data", seq_len,
                             folder / "data.log")
    prepared_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    seqs = speculators_data.read_prepared(folder / "data")
    layers = ours.feature_layers(head_cfg, target)
    speculators_data.hidden_states(target, seqs, layers, folder / "data" / "hidden_states",
                                   log=lambda m: print(f"peers: {m}", file=sys.stderr, flush=True))
    info = {**counts, "rows": len(seqs), "layers": layers, "prepare_s": round(prepared_s, 1),
            "extract_s": round(time.perf_counter() - t0, 1)}
    record.write_text(json.dumps(info, indent=2) + "\n")
    return info


def train_recipe(cfg: PeersConfig, folder: Path, recipe: str, head_cfg, tok, data: dict, packing: dict,
                 ratio: float) -> dict:
    save, draft = folder / recipe, folder / recipe / "draft"
    vocab = int(head_cfg.vocab) if head_cfg.vocab != "full" else tok.vocab_size
    args = speculators_train.flags(recipe, resolve(head_cfg.target), folder / "data", save, data["layers"], vocab,
                                   packing, ratio, cfg.seed)
    entry = {"recipe": recipe, "trainer": f"speculators {VERSION}", "flags": args, "steps": packing["steps"],
             "tokens": packing["tokens"], "total_seq_len": packing["total_seq_len"], "epochs": packing["epochs"],
             "extract_s": data["extract_s"]}
    meta_path = draft / "specdistill.json"
    if meta_path.is_file() and json.loads(meta_path.read_text()).get("peer", {}).get("flags") == args:
        return {**entry, "draft": str(draft), "train_s": json.loads(meta_path.read_text())["peer"]["train_s"]}
    print(f"peers: speculators {recipe}: {packing['steps']} steps, --total-seq-len {packing['total_seq_len']}, "
          f"{packing['epochs']} epochs -> {save}", file=sys.stderr, flush=True)
    fresh_start(save, args)
    try:
        seconds = speculators_train.train(cfg.peer_python, args, save / "train.log")
        meta = {"target": head_cfg.target, "design": {"kind": "feature_head", "feature_layers": data["layers"],
                                                      "head_layers": 1, "trainer": entry["trainer"], "recipe": recipe},
                "step": packing["steps"], "peer": {**entry, "train_s": round(seconds, 1)}}
        speculators_train.export(save, draft, tok, meta)
    except UserError as e:
        print(f"peers: speculators {recipe}: {e}", file=sys.stderr, flush=True)
        return {**entry, "error": str(e)}
    return {**entry, "draft": str(draft), "train_s": round(seconds, 1)}


def fresh_start(save: Path, args: list[str]) -> None:
    """speculators resumes from the checkpoints in its save path: those of a run with other flags (other steps, data
    or recipe) are removed first, so a rerun with the same flags resumes and one with new flags starts over."""
    record = save / "flags.json"
    if record.is_file() and json.loads(record.read_text()) != args:
        print(f"peers: {save} was trained with other flags; starting it over", file=sys.stderr, flush=True)
        shutil.rmtree(save / "checkpoints", ignore_errors=True)
    save.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(args) + "\n")


def evaluate_set(cfg: PeersConfig, run_dir: Path, out: Path, prompts: str, drafts: list[str], vllm: bool,
                 command: str) -> dict:
    """One distill.evaluate run over every draft on `prompts`, with the pipeline's own evaluate settings."""
    pipeline = json.loads((run_dir / "pipeline.config.json").read_text())
    kept = {k: v for k, v in (pipeline.get("evaluate") or {}).items() if k in EVAL_KEPT}
    names = {f.name for f in fields(evaluate.EvalConfig)}
    ecfg = evaluate.EvalConfig(**{k: v for k, v in kept.items() if k in names}, target=pipeline.get("target", "default"),
                               drafts=drafts, prompts=prompts, limit=cfg.limit, output=str(out / f"eval-{prompts}"),
                               anchors="vllm" if vllm else "none", vllm_python=cfg.peer_python if vllm else "",
                               long_prompts="")
    print(f"peers: evaluating {len(drafts)} drafts on {cfg.limit} {prompts} prompts -> {ecfg.output}", file=sys.stderr,
          flush=True)
    return evaluate.run(ecfg, command=command)


def main(argv: list[str] | None = None) -> None:
    _, result = cli.run_job(PeersConfig, run, argv, __doc__)
    print(report.markdown(result))
