"""Publish a draft to the Hugging Face Hub with its measured numbers, in a form transformers and vLLM load as is.

    python -m distill.publish DRAFT_DIR --repo-id ORG/NAME [--eval EVAL_DIR] [--require-eval] [--target T]
        [--dtype bfloat16|float32|float16] [--private] [--revision BRANCH] [--dry-run OUT_DIR]

0. check the command line in its first seconds (check_inputs): repo id, output folder, the Hub (offline mode, a
   token), the draft, the target, --eval and the draft's tokenizer;
1. read the checkpoint: config.json, model.safetensors, specdistill.json (target, design, loss, data, commands);
2. assemble the repo folder: weights cast to --dtype (bf16 by default), config.json, the target's tokenizer files,
   generation_config.json set to the measured best γ with a constant schedule, specdistill.json, and README.md,
   the model card (distill/publish/modelcard.py). A reduced-vocabulary draft goes to reduced/ (with its
   draft_vocab.json: the bundled decoder's fast form) and the folder itself gets its expansion to the target's
   vocabulary, which transformers and vLLM load (distill/publish/servable.py). No local absolute path goes into
   the card or specdistill.json (distill/publish/redact.py). A feature head (EAGLE-3 style, a speculators eagle3
   folder, decode.models.feature_head) is copied as it is (weights cast to --dtype), with the measured γ as its
   speculative_tokens and the target's Hub id as its verifier; no generation_config.json (transformers cannot
   use a head as assistant_model);
3. run the compatibility checks on that folder (distill/publish/compat.py), vLLM serving the target with the
   draft included (--vllm-python: the interpreter that has vLLM); any failure stops here;
4. upload: create_repo, then every file in ONE commit, so a failed upload leaves the remote as it was;
5. when the run was tracked (specdistill.json "wandb"), log the repo URL and the card's numbers to that W&B run
   and the folder as a model artifact.

The card's numbers come from --eval EVAL_DIR; without it, a draft a pipeline shipped (RUN/draft) takes the
pipeline's own evaluation (RUN/eval, the entries of the folder it was copied from), and publish says so.
`--dry-run OUT_DIR` does 1-3 and writes the folder to OUT_DIR without touching the network. The token comes from
HF_TOKEN or the cached `hf auth login`; it is never printed, logged or written, and a folder that contains it is
refused. HF_ENDPOINT (read when huggingface_hub is imported) points uploads at another Hub, e.g. the local
stand-in the tests use (tests/hub_standin.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from huggingface_hub import ModelCard
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from decode import cli
from decode.errors import UserError
from decode.models import draft_folder
from decode.models.draft_folder import META_FILE, VOCAB_MAP_FILE, assistant_config
from decode.models.feature_head import is_head_folder
from decode.models.targets import (
    DEFAULT_HUB_ID,
    DEFAULT_TARGET,
    check_tokenizers,
    load_target,
    load_tokenizer,
    resolve,
)
from decode.options import DecodeOptions
from distill.publish import compat, modelcard, redact, servable
from distill.publish.hub import check_online, check_repo_id, get_token, log_to_wandb, refuse_token_in, upload

DEFAULT_GAMMA = DecodeOptions.gamma  # γ written to generation_config.json when no evaluation says better
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)


@dataclass
class PublishConfig:
    draft_dir: str = field(default="", metadata={"positional": True, "help": "a draft checkpoint written by distill.train"})
    repo_id: str = field(default="", metadata={"help": "Hub repo to publish to, ORG/NAME (required)"})
    eval: str | None = field(default=None, metadata={"help": "evaluation folder (report.json) from distill.evaluate "
                                                         "(a pipeline's RUN/draft: RUN/eval when not given)"})
    require_eval: bool = field(default=False, metadata={"help": "refuse to publish without measured numbers"})
    target: str | None = field(default=None, metadata={"help": "target spec (default: the `target` in specdistill.json)"})
    dtype: str = field(default="bfloat16", metadata={"help": f"dtype of the published weights: {' | '.join(DTYPES)}"})
    private: bool = field(default=False, metadata={"help": "create the repo private"})
    revision: str | None = field(default=None, metadata={"help": "branch to commit to (created from main if missing)"})
    dry_run: str | None = field(default=None, metadata={"help": "OUT_DIR: write the repo folder here; no network"})
    device: str = field(default="auto", metadata={"help": "auto (cuda when available, spread over every GPU when the "
                                                          "target needs it) | cpu | cuda[:N]: where the checks run the "
                                                          "target and draft (bf16 on GPU, float32 on CPU)"})
    license: str | None = field(default=None, metadata={"help": "license for the card metadata, e.g. apache-2.0"})
    vllm_python: str | None = field(default=None, metadata={"help": "python interpreter with vLLM installed, for the "
                                                                  "vllm check (default: this one)"})

    def __post_init__(self):
        if not self.repo_id:
            raise UserError("give --repo-id ORG/NAME (the Hub repo to publish to)")
        if self.dtype not in DTYPES:
            raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.vllm_python and not os.access(self.vllm_python, os.X_OK):  # else the vllm check would only skip
            raise UserError(f"--vllm-python {self.vllm_python}: no such interpreter; pass the python of an "
                            "environment with vLLM (scripts/setup.sh makes .venv-vllm), or leave the flag out")
        if self.vllm_python:  # absolute, not resolved: the check runs it from another folder, and a venv's
            self.vllm_python = os.path.abspath(self.vllm_python)  # python is a link that must stay the venv's


# --- checkpoint


def target_hub_id(meta: dict, spec: str) -> str | None:
    """The target's Hub id for `base_model` and the usage snippets, or None when it has none we know of."""
    name = meta.get("target_name") or (DEFAULT_HUB_ID if spec == DEFAULT_TARGET else spec)
    looks_like_id = name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).exists()
    return name if looks_like_id else None


# --- assemble


def write_weights(draft_dir: Path, out: Path, dtype: torch.dtype) -> int:
    """Copy the checkpoint's tensors into out/model.safetensors, floating ones cast to dtype. Returns #params.

    Tensors are copied as stored, not through a model: a weight missing from the checkpoint stays missing, so the
    `loads` check sees it instead of a freshly initialised stand-in.
    """
    tensors = {}
    for f in draft_folder.weight_files(draft_dir):
        with safe_open(f, framework="pt") as sf:
            for k in sf.keys():
                t = sf.get_tensor(k)
                tensors[k] = t.to(dtype) if t.is_floating_point() else t
    save_file(
        {k: t.contiguous() for k, t in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"}
    )
    (out / "model.safetensors").chmod(0o644)
    # weights only: a feature head's d2t (ints) and t2d (bools) are its vocabulary map, not parameters
    return sum(t.numel() for t in tensors.values() if t.is_floating_point())


def assemble(draft_dir: Path, out: Path, target_dir: str, dtype: str, gamma: int, target=None,
             verifier: dict | None = None) -> int:
    """Write the repo folder; a reduced-vocabulary draft (given the loaded target) as reduced/ + its expansion; a
    feature head as it is (assemble_head; verifier: what its config.json names as the target)."""
    out.mkdir(parents=True, exist_ok=True)
    if is_head_folder(draft_dir):
        return assemble_head(draft_dir, out, target_dir, dtype, gamma, verifier or {})
    n_params = write_weights(draft_dir, out, DTYPES[dtype])
    config = json.loads((draft_dir / "config.json").read_text())
    for key in [k for k in ("dtype", "torch_dtype") if k in config] or ["dtype"]:
        config[key] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # transformers reads the assistant settings from the *draft's* generation config; its defaults (20 tokens,
    # adaptive threshold) are far from the measured best, so pin γ with a constant schedule
    src = draft_dir if (draft_dir / "generation_config.json").is_file() else None
    gc = (
        GenerationConfig.from_pretrained(src)
        if src
        else GenerationConfig.from_model_config(AutoConfig.from_pretrained(out))
    )
    assistant_config(gc, gamma).save_pretrained(out)
    copy_tokenizer(target_dir, out)
    for f in (VOCAB_MAP_FILE, META_FILE):
        if (draft_dir / f).is_file():
            shutil.copy2(draft_dir / f, out / f)
    if (out / VOCAB_MAP_FILE).is_file() and target is not None:
        servable.split_reduced(out, target.config, getattr(target, "generation_config", None))
    return n_params


def assemble_head(draft_dir: Path, out: Path, target_dir: str, dtype: str, gamma: int, verifier: dict) -> int:
    """A feature head's folder as it is: its tensors (floating ones cast to dtype; d2t and t2d as stored), its
    speculators config.json with the published dtype, the measured γ as the greedy proposal's speculative_tokens
    (vLLM's num_speculative_tokens when only the head is named) and `verifier` (the target's Hub id: a local path
    would mean nothing on another machine), the target's tokenizer files and specdistill.json."""
    n_params = write_weights(draft_dir, out, DTYPES[dtype])
    config = json.loads((draft_dir / "config.json").read_text())
    config["torch_dtype"] = dtype
    spec = config.setdefault("speculators_config", {})
    for m in spec.get("proposal_methods") or []:
        if isinstance(m, dict) and "speculative_tokens" in m:
            m["speculative_tokens"] = gamma
    spec["verifier"] = {**(spec.get("verifier") or {}), "name_or_path": verifier.get("name_or_path")}
    if verifier.get("architectures"):
        spec["verifier"]["architectures"] = list(verifier["architectures"])
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copy_tokenizer(target_dir, out)
    if (draft_dir / META_FILE).is_file():
        shutil.copy2(draft_dir / META_FILE, out / META_FILE)
    return n_params


def copy_tokenizer(target_dir: str, out: Path) -> None:
    """The target's own tokenizer files into out (downloaded when the target is a Hub id)."""
    tok_dir = Path(target_dir) if Path(target_dir).is_dir() else Path(_download_tokenizer(target_dir))
    copied = [f for f in TOKENIZER_FILES if (tok_dir / f).is_file()]
    if not copied:
        raise UserError(
            f"the target {target_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...) to ship with the draft"
        )
    for f in copied:
        shutil.copy2(tok_dir / f, out / f)


def _download_tokenizer(hub_id: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(hub_id, allow_patterns=list(TOKENIZER_FILES))
    except Exception as e:
        raise UserError(
            f"could not fetch the tokenizer files of target {hub_id!r} from the Hub: {str(e).splitlines()[0]}"
        ) from None


# --- main


def publish(cfg: PublishConfig) -> dict:
    """Check the inputs (fast), assemble and check the repo folder, then upload it (or stop at a dry run)."""
    draft_dir, out, token, meta, spec, entries = check_inputs(cfg)
    best = modelcard.headline(entries) if entries else None
    gamma = int(best["gamma"]) if best else DEFAULT_GAMMA

    work = tempfile.TemporaryDirectory(prefix="specdistill-publish-") if not out else None
    folder = out or Path(work.name) / "repo"
    try:
        checks = _assemble_and_check(cfg, draft_dir, folder, meta, spec, entries, gamma)
        numbers = modelcard.card_numbers(best) if best else {}
        result = {"repo_id": cfg.repo_id, "folder": str(folder) if out else None, "dry_run": bool(out),
                  "checks": {c.name: "skipped" if c.skipped else c.ok for c in checks}, "gamma": gamma,
                  "numbers": numbers, "vllm": next((c.numbers for c in checks if c.name == "vllm"), None)}
        if out:
            print(f"dry run: wrote {folder}; nothing uploaded")
            return result
        refuse_token_in(folder, token)
        message = f"Publish draft for {target_hub_id(meta, spec) or spec} (specdistill)"
        url, commit = upload(folder, cfg.repo_id, token, cfg.private, cfg.revision, message)
        print(f"published {url} (commit {commit})")
        vllm = {f"vllm/{k}": v for k, v in (result["vllm"] or {}).items()}
        log_to_wandb(meta, folder, cfg.repo_id, url, cfg.revision, {**numbers, **vllm})
        return {**result, "url": url, "commit": commit, "revision": cfg.revision or "main"}
    finally:
        if work is not None:
            work.cleanup()


def check_inputs(cfg: PublishConfig):
    """Everything that can be wrong with the command line, in its first seconds, before the minutes of assembly and
    checks: the repo id, the output folder, the Hub (reachable, a token), the draft, the target, the evaluation and
    the draft's tokenizer. Returns (draft_dir, dry-run folder or None, token or None, meta, target spec, entries)."""
    draft_dir, out = Path(cfg.draft_dir), Path(cfg.dry_run) if cfg.dry_run else None
    check_repo_id(cfg.repo_id)
    if out:
        cli.check_output(out, "--dry-run")
        if out.exists() and any(out.iterdir()):
            raise UserError(f"--dry-run folder {out} exists and is not empty; give a new or empty folder")
    else:
        check_online()
    token = None if out else get_token()
    meta = draft_folder.require(draft_dir)
    spec = cfg.target or meta.get("target")
    if not spec:
        raise UserError(f"{draft_dir / META_FILE} names no target; pass --target")
    entries = _measured_entries(cfg, draft_dir)
    check_draft_tokenizer(draft_dir, spec)
    return draft_dir, out, token, meta, spec, entries


def check_draft_tokenizer(draft_dir: Path, spec: str) -> None:
    """The tokenizer the draft was trained with is the target's (the `tokenizer` check repeats this on the
    assembled folder, after the target has loaded; this costs only the two tokenizers)."""
    if not (draft_dir / "tokenizer_config.json").is_file() and not (draft_dir / "tokenizer.json").is_file():
        return
    try:
        mine = AutoTokenizer.from_pretrained(draft_dir)
    except (OSError, ValueError) as e:
        raise UserError(f"the draft's tokenizer in {draft_dir} does not load: {str(e).splitlines()[0]}") from None
    try:
        check_tokenizers(load_tokenizer(spec), mine)
    except UserError as e:
        raise UserError(f"draft {draft_dir} vs target {spec}: {e}") from None


def _measured_entries(cfg: PublishConfig, draft_dir: Path) -> list[dict] | None:
    """The evaluation report's entries for this draft (one per γ): --eval's, else, for the draft a pipeline shipped
    (RUN/draft), the pipeline's own evaluation (RUN/eval) of the folder it was copied from; None without either."""
    shipped = pipeline_shipped(draft_dir)
    if cfg.eval or shipped:
        report_path, report = modelcard.load_report(Path(cfg.eval) if cfg.eval else draft_dir.parent / "eval")
        entries = _select(report, report_path, draft_dir, shipped)
        if not cfg.eval:
            print(used_line(report_path, shipped, modelcard.headline(entries)))
        return entries
    if cfg.require_eval:
        raise UserError("--require-eval: give --eval EVAL_DIR (the folder `python -m distill.evaluate` wrote)")
    print("warning: no --eval; the card will say that no speed numbers were measured")
    return None


def pipeline_shipped(draft_dir: Path) -> dict | None:
    """pipeline.json's `shipped` when draft_dir is the draft a pipeline run shipped (RUN/draft beside it), else None."""
    path = draft_dir.parent / "pipeline.json"
    try:
        shipped = json.loads(path.read_text()).get("shipped") if path.is_file() else None
    except (json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(shipped, dict) or not shipped.get("from") or Path(shipped.get("folder", "")).name != draft_dir.name:
        return None
    return shipped


def _select(report: dict, report_path: Path, draft_dir: Path, shipped: dict | None) -> list[dict]:
    """The entries of the folder the pipeline shipped the draft from, else those of the draft folder itself; a
    screened evaluation's row confirmed on every prompt in place of the screen's row at its γ."""
    entries = None
    if shipped:
        try:
            entries = modelcard.select_entries(report, report_path, Path(shipped["from"]))
        except UserError:  # a report of other drafts (--eval given): the folder's own entries, or its error
            pass
    entries = entries or modelcard.select_entries(report, report_path, draft_dir)
    confirmed = {e["gamma"] for e in entries if e.get("confirmed")}
    return [e for e in entries if e.get("confirmed") or e["gamma"] not in confirmed]


def used_line(report_path: Path, shipped: dict, e: dict) -> str:
    """What publish says when it takes the pipeline's evaluation: which report, which draft, which numbers."""
    s = e.get("speculative", {})
    return (f"publish: numbers from the pipeline's evaluation {report_path} ({shipped['from']}, shipped to "
            f"{shipped['folder']}): γ {e['gamma']}, α {s.get('acceptance_rate')}, τ {s.get('tau')}, speedup "
            f"{e['speedup']}x on {e.get('prompts')} prompts, as a chain without context lookup (the card's numbers; "
            f"the pipeline's best row, with the bundled decoder's lookup and trees: {shipped.get('speedup')}x)")


def _assemble_and_check(cfg: PublishConfig, draft_dir: Path, folder: Path, meta: dict, spec: str,
                        entries: list[dict] | None, gamma: int) -> list:
    """Write the repo folder with its model card; raise (nothing uploaded) when a compatibility check failed."""
    # the target's working dtype ("auto": bf16 on a GPU, where a 70B target would not fit in float32; float32 on
    # the CPU); check_lossless allows for low precision's near-ties. A target too large for one GPU is spread.
    target, target_tok = load_target(spec, "auto", cfg.device)
    hub_id = target_hub_id(meta, spec)
    names = redact.target_names(spec, resolve(spec))  # a local target's folder -> its name, on the card too
    if is_head_folder(draft_dir) and hub_id is None:
        print(f"warning: the target {redact.text(spec, names)} has no Hub id (specdistill.json has no `target_name`), so "
              "the feature head's config.json names no verifier: users must name the target themselves "
              "(vLLM's LLM(model=TARGET, speculative_config=...))")
    verifier = {"name_or_path": hub_id, "architectures": list(getattr(target.config, "architectures", None) or [])}
    n_params = assemble(draft_dir, folder, resolve(spec), cfg.dtype, gamma, target, verifier)
    redact.meta_files(folder, names)
    print(f"assembled {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    checks = compat.run_checks(folder, draft_dir, target, target_tok, gamma, resolve(spec), cfg.vllm_python)
    for c in checks:
        print(f"check {c.name:<11} {'skip' if c.skipped else 'ok  ' if c.ok else 'FAIL'} {c.detail}")
    vllm = next((c.numbers for c in checks if c.name == "vllm" and c.numbers), None)
    for line in modelcard.slow_warnings(modelcard.headline(entries) if entries else None, vllm):
        print(f"warning: {line}")
    card = modelcard.build_card(
        repo_id=cfg.repo_id, target_id=hub_id, target_spec=redact.text(spec, names), meta=meta,
        config=json.loads((folder / "config.json").read_text()), target_config=target.config.to_dict(),
        n_params=n_params, weights_dtype=cfg.dtype, entries=entries, checks=checks, gamma=gamma,
        reduced=(folder / servable.REDUCED_DIR).is_dir(), license=cfg.license, vllm=vllm,
    )
    ModelCard(redact.text(str(card), names)).save(folder / "README.md")
    failed = [c for c in checks if not c.ok]
    if failed:
        where = f"; the folder is left in {folder} for inspection" if cfg.dry_run else ""
        raise UserError("compatibility check failed, nothing uploaded: "
                        + "; ".join(f"{c.name}: {c.detail}" for c in failed) + where)
    return checks


def main(argv=None) -> None:
    try:  # the message to stderr and exit status 1 (publish's tests and scripts read both)
        result = publish(cli.parse(PublishConfig, argv, __doc__))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result))
