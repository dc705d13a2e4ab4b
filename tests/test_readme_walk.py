"""The README as a new user walks it: every command in its ```bash blocks, in order, in a fresh copy of the
repository, each of which must exit 0 and print no traceback.

The commands run as written, with quick-sized settings appended (SHRINK: later flags win over earlier ones) and
the README's own substitutions (SUBSTITUTE), both listed in the README under "The README walk". A block after a
`<!-- walk: skip REASON -->` line is not run (GPUs, a SLURM cluster: tested elsewhere, said in the reason).
`bash scripts/setup.sh` and `bash scripts/test.sh` are not run: they are how this test itself is run. A command
the README shows again (the main job: once to run it, once with its output) runs once: a rerun only resumes, and
the pipeline's resume is tested in tests/test_data_engine.py.

Two runs are also checked for what they deliver, each of which was a separate test before (issue 36): the quick
preset's (a lossless best draft, the reduced vocabulary's map, the calibrated copy circuit; a 156 s pipeline run
in tests/test_evaluate.py), and publish's dry run of the pipeline's reduced-vocabulary draft, served by vLLM
(lossless, α within tolerance of the bundled decoder's, the card's vLLM section; a 311 s test of the vLLM pass,
tests/test_publish_vllm.py, that published a layer cut of the default target the same way).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# Quick-sized settings, appended to every command that starts with the key.
SHRINK = {
    "python -m distill.pipeline": [
        "--collect", "{limit: 12, max_new_tokens: 16, batch_size: 12}",
        "--heldout", "{limit: 4, max_new_tokens: 16}",
        "--train", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1}",
        "--head", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1}",
        "--parallel", "{max_steps: 4, eval_every: 2, save_every: 2, warmup_steps: 1}",
        "--evaluate", "{limit: 2, max_new_tokens: 8, long_limit: 1}",
    ],
    "python -m distill.collect.bench": ["--n", "4", "--max-new-tokens", "8"],
    "python -m distill.collect": ["--limit", "12", "--max-new-tokens", "16"],
    "python distill/train.py": ["--max-steps", "4", "--eval-every", "2", "--save-every", "2", "--warmup-steps", "1"],
    "python -m distill.evaluate": ["--limit", "2", "--max-new-tokens", "8", "--long-limit", "1"],
    "python -m decode.bench": ["--limit", "1", "--max-new-tokens", "8"],
    "python -m distill.train.copy_probe": ["--rows", "8", "--spans", "4"],
}
# The shrunk pipeline's last checkpoint is step 4 where the README's full run shows step 300; "a local HF
# folder" is the default target's converted copy.
SUBSTITUTE = {"checkpoint-000300": "checkpoint-000004",
              "/path/to/hf/folder": "{default_target_folder}"}
NOT_RUN = ("bash scripts/setup.sh", "bash scripts/test.sh")


def commands(text: str) -> list[str]:
    """The README's commands in order: a block's `$ `-prompted lines (with `\\` continuations), or, in a ```bash
    block without prompts, its non-comment lines; `a && b` is split; a skipped block contributes nothing."""
    out, skip = [], False
    for m in re.finditer(r"(<!-- walk: skip[^>]*-->)|```(bash)?\n(.*?)```", text, re.S):
        if m.group(1):
            skip = True
            continue
        if skip:
            skip = False
            continue
        lines = m.group(3).replace("\\\n", " ").splitlines()
        prompted = [x[2:] for x in lines if x.startswith("$ ")]
        plain = [x for x in lines if x.strip() and not x.lstrip().startswith("#")] if m.group(2) else []
        for line in prompted or plain:
            line = re.sub(r"\s+#.*$", "", line.strip())  # a trailing comment
            out += [part.strip() for part in line.split("&&")]
    return [c.removeprefix("time ") for c in out]


def shrunk(command: str) -> str | None:
    if command.startswith(NOT_RUN):
        return None
    for old, new in SUBSTITUTE.items():
        if old in command and new == "{default_target_folder}":
            from decode.models.targets import resolve

            new = resolve("default")
        command = command.replace(old, new)
    for prefix, extra in SHRINK.items():
        if command.startswith(prefix + " ") or command == prefix:
            return command + " " + " ".join(shlex.quote(x) for x in extra)
    return command


def test_the_walk_reads_the_commands_the_readme_shows():
    cmds = commands(README.read_text())
    assert "python -m distill.pipeline --config configs/pipeline/default.yaml" in cmds
    assert any(c.startswith("python -m distill.publish") for c in cmds)
    assert all("..." not in shrunk(c) for c in cmds if shrunk(c)), "a command that cannot run as written"


def _fresh_copy(dest: Path) -> Path:
    """The repository's tracked files (as they are in the working tree) in a new folder; .venv-vllm linked."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src, dst = REPO / name, dest / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
            dst.chmod(src.stat().st_mode)
    if (REPO / ".venv-vllm").exists():
        (dest / ".venv-vllm").symlink_to(REPO / ".venv-vllm")
    return dest


@pytest.mark.slow
def test_every_readme_command_runs_in_a_fresh_folder(tmp_path):
    root = _fresh_copy(tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}
    bin_dir = tmp_path / "bin"  # `python` in the README is this interpreter
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    ran, outputs = [], {}
    for command in commands(README.read_text()):
        cmd = shrunk(command)
        if cmd is None or cmd in outputs:
            continue
        start = time.monotonic()
        proc = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=1800)
        print(f"walk: {time.monotonic() - start:6.1f} s  {cmd[:120]}")  # shown by pytest -s: where the walk's time goes
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"README command failed ({proc.returncode}): {cmd}\n{output[-4000:]}"
        assert "Traceback" not in output, f"README command printed a traceback: {cmd}\n{output[-4000:]}"
        ran.append(cmd)
        outputs[cmd] = output
        if cmd.startswith("python -m distill.publish") and "--vllm-python" in cmd:
            check_publish_served_by_vllm(root, cmd, proc.stdout)
    assert len(ran) >= 8, ran
    assert any(c.startswith("python -m distill.publish") and "--vllm-python" in c for c in ran), ran
    quick = [c for c in ran if c.startswith("python -m distill.pipeline") and "--preset quick" in c]
    assert len(quick) == 1, ran
    check_quick_pipeline(root / "runs" / "pipeline-default-quick", outputs[quick[0]])


def check_quick_pipeline(out: Path, output: str) -> None:
    """The README's main job with --preset quick on the default target (shrunk): a lossless best draft, the reduced
    vocabulary's map beside the last checkpoint, and the exported copy-circuit draft calibrated: one gain, set from
    the residual's growth, on the private dims."""
    import json

    from safetensors.torch import load_file

    summary = json.loads((out / "pipeline.json").read_text())
    report = json.loads((out / "eval" / "report.json").read_text())
    assert report["entries"] and summary["best"]["lossless"] is True
    assert "best draft" in output
    hf = out / "train" / "checkpoint-000004" / "hf"
    assert (hf / "draft_vocab.json").is_file()
    private = json.loads((hf / "config.json").read_text())["copy_circuit"]["private"]
    gain = load_file(hf / "model.safetensors")["model.norm.weight"][private:]
    assert (gain == gain[0]).all() and gain[0] != 1.0, gain[:4]


def check_publish_served_by_vllm(root: Path, cmd: str, stdout: str) -> None:
    """publish --dry-run of the pipeline's reduced-vocabulary draft with --vllm-python: the expanded draft and
    reduced/ propose alike (servable), vLLM serves it losslessly with α within tolerance of the bundled decoder's,
    and the card states vLLM's numbers."""
    import json
    import shlex

    assert "check servable    ok" in stdout and "check vllm        ok   vLLM" in stdout, stdout[-3000:]
    v = json.loads(stdout.strip().splitlines()[-1])["vllm"]
    assert v["lossless"] and abs(v["acceptance_rate"] - v["ours_acceptance_rate"]) <= v["alpha_tolerance"], v
    args = shlex.split(cmd)
    out = args[args.index("--dry-run") + 1]  # runs/publish-dry-run
    assert (root / out / "reduced").is_dir()
    card = (root / out / "README.md").read_text()
    assert "## Measured in vLLM" in card and f"| vLLM {v['vllm']} | {v['acceptance_rate']:.3f} |" in card

