"""The slurm/ scripts on a real single-node Slurm (tests/slurm_cluster.py), CPU only, on a tiny random llama
target saved with the real default tokenizer: the pipeline.sh chain to its merged evaluation report, a collect
array resubmitted after one task was killed, a failed train stage cancelling eval, a 2-process DeepSpeed
train.slurm, a USR1 preemption warning that requeues and resumes, the sweep phases, and the refusals when a
script runs outside an allocation or without its variables.

Slurm is installed with apt-get when missing (root); the tests skip only when that is impossible. Every job
runs with OMP_NUM_THREADS=1: the box is small and may be busy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, SlurmUnavailable, install

REPO = Path(__file__).resolve().parents[1]
SLURM = REPO / "slurm"
N_PROMPTS = 12
COLLECT = ["--max-new-tokens", "8", "--topk", "8", "--batch-size", "4"]
TRAIN = ["--max-steps", "4", "--save-every", "2", "--batch-size", "2", "--report-to", "none", "--vocab", "512",
         "--precision", "fp32", "--warmup-steps", "1", "--log-every", "1", "--eval-every", "4"]
CPU_ACCELERATE = str(REPO / "configs" / "accelerate" / "cpu.yaml")


# --- fixtures: the cluster, a tiny target, the environment of submissions ------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        install()
    except SlurmUnavailable as e:
        pytest.skip(f"Slurm cannot be installed here: {e}")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random 2-layer x 32 llama with the default tokenizer (49,152 tokens), and N_PROMPTS prompts."""
    from decode.models.targets import load_tokenizer
    from tests.conftest import save_tiny_default_target

    root = tmp_path_factory.mktemp("tiny")
    save_tiny_default_target(root / "target", load_tokenizer("default"), hidden=32, layers=2)
    rows = [{"id": f"p{i:02d}", "category": "chat", "messages": [{"role": "user", "content": f"Tell me about topic {i}."}]}
            for i in range(N_PROMPTS)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"target": str(root / "target"), "prompts": str(root / "prompts.jsonl"), "ids": [r["id"] for r in rows]}


def _clean_env() -> dict:
    """os.environ without Slurm job variables or specdistill settings from outside (a CI runner may be a job)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SPECDISTILL_"))}


def _env(cluster, out: Path, **extra) -> dict:
    env = cluster.env()
    env = {**_clean_env(), "SLURM_CONF": env["SLURM_CONF"], "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_MODE": "offline", "SPECDISTILL_OUTPUT": str(out), "SPECDISTILL_REPO": str(REPO)}
    return {**env, **extra}


def _sbatch(cluster, cwd: Path, env: dict, *args: str) -> str:
    (cwd / "logs").mkdir(exist_ok=True)
    done = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _log(cwd: Path, name: str, job_id: str) -> str:
    return (cwd / "logs" / f"{name}-{job_id}.out").read_text()


def _pipeline(cluster, cwd: Path, out: Path, tiny: dict, train_extra: list[str], timeout: float = 600):
    cmd = ["bash", str(SLURM / "pipeline.sh"), "--output", str(out), "--shards", "2", "--procs-per-node", "1",
           "--eval-tasks", "2", "--wait",
           "--collect", "--target", tiny["target"], "--prompts", tiny["prompts"], *COLLECT,
           "--train", "--target", tiny["target"], *TRAIN, *train_extra,
           "--eval", "--target", tiny["target"], "--limit", "2", "--max-new-tokens", "8", "--gamma", "2", "--no-anchors"]
    env = _env(cluster, out, SPECDISTILL_ACCELERATE_CONFIG=CPU_ACCELERATE)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    ids = dict(re.findall(r"^(collect|train|eval)\s+(\d+)", done.stdout, re.M))
    return done, ids, time.monotonic() - t0


# --- the whole chain ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pipeline_chain_runs_to_the_merged_report(cluster, tiny, tmp_path):
    out = tmp_path / "out"
    done, ids, wall = _pipeline(cluster, tmp_path, out, tiny, [])
    print(done.stdout, f"\nwall time of the tiny chain: {wall:.1f} s")
    assert done.returncode == 0, (done.stdout, done.stderr, cluster.logs())
    assert set(ids) == {"collect", "train", "eval"}
    # states from scontrol: every task of both arrays and the training job completed, in dependency order
    for stage, job_id in ids.items():
        jobs = cluster.jobs(job_id)
        assert jobs and all(j["JobState"] == "COMPLETED" for j in jobs), (stage, jobs)
    assert cluster.job(ids["train"])["Dependency"] == "(null)"  # satisfied dependencies are cleared
    assert len(cluster.jobs(ids["collect"])) == 2 and len(cluster.jobs(ids["eval"])) == 2

    report = json.loads((out / "eval" / "report.json").read_text())
    assert sorted(e["label"] for e in report["entries"]) == ["checkpoint-000002", "checkpoint-000004"]
    assert report["best"] and all(e["lossless"] for e in report["entries"])
    assert (out / "eval" / "report.md").read_text().startswith("# specdistill evaluation")
    assert json.loads((out / "collect" / "collect.json").read_text())["rows"] == N_PROMPTS

    # every job prints its resolved settings first and its elapsed time last
    train_log = _log(tmp_path, "sd-train", ids["train"])
    assert train_log.startswith("== train:") and "1 x 1 processes = 1" in train_log
    assert re.search(r"== train: elapsed \d+m\d+s \(\d+ s\), exit status 0\n$", train_log)
    for j in cluster.jobs(ids["eval"]):
        log = _log(tmp_path, "sd-eval", j["JobId"])
        assert log.startswith("== eval:") and "exit status 0" in log.splitlines()[-1]


@pytest.mark.slow
def test_failed_train_stage_cancels_eval(cluster, tiny, tmp_path):
    out = tmp_path / "out"
    done, ids, _ = _pipeline(cluster, tmp_path, out, tiny, ["--init", "pretrained:/nonexistent/draft"])
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert all(j["JobState"] == "COMPLETED" for j in cluster.jobs(ids["collect"]))
    train = cluster.job(ids["train"])
    assert train["JobState"] == "FAILED" and train["ExitCode"] == "1:0", train
    evals = cluster.jobs(ids["eval"])
    assert len(evals) == 1  # the array was never split into tasks: none ran
    assert evals[0]["JobState"] == "CANCELLED" and evals[0]["Reason"] == "DependencyNeverSatisfied", evals[0]
    assert evals[0]["StartTime"] in ("None", "Unknown") or evals[0]["RunTime"] == "00:00:00"
    assert not list((tmp_path / "logs").glob(f"sd-eval-{ids['eval']}*")) and not (out / "eval").exists()
    assert "JobState=CANCELLED Reason=DependencyNeverSatisfied" in done.stdout


# --- collect: a killed task, resubmitted --------------------------------------------------------------------


@pytest.mark.slow
def test_collect_array_resubmitted_after_a_kill_has_every_prompt_once(cluster, tiny, tmp_path):
    from distill.collect.shards import load_collected, shard_meta

    out = tmp_path / "out"
    data = out / "collect"
    env = _env(cluster, out)
    # one prompt per shard and longer answers: task 1 is still writing shards when it is killed
    args = ["--array=0-1", str(SLURM / "collect.slurm"), "--target", tiny["target"], "--prompts", tiny["prompts"],
            "--max-new-tokens", "64", "--topk", "8", "--batch-size", "1"]
    first = _sbatch(cluster, tmp_path, env, *args)
    deadline = time.monotonic() + 300
    while not list((data / "shards").glob("r001-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    subprocess.run(["scancel", f"{first}_1"], env=env, check=True)
    states = cluster.wait([first])
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"], states
    before = {r: sum(m["rows"] for m in shard_meta(data) if m["rank"] == r) for r in (0, 1)}
    n_before = len(load_collected(data))
    assert not (data / "collect.json").exists() and 0 < n_before < N_PROMPTS, (before, n_before)

    # the same command again: task 0 finds its share done, task 1 collects only what is missing
    again = _sbatch(cluster, tmp_path, env, *args)
    states = cluster.wait([again])
    assert set(states.values()) == {"COMPLETED"}, states
    ds = load_collected(data)
    assert sorted(ds["id"]) == tiny["ids"]  # every prompt, exactly once
    info = json.loads((data / "collect.json").read_text())
    assert info["rows"] == info["prompts"] == N_PROMPTS
    metas = shard_meta(data)
    assert sum(m["rows"] for m in metas if m["rank"] == 0) == before[0] == N_PROMPTS // 2
    task0 = next(j for j in cluster.jobs(again) if j["ArrayTaskId"] == "0")
    assert "shard                  0 of 2" in _log(tmp_path, "sd-collect", task0["JobId"])


# --- train: a 2-process DeepSpeed job; a preemption warning that requeues ------------------------------------


@pytest.fixture(scope="module")
def collected(tiny, tmp_path_factory):
    """Data from the tiny target, collected in-process (the train tests need data, not another collect job)."""
    import torch

    from distill.collect import CollectConfig, run

    out = tmp_path_factory.mktemp("collected") / "collect"
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(CollectConfig(target=tiny["target"], prompts=tiny["prompts"], output=str(out), max_new_tokens=8, topk=8,
                          batch_size=4))
    finally:
        torch.set_num_threads(n)
    return str(out)


@pytest.mark.slow
def test_train_slurm_runs_two_process_deepspeed(cluster, tiny, collected, tmp_path):
    out = tmp_path / "out"
    env = _env(cluster, out, SPECDISTILL_PROCS_PER_NODE="2", SPECDISTILL_ACCELERATE_ARGS="--mixed_precision no")
    job = _sbatch(cluster, tmp_path, env, "--cpus-per-task=2", str(SLURM / "train.slurm"),
                  "--target", tiny["target"], "--data", collected, *TRAIN)
    states = cluster.wait([job], timeout=600)
    log = _log(tmp_path, "sd-train", job)
    assert states == {job: "COMPLETED"}, log[-4000:]
    assert "1 x 2 processes = 2" in log and "configs/accelerate/zero2.yaml" in log
    assert log.count("draft: 2 layers") == 1  # the main process alone reports
    ckpt = out / "train" / "checkpoint-000004"
    # a ZeRO-2 checkpoint of two ranks: optimizer shards and RNG states of rank 0 and rank 1
    assert sorted(p.name for p in (ckpt / "pytorch_model").glob("zero_pp_rank_*_optim_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert (ckpt / "random_states_0.pkl").is_file() and (ckpt / "random_states_1.pkl").is_file()
    assert json.loads((ckpt / "hf" / "specdistill.json").read_text())["step"] == 4
    metrics = [json.loads(line) for line in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/loss" in m] == [1, 2, 3, 4]


@pytest.mark.slow
def test_train_slurm_requeues_on_usr1_and_resumes(cluster, tiny, collected, tmp_path):
    out = tmp_path / "out"
    env = _env(cluster, out, SPECDISTILL_PROCS_PER_NODE="1", SPECDISTILL_ACCELERATE_CONFIG=CPU_ACCELERATE)
    args = ["--target", tiny["target"], "--data", collected, *TRAIN, "--max-steps", "400", "--save-every", "10"]
    job = _sbatch(cluster, tmp_path, env, str(SLURM / "train.slurm"), *args)
    log_path = tmp_path / "logs" / f"sd-train-{job}.out"
    deadline = time.monotonic() + 300
    while not (log_path.is_file() and "\nstep 15:" in log_path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    # what Slurm sends 120 s before the time limit (--signal=B:USR1@120)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=env, check=True)
    deadline = time.monotonic() + 60
    while cluster.job(job)["Restarts"] == "0" and time.monotonic() < deadline:
        time.sleep(0.5)
    states = cluster.wait([job], timeout=600)
    log = log_path.read_text()
    assert states == {job: "COMPLETED"}, log[-4000:]
    assert cluster.job(job)["Restarts"] == "1"
    assert "got SIGUSR1" in log and f"requeueing job {job}" in log and "restart 1" in log
    resumed = re.search(r"resumed from \S+checkpoint-(\d+) at step (\d+)", log)
    assert resumed and 10 <= int(resumed.group(2)) < 400, log[-4000:]
    assert (out / "train" / "checkpoint-000400" / "hf" / "model.safetensors").is_file()


# --- sweep: collect once, one design per array task, the ranking ---------------------------------------------


@pytest.mark.slow
def test_sweep_phases(cluster, tiny, tmp_path):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(f"""\
target: {tiny["target"]}
collect: {{prompts: {tiny["prompts"]}, max_new_tokens: 8, topk: 8, batch_size: 4}}
heldout: {{prompts: {tiny["prompts"]}, limit: 4}}
train: {{max_steps: 2, save_every: 2, eval_every: 2, batch_size: 2, report_to: none, vocab: 512}}
evaluate: {{limit: 2, max_new_tokens: 8, gamma: 2}}
grid: {{layers: [1, 2]}}
""")
    out = tmp_path / "out"
    env = _env(cluster, out)
    script = str(SLURM / "sweep.slurm")
    c = _sbatch(cluster, tmp_path, env, script, "collect", "--config", str(cfg))
    d = _sbatch(cluster, tmp_path, env, "--array=0-1", f"--dependency=afterok:{c}", "--kill-on-invalid-dep=yes",
                script, "design", "--config", str(cfg))
    r = _sbatch(cluster, tmp_path, env, f"--dependency=afterok:{d}", "--kill-on-invalid-dep=yes",
                script, "rank", "--config", str(cfg))
    states = cluster.wait([c, d, r])
    assert set(states.values()) == {"COMPLETED"}, (states, cluster.logs())
    ranking = json.loads((out / "sweep" / "ranking.json").read_text())
    assert sorted(row["name"] for row in ranking) == ["layers1", "layers2"]
    assert all("error" not in row for row in ranking), ranking
    rank_log = _log(tmp_path, "sd-sweep", r)
    assert "| rank | design |" in rank_log and "train + evaluate" not in rank_log  # ranks only, redoes nothing


# --- bad input: outside an allocation, or a missing variable --------------------------------------------------


@pytest.mark.parametrize("script", ["collect.slurm", "train.slurm", "eval.slurm", "sweep.slurm"])
def test_batch_scripts_refuse_to_run_outside_an_allocation(script, tmp_path):
    env = {**_clean_env(), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", str(SLURM / script), "--config", "x.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "SPECDISTILL_OUTPUT is not set: export SPECDISTILL_OUTPUT=" in done.stderr
    assert "not inside a Slurm job" in done.stderr and "sbatch" in done.stderr
    assert "nothing was run or submitted" in done.stderr and not list(tmp_path.iterdir())


def test_pipeline_checks_everything_before_submitting(tmp_path):
    # a stand-in sbatch that records any call: nothing may be submitted half-configured
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(f"#!/bin/sh\necho called >> {tmp_path}/sbatch-calls\necho 1\n")
    (bindir / "sbatch").chmod(0o755)
    env = {**_clean_env(), "PATH": f"{bindir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SLURM / "pipeline.sh"), "--shards", "0", "--collect", "--limit", "2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "export SPECDISTILL_OUTPUT=" in done.stderr and "--shards must be a positive integer" in done.stderr
    assert "--gpus-per-node G" in done.stderr and "--procs-per-node P" in done.stderr
    assert not (tmp_path / "sbatch-calls").exists() and not (tmp_path / "logs").exists()

    # a stage option that does not parse is caught before submission too
    env["SPECDISTILL_OUTPUT"] = str(tmp_path / "out")
    done = subprocess.run(["bash", str(SLURM / "pipeline.sh"), "--procs-per-node", "1", "--train", "--max-steps", "0"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--train options" in done.stderr and "max-steps" in done.stderr
    assert not (tmp_path / "sbatch-calls").exists()


@pytest.mark.slow
def test_job_without_its_variables_fails_at_once_saying_which(cluster, tmp_path):
    env = _env(cluster, tmp_path / "out")
    del env["SPECDISTILL_OUTPUT"]
    job = _sbatch(cluster, tmp_path, env, "--array=0-0", str(SLURM / "collect.slurm"))
    job2 = _sbatch(cluster, tmp_path, _env(cluster, tmp_path / "out"), str(SLURM / "train.slurm"))  # no GPUs, no P
    states = cluster.wait([job, job2], timeout=120)
    assert set(states.values()) == {"FAILED"}, states
    task = cluster.jobs(job)[0]["JobId"]
    assert "SPECDISTILL_OUTPUT is not set: export SPECDISTILL_OUTPUT=" in _log(tmp_path, "sd-collect", task)
    assert cluster.job(job2)["ExitCode"] == "2:0"
    assert "SPECDISTILL_PROCS_PER_NODE is not set" in _log(tmp_path, "sd-train", job2)
    assert not (tmp_path / "out").exists()
