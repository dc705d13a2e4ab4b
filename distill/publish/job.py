"""Publish a draft to the Hugging Face Hub with its measured numbers, in a form transformers and vLLM load as is.

    python -m distill.publish DRAFT_DIR --repo-id ORG/NAME [--eval EVAL_DIR] [--require-eval] [--target T]
        [--dtype bfloat16|float32|float16] [--private] [--revision BRANCH] [--dry-run OUT_DIR]

1. read the checkpoint: config.json, model.safetensors, specdistill.json (target, design, loss, data, commands);
2. assemble the repo folder: weights cast to --dtype (bf16 by default), config.json, the target's tokenizer files,
   generation_config.json set to the measured best γ with a constant schedule, specdistill.json, and README.md,
   the model card (distill/publish/modelcard.py). A reduced-vocabulary draft goes to reduced/ (with its
   draft_vocab.json: the bundled decoder's fast form) and the folder itself gets its expansion to the target's
   vocabulary, which transformers and vLLM load (distill/publish/servable.py);
3. run the compatibility checks on that folder (distill/publish/compat.py), vLLM serving the target with the
   draft included (--vllm-python: the interpreter that has vLLM); any failure stops here;
4. upload: create_repo, then every file in ONE commit, so a failed upload leaves the remote as it was;
5. when the run was tracked (specdistill.json "wandb"), log the repo URL and the card's numbers to that W&B run
   and the folder as a model artifact.

`--dry-run OUT_DIR` does 1-3 and writes the folder to OUT_DIR without touching the network. The token comes from
HF_TOKEN or the cached `hf auth login`; it is never printed, logged or written, and a folder that contains it is
refused. HF_ENDPOINT (read when huggingface_hub is imported) points uploads at another Hub, e.g. the local
stand-in the tests use (tests/hub_standin.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, GenerationConfig

from decode import cli, draft_folder
from decode.draft_folder import META_FILE, VOCAB_MAP_FILE, assistant_config
from decode.errors import UserError
from decode.options import DecodeOptions
from decode.targets import DEFAULT_HUB_ID, DEFAULT_TARGET, load_target, resolve
from distill.publish import compat, modelcard, servable

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
    eval: str | None = field(default=None, metadata={"help": "evaluation folder (report.json) from distill.evaluate"})
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
    return sum(t.numel() for t in tensors.values())


def assemble(draft_dir: Path, out: Path, target_dir: str, dtype: str, gamma: int, target=None) -> int:
    """Write the repo folder; a reduced-vocabulary draft (given the loaded target) as reduced/ + its expansion."""
    out.mkdir(parents=True, exist_ok=True)
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
    tok_dir = Path(target_dir) if Path(target_dir).is_dir() else Path(_download_tokenizer(target_dir))
    copied = [f for f in TOKENIZER_FILES if (tok_dir / f).is_file()]
    if not copied:
        raise UserError(
            f"the target {target_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...) to ship with the draft"
        )
    for f in copied:
        shutil.copy2(tok_dir / f, out / f)
    for f in (VOCAB_MAP_FILE, META_FILE):
        if (draft_dir / f).is_file():
            shutil.copy2(draft_dir / f, out / f)
    if (out / VOCAB_MAP_FILE).is_file() and target is not None:
        servable.split_reduced(out, target.config, getattr(target, "generation_config", None))
    return n_params


def _download_tokenizer(hub_id: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(hub_id, allow_patterns=list(TOKENIZER_FILES))
    except Exception as e:
        raise UserError(
            f"could not fetch the tokenizer files of target {hub_id!r} from the Hub: {str(e).splitlines()[0]}"
        ) from None


# --- upload


def get_token() -> str:
    from huggingface_hub import get_token as hf_get_token

    token = hf_get_token()  # HF_TOKEN, else the cached `hf auth login`
    if not token:
        raise UserError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run OUT_DIR)"
        )
    return token


def check_repo_id(repo_id: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise UserError(f"invalid --repo-id {repo_id!r}: {e}") from None
    if repo_id.count("/") != 1:
        raise UserError(
            f"invalid --repo-id {repo_id!r}: give it as ORG/NAME (your user name or an organisation, then the repo name)"
        )


def _refuse_token_in(folder: Path, token: str) -> None:
    needle = token.encode()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and needle in f.read_bytes():
            raise UserError(
                f"{f.name} in the assembled folder contains your Hub token; refusing to upload it"
            )


def upload(
    folder: Path, repo_id: str, token: str, private: bool, revision: str | None, message: str
) -> tuple[str, str]:
    """create_repo (+ the branch), then all files in one commit. Returns (url, commit id)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)

    def fail(what: str, e: Exception, after: str) -> UserError:
        said = str(e).strip().splitlines()[0].rstrip(".")
        if getattr(e, "server_message", None):
            said += f" (the Hub says: {e.server_message.strip().splitlines()[0]})"
        return UserError(f"{what} on {api.endpoint} failed: {said}. {after}".replace(token, "***"))

    try:
        url = str(api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model"))
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
    except HfHubHTTPError as e:
        raise fail(
            f"creating {repo_id}" + (f" (branch {revision})" if revision else ""),
            e,
            "Nothing was uploaded; check the token's write access to the organisation.",
        ) from None
    # upload_folder would do, but with hf_xet installed it may split a folder into several commits; one
    # create_commit with every file is atomic: either the whole draft lands or the remote is unchanged
    ops = [
        CommitOperationAdd(path_in_repo=f.relative_to(folder).as_posix(), path_or_fileobj=str(f))
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    ]
    try:
        info = api.create_commit(repo_id, ops, commit_message=message, revision=revision, repo_type="model")
    except (HfHubHTTPError, ValueError, OSError) as e:
        raise fail(
            f"the commit of {len(ops)} files to {repo_id}",
            e,
            f"The commit is atomic, so the remote repo is unchanged ({url} exists, without these files); re-run to retry.",
        ) from None
    return (url if not revision else f"{url}/tree/{revision}"), info.oid


# --- W&B


def log_to_wandb(
    meta: dict, folder: Path, repo_id: str, url: str, revision: str | None, numbers: dict
) -> None:
    """Resume the training run (offline works too) and log the repo URL, the card numbers and the folder."""
    info = meta.get("wandb") or {}
    if not info.get("run_id"):
        return
    try:
        import wandb
    except ImportError:
        print(
            f"note: the draft was tracked in W&B run {info['run_id']}, but wandb is not installed; not logged there"
        )
        return
    try:
        if info.get("dir"):
            Path(info["dir"]).mkdir(parents=True, exist_ok=True)
        from distill.tracking import offline_without_key

        offline_without_key()  # the training run was offline when no key was set; resume it the same way
        run = wandb.init(project=info.get("project"), id=info["run_id"], resume="allow", dir=info.get("dir"))
        summary = {
            "publish/repo_id": repo_id,
            "publish/repo_url": url,
            "publish/revision": revision or "main",
        }
        summary.update({f"publish/{k}": v for k, v in numbers.items() if v is not None})
        run.summary.update(summary)
        art = wandb.Artifact(f"draft-{repo_id.replace('/', '--')}", type="model", metadata=summary)
        art.add_dir(str(folder))
        run.log_artifact(art, aliases=[revision or "main"])
        run.finish()
        print(
            f"logged the repo URL, card numbers and the folder (artifact {art.name}) to W&B run {info['run_id']}"
        )
    except Exception as e:  # the upload already succeeded; W&B trouble must not hide that
        print(
            f"warning: could not log to W&B run {info['run_id']}: {type(e).__name__}: {str(e).splitlines()[0]}"
        )


# --- main


def publish(cfg: PublishConfig) -> dict:
    """Check the inputs (fast), assemble and check the repo folder, then upload it (or stop at a dry run)."""
    draft_dir, out = Path(cfg.draft_dir), Path(cfg.dry_run) if cfg.dry_run else None
    check_repo_id(cfg.repo_id)
    meta = draft_folder.require(draft_dir)
    token = None if out else get_token()  # fail before any slow work
    if out and out.exists() and any(out.iterdir()):
        raise UserError(f"--dry-run folder {out} exists and is not empty; give a new or empty folder")
    spec = cfg.target or meta.get("target")
    if not spec:
        raise UserError(f"{draft_dir / META_FILE} names no target; pass --target")
    entries = _measured_entries(cfg, draft_dir)
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
        _refuse_token_in(folder, token)
        message = f"Publish draft for {target_hub_id(meta, spec) or spec} (specdistill)"
        url, commit = upload(folder, cfg.repo_id, token, cfg.private, cfg.revision, message)
        print(f"published {url} (commit {commit})")
        vllm = {f"vllm/{k}": v for k, v in (result["vllm"] or {}).items()}
        log_to_wandb(meta, folder, cfg.repo_id, url, cfg.revision, {**numbers, **vllm})
        return {**result, "url": url, "commit": commit, "revision": cfg.revision or "main"}
    finally:
        if work is not None:
            work.cleanup()


def _measured_entries(cfg: PublishConfig, draft_dir: Path) -> list[dict] | None:
    """The evaluation report's entries for this draft (one per γ), or None when no --eval was given."""
    if cfg.eval:
        report_path, report = modelcard.load_report(Path(cfg.eval))
        return modelcard.select_entries(report, report_path, draft_dir)
    if cfg.require_eval:
        raise UserError("--require-eval: give --eval EVAL_DIR (the folder `python -m distill.evaluate` wrote)")
    print("warning: no --eval; the card will say that no speed numbers were measured")
    return None


def _assemble_and_check(cfg: PublishConfig, draft_dir: Path, folder: Path, meta: dict, spec: str,
                        entries: list[dict] | None, gamma: int) -> list:
    """Write the repo folder with its model card; raise (nothing uploaded) when a compatibility check failed."""
    # the target's working dtype ("auto": bf16 on a GPU, where a 70B target would not fit in float32; float32 on
    # the CPU); check_lossless allows for low precision's near-ties. A target too large for one GPU is spread.
    target, target_tok = load_target(spec, "auto", cfg.device)
    n_params = assemble(draft_dir, folder, resolve(spec), cfg.dtype, gamma, target)
    print(f"assembled {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    checks = compat.run_checks(folder, draft_dir, target, target_tok, gamma, resolve(spec), cfg.vllm_python)
    for c in checks:
        print(f"check {c.name:<11} {'skip' if c.skipped else 'ok  ' if c.ok else 'FAIL'} {c.detail}")
    vllm = next((c.numbers for c in checks if c.name == "vllm" and c.numbers), None)
    for line in modelcard.slow_warnings(modelcard.headline(entries) if entries else None, vllm):
        print(f"warning: {line}")
    card = modelcard.build_card(
        repo_id=cfg.repo_id, target_id=target_hub_id(meta, spec), target_spec=spec, meta=meta,
        config=json.loads((folder / "config.json").read_text()), target_config=target.config.to_dict(),
        n_params=n_params, weights_dtype=cfg.dtype, entries=entries, checks=checks, gamma=gamma,
        reduced=(folder / servable.REDUCED_DIR).is_dir(), license=cfg.license, vllm=vllm,
    )
    card.save(folder / "README.md")
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
