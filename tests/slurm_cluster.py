"""A real single-node Slurm for the slurm/ tests: one slurmctld and one slurmd (node `localhost`), started as
root from a private slurm.conf in a temporary folder, stopped by PID.

    cluster = SlurmCluster(tmp_dir).start()      # ~seconds; raises SlurmUnavailable when it cannot
    subprocess.run(["sbatch", ...], env=cluster.env())
    cluster.stop()

The configuration is one known to start in seconds as root (Debian `slurm-wlm`): no munge
(auth/none, cred/none), proctrack/linuxproc, task/none, select/cons_tres with CR_CPU, no accounting
(`sacct` needs slurmdbd; read states with `scontrol show job`). Finished jobs stay visible to scontrol for
an hour (MinJobAge), the scheduler runs every second, so dependency chains move without delay, and a
requeued job restarts after 10 s instead of 120 (AuthInfo=cred_expire).
`install()` installs the package with apt-get when `slurmctld` is missing and we are root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and could not be installed, or its daemons did not come up."""


def install() -> None:
    """apt-get install slurm-wlm when slurmctld is missing (root only); raise SlurmUnavailable if that fails."""
    if shutil.which("slurmctld") and shutil.which("sbatch"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SlurmUnavailable("slurmctld is not installed and this is not a root Debian/Ubuntu box (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "slurm-wlm"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SlurmUnavailable(f"`{' '.join(cmd)}` failed: {done.stderr[-800:]}")
    if not shutil.which("slurmctld"):
        raise SlurmUnavailable("apt-get install slurm-wlm succeeded but slurmctld is still not on PATH")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, root: Path, cpus: int = 4):
        self.root = Path(root)
        self.cpus = cpus  # declared CPUs (config_overrides lets it exceed the real count: jobs here are tiny)
        self.conf = self.root / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}

    def env(self, **extra: str) -> dict:
        """The environment for client commands (and, through sbatch's --export=ALL, for the jobs)."""
        return {**os.environ, "SLURM_CONF": str(self.conf), **extra}

    def _write_conf(self) -> None:
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        ctld_port, d_port = _free_port(), _free_port()
        self.conf.write_text(f"""\
ClusterName=specdistill-test
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
MinJobAge=3600
JobRequeue=1
KillWait=10
AuthInfo=cred_expire=10
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
SlurmdLogFile={self.root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")

    def start(self, timeout: float = 60) -> SlurmCluster:
        install()
        self._write_conf()
        env = self.env()
        # foreground daemons (-D) so that the PIDs we hold are the daemons' own; -c/-i: a clean start
        self.procs["slurmctld"] = subprocess.Popen(
            ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)], env=env,
            stdout=subprocess.DEVNULL, stderr=(self.root / "log" / "slurmctld.err").open("w"))
        self.procs["slurmd"] = subprocess.Popen(
            ["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)], env=env,
            stdout=subprocess.DEVNULL, stderr=(self.root / "log" / "slurmd.err").open("w"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    self.stop()
                    raise SlurmUnavailable(f"{name} exited with {p.returncode}: {self.logs()}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip() in ("idle", "mixed", "allocated"):
                return self
            time.sleep(0.5)
        self.stop()
        raise SlurmUnavailable(f"the node did not become idle within {timeout:.0f} s: {self.logs()}")

    def logs(self) -> str:
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            parts.append(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel our jobs, then stop the daemons we started, by PID (SIGTERM, then SIGKILL)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--user", "root"], env=self.env(), capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                q = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env(), capture_output=True, text=True)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    # --- helpers for tests ----------------------------------------------------------------------------------

    def job(self, job_id: str) -> dict:
        """`scontrol show job -o JOB` as a dict (first record; an array's tasks: ask for JOB_TASK)."""
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env(),
                             capture_output=True, text=True, check=True).stdout
        return dict(kv.split("=", 1) for kv in out.splitlines()[0].split() if "=" in kv)

    def jobs(self, job_id: str) -> list[dict]:
        """Every record `scontrol show job -o JOB` prints (all tasks of an array)."""
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env(),
                             capture_output=True, text=True, check=True).stdout
        return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in out.splitlines() if line]

    def wait(self, job_ids, timeout: float = 600) -> dict[str, str]:
        """Wait until none of `job_ids` (every array task included) is pending/running; {JobId: JobState}."""
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                 "PREEMPTED"}
        deadline = time.monotonic() + timeout
        while True:
            states = {j["JobId"]: j["JobState"] for jid in job_ids for j in self.jobs(jid)}
            if all(s in final for s in states.values()) or time.monotonic() > deadline:
                return states
            time.sleep(1)
