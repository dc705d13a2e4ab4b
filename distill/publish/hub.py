"""publish's side of the Hub: the token, the repo id, offline mode, the one-commit upload, and the W&B record.

The token comes from HF_TOKEN or the cached `hf auth login`; it is never printed, logged or written, and a folder
that contains it is refused. HF_ENDPOINT and HF_HUB_OFFLINE are read by huggingface_hub when it is imported.
"""

from __future__ import annotations

from pathlib import Path

from decode.errors import UserError


def check_online() -> None:
    """An upload needs the Hub: HF_HUB_OFFLINE (read by huggingface_hub at import) would stop it at the end."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise UserError("HF_HUB_OFFLINE is set, but uploading needs the Hub: unset HF_HUB_OFFLINE, or write the "
                        "folder without uploading with --dry-run OUT_DIR")


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


def refuse_token_in(folder: Path, token: str) -> None:
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
    import httpx
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    unreachable = (OSError, httpx.HTTPError)  # offline mode (a ConnectionError), DNS, refused, timeouts
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
    except (HfHubHTTPError, *unreachable) as e:
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
    except (HfHubHTTPError, ValueError, *unreachable) as e:
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


