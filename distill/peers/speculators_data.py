"""Our collected data in speculators' offline format: the same prompts, the same target answers, the same tokens.

    rows           RUN/peers/speculators/rows.jsonl: one row per training example of our head, `input_ids` (the
                   prompt and response tokens our head trains on, plus its last label) and `loss_mask` (1 on the
                   response tokens our head predicts), the speculator-format rows speculators' prepare-data takes
    prepare        `speculators prepare-data` (speculators' own CLI) on those rows -> its dataset and token_freq.pt
    hidden states  hidden_states/hs_{i}.safetensors beside it, the file backend's format: `token_ids` (T,) and
                   `hidden_states` (T, len(layers) + 1, H), the target's hidden states entering each feature layer
                   and its last layer's output before the final norm (what vLLM's extraction hands speculators: the
                   aux layers plus num_hidden_layers), in the target's dtype. speculators' users make them with a vLLM
                   server; here the target's own forward does (vLLM's aux layer j is HF's hidden state entering j).
                   Written file by file (a temporary name renamed in), so an interrupted extraction resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch
from safetensors.torch import save_file

from decode.errors import UserError
from distill.train import batches

EXTRACT_TOKENS = 4096  # padded tokens a forward while extracting (rows of similar length together)


def write_rows(examples: batches.Examples, path: Path) -> dict:
    """rows.jsonl from our head's training examples (batches.Examples, as its training reads them) -> counts."""
    rows = tokens = labels = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for start in range(0, len(examples), 256):
            for e in examples.take(range(start, min(start + 256, len(examples)))):
                ids = [int(x) for x in e["input_ids"]] + [int(e["labels"][-1])]
                mask = [0] * (e["start"] + 1) + [1] * (len(ids) - e["start"] - 1)  # 1: the labels' positions
                f.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
                rows, tokens, labels = rows + 1, tokens + len(ids), labels + sum(mask)
    tmp.rename(path)
    return {"rows": rows, "tokens": tokens, "labels": labels}


def prepare(peer_python: str, target_dir: str, rows: Path, out: Path, seq_len: int, log: Path) -> None:
    """speculators' prepare-data on the rows (skipped once its dataset is there): pretokenized rows pass through
    (no render endpoint), and it counts the token frequencies its --draft-vocab-size reads."""
    if (out / "dataset_info.json").is_file() and (out / "token_freq.pt").is_file():
        return
    cmd = [peer_python, "-m", "speculators", "prepare-data", "--model", target_dir, "--data", str(rows),
           "--output", str(out), "--seq-length", str(seq_len), "--no-skip-token-freq",
           "--num-preprocessing-workers", "1", "--overwrite"]
    run_logged(cmd, log, "speculators prepare-data")


def run_logged(cmd: list[str], log: Path, what: str, env: dict | None = None) -> None:
    """Run a peer command with its output in `log` (appended); a failure is one line naming the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}).returncode
    if code != 0:
        tail = [x for x in log.read_text(errors="replace").splitlines() if x.strip()][-1:] or [f"exit status {code}"]
        raise UserError(f"{what} failed (exit status {code}): {tail[0][:300]}; its whole output is in {log}")


def read_prepared(out: Path) -> list[list[int]]:
    """The prepared dataset's input_ids, in its order (prepare-data shuffles): file i is row i."""
    import datasets

    return [list(map(int, x)) for x in datasets.load_from_disk(str(out))["input_ids"]]


@torch.no_grad()
def hidden_states(model, seqs: list[list[int]], layers: list[int], folder: Path, log=print) -> int:
    """hs_{i}.safetensors for every row i not written yet (see the module docstring) -> rows written now."""
    folder.mkdir(parents=True, exist_ok=True)
    todo = sorted((i for i in range(len(seqs)) if not (folder / f"hs_{i}.safetensors").is_file()),
                  key=lambda i: len(seqs[i]))
    if todo:
        log(f"hidden states: {len(todo)} of {len(seqs)} rows into {folder}")
    final = {}
    hook = model.base_model.norm.register_forward_pre_hook(lambda m, args: final.__setitem__("h", args[0]))
    try:
        k = 0
        while k < len(todo):
            size = 1  # rows of similar length (shortest first) within EXTRACT_TOKENS padded tokens a forward
            while k + size < len(todo) and (size + 1) * len(seqs[todo[k + size]]) <= EXTRACT_TOKENS:
                size += 1
            _write_chunk(model, [(i, seqs[i]) for i in todo[k:k + size]], layers, folder, final)
            k += size
    finally:
        hook.remove()
    return len(todo)


def _write_chunk(model, rows: list[tuple[int, list[int]]], layers: list[int], folder: Path, final: dict) -> None:
    T = max(len(s) for _, s in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, (_, s) in enumerate(rows):  # right-padded: a row's positions are those it has alone
        ids[b, :len(s)], mask[b, :len(s)] = torch.tensor(s), 1
    out = model.base_model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                           output_hidden_states=True)
    hs = torch.stack([out.hidden_states[j] for j in layers] + [final["h"]], 2)  # (B, T, len(layers) + 1, H)
    if not torch.isfinite(hs[mask.bool().to(hs.device)]).all():
        raise UserError(f"the target's hidden states at layers {layers} are not finite on this data: run it in another "
                        "dtype")
    for b, (i, s) in enumerate(rows):
        tmp = folder / f".hs_{i}.tmp"
        save_file({"token_ids": torch.tensor(s), "hidden_states": hs[b, :len(s)].cpu().contiguous()}, str(tmp))
        tmp.rename(folder / f"hs_{i}.safetensors")
