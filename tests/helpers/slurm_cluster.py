"""A real single-node Slurm (Debian's `slurm-wlm` + `munge`) for the tests: install, start, stop.

Everything lives in one scratch dir: its own munge key and socket, a `slurm.conf` that works inside a container
(no cgroups: `proctrack/linuxproc`, `task/none`, no accounting), state/spool/pid/log files, free TCP ports, and a
partition with this machine's CPUs. Client commands (sbatch, srun, scontrol) find it through `SLURM_CONF`, which
jobs inherit. Daemons are stopped by their pid files. Anything that keeps Slurm from starting raises
`SlurmUnavailable` with the reason and the daemons' log tails, so the tests skip saying why, never pass silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
PARTITION = "harness"
CRED_EXPIRE_S = 10
SKIP_TAG = "SLURM UNAVAILABLE"  # conftest's terminal summary counts skips carrying this tag


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here (not root, packages missing and not installable, a daemon that does not come up)."""


@dataclass(frozen=True)
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    cpus: int
    partition: str = PARTITION

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def cmd(self, *args: str, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; its stdout (raises with stderr on failure)."""
        out = subprocess.run(args, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return out.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Jobs the controller still knows (running, pending, recently finished): id, state, restarts, node."""
        text = self.cmd("scontrol", "show", "job", "--oneliner")
        if "No jobs in the system" in text:
            return []
        return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in text.splitlines() if line]

    def logs(self, lines: int = 30) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            p = self.root / name
            if p.exists():
                parts.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts)

    def stop(self, drain_s: float = 20) -> None:
        """Cancel what is left, let slurmd end the job steps (they outlive a stopped slurmd), stop the daemons."""
        try:
            self.cmd("scancel", f"--partition={self.partition}")
            deadline = time.monotonic() + drain_s
            while self.cmd("squeue", "-h").strip() and time.monotonic() < deadline:
                time.sleep(0.5)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            pass  # the controller is not up: nothing to drain
        for name in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            _kill_pidfile(self.root / name)


def ensure_installed() -> None:
    """Install the Debian packages when they are missing (root only: as in CI, where `.ci/run` installs them)."""
    if all(shutil.which(b) for b in BINARIES):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"{SKIP_TAG}: not root, and {'/'.join(PACKAGES)} are not installed")
    if not shutil.which("apt-get"):
        raise SlurmUnavailable(f"{SKIP_TAG}: no apt-get to install {' '.join(PACKAGES)}")
    install = ["apt-get", "install", "-y", "-qq", *PACKAGES]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    out = subprocess.run(install, capture_output=True, text=True, timeout=900, env=env)
    if out.returncode != 0:  # a fresh container has no package lists yet
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600, env=env)
        out = subprocess.run(install, capture_output=True, text=True, timeout=900, env=env)
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        why = out.stderr.strip()[-500:] or f"not on PATH ({os.environ.get('PATH')})"
        raise SlurmUnavailable(f"{SKIP_TAG}: `{' '.join(install)}` did not provide {', '.join(missing)}: {why}")


def start_cluster(root: Path, timeout: float = 60) -> SlurmCluster:
    """Install if needed, then start munged, slurmctld and slurmd in `root`; returns once the node is idle."""
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"{SKIP_TAG}: the test cluster runs its daemons as root (SlurmUser=root)")
    ensure_installed()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # munged refuses keys and sockets in places others can write
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(exist_ok=True)
        (root / d).chmod(0o700)
    node, cpus = socket.gethostname().split(".")[0], os.cpu_count() or 1
    mem_mb = _mem_total_mb()
    key, sock = root / "munge" / "munge.key", root / "munge" / "munge.socket"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
    conf = root / "slurm.conf"
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf.write_text(
        "\n".join(
            [
                "ClusterName=harness",
                f"SlurmctldHost={node}(127.0.0.1)",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                # cred_expire is also how long Slurm holds a requeued job before it may start again (BeginTime):
                # 11 s instead of the default 121 s, long enough for the old job to be gone from the node
                f"AuthInfo=socket={sock},cred_expire={CRED_EXPIRE_S}",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                # inside a container: no cgroups, no accounting daemon
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "MpiDefault=none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "SchedulerType=sched/builtin",
                "SchedulerParameters=sched_interval=2",  # start a job soon after it becomes eligible (default 60 s)
                "ReturnToService=2",
                "JobRequeue=1",
                "KillWait=2",  # SIGTERM -> SIGKILL grace (default 30 s): a killed job is requeued sooner
                "MinJobAge=600",  # keep finished jobs visible to `scontrol show job` for the assertions
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    cluster = SlurmCluster(root=root, conf=conf, node=node, cpus=cpus)
    env = cluster.env()
    try:
        munged = [
            "munged",
            "--force",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={root / 'munged.pid'}",
            f"--log-file={root / 'munged.log'}",
            f"--seed-file={root / 'munge' / 'munged.seed'}",
        ]
        _start(munged, env, "munged")
        _start(["slurmctld", "-c", "-f", str(conf)], env, "slurmctld")
        _start(["slurmd", "-c", "-N", node, "-f", str(conf)], env, "slurmd")
        _wait_idle(cluster, timeout)
    except BaseException as e:
        logs = cluster.logs()
        cluster.stop()
        if isinstance(e, SlurmUnavailable):
            raise SlurmUnavailable(f"{e}\n{logs}") from None
        raise
    return cluster


def _start(cmd: list[str], env: dict[str, str], name: str) -> None:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SlurmUnavailable(f"{SKIP_TAG}: {name} did not start ({out.returncode}): {out.stderr.strip()[-800:]}")


def _wait_idle(cluster: SlurmCluster, timeout: float) -> None:
    deadline, state = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], env=cluster.env(), capture_output=True, text=True, timeout=30
        )
        state = out.stdout.strip() or out.stderr.strip()
        if out.returncode == 0 and state == "idle":
            return
        time.sleep(0.5)
    raise SlurmUnavailable(f"{SKIP_TAG}: node {cluster.node} not idle after {timeout:.0f} s (sinfo: {state!r})")


def _kill_pidfile(path: Path, wait: float = 10) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10
    return 1024
