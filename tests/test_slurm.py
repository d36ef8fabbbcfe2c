"""Sweeps through a real single-node Slurm (`tests/helpers/slurm_cluster.py`), compared with the local launcher.

The cluster (slurmctld + slurmd + munge, no cgroups) starts once per session, only when a test here is selected;
where it cannot start, the tests skip saying why (`SLURM UNAVAILABLE`). Every job goes through the real scheduler:
`python -m harness.run -m hydra/launcher=slurm` submits one array task per sweep point with sbatch, submitit runs
it under srun, and the shipped Sudoku model decodes on this CPU node (the GPU defaults of `conf/hydra/launcher/
slurm.yaml` overridden). The interrupted sweep shows docs/slurm.md's promise: a job that is preempted (`scancel
--signal=USR1`), that reaches its time limit (`--time=2`, submitit's USR2 10 s before), or that Slurm kills and
requeues outright (`scontrol requeue`: SIGTERM, then SIGKILL, no handler involved) resumes from its samples.jsonl
and ends with every sample exactly once and the same results as the uninterrupted local run. Those jobs pause while
the test holds a pause file (tests/helpers/paused_run.py), so each interruption finds its job mid-run however busy
the machine is.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.runner.store import SAMPLES, read_metrics, read_samples
from tests.helpers.app import REPO, app_env
from tests.helpers.compare import PROCESS_LOCAL, comparable, exactly_once, outputs, run_dirs
from tests.helpers.paused_run import PAUSE_DIR, pause_file
from tests.helpers.slurm_cluster import SlurmCluster, SlurmUnavailable, start_cluster

# one worker runs both (pytest-xdist --dist loadgroup): one cluster per session, and no two sweeps share its 2 CPUs
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

SUDOKU = ["model=sudoku6_diffusion", "eval=sudoku6", "batch_size=1"]
# a quick sweep (about 1 s of decoding per point)
CLEAN = [*SUDOKU, "eval.num_puzzles=20", "sampler.max_steps=8,48", "sweep_name=slurm_clean"]
# the interrupted sweep's points (sampler.max_steps; every canvas runs all its steps, no adaptive stop): their jobs
# pause while the test holds their pause files (tests/helpers/paused_run.py), so the work can stay small
LONG_POINTS = (48, 8)
NUM_LONG = 40
INTERRUPTED = [
    *SUDOKU,
    f"eval.num_puzzles={NUM_LONG}",
    "sampler.adaptive_stop=false",
    f"sampler.max_steps={LONG_POINTS[0]},{LONG_POINTS[1]}",
    "sweep_name=slurm_interrupted",
]
LOCAL = ["hydra/launcher=local"]
PAUSED_APP = "tests.helpers.paused_run"  # harness.run with a pause the test controls
SWEEP_TIMEOUT_S = 360


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    yield cluster
    cluster.stop()


def on_cluster(cluster: SlurmCluster, **launcher) -> list[str]:
    """The user's command line for this cluster: the partition, and no GPU on this CPU node."""
    params = {"partition": cluster.partition, "gpus_per_node": 0, "cpus_per_task": 1, "mem_gb": 1, **launcher}
    return ["hydra/launcher=slurm", *(f"hydra.launcher.{k}={v}" for k, v in params.items())]


@pytest.fixture
def start_sweep(slurm_cluster):
    """Start `python -m harness.run -m ...` in the background; whatever a failing test leaves behind (the sweep's
    process group, its Slurm jobs) is ended afterwards."""
    procs: list[subprocess.Popen] = []

    def start(
        sweep_dir: Path, overrides: list[str], env: dict[str, str], log: Path, module: str = "harness.run"
    ) -> subprocess.Popen:
        cmd = [sys.executable, "-m", module, "-m", *overrides, f"hydra.sweep.dir={sweep_dir}"]
        out = log.open("w")
        procs.append(
            subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        )
        return procs[-1]

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    slurm_cluster.cmd("scancel", f"--partition={slurm_cluster.partition}")  # this test's jobs: the cluster is ours


ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def finish(proc, log: Path, cluster: SlurmCluster | None = None, array_id: str | None = None):
    """Wait for a sweep. Without Slurm accounting (`sacct`) submitit cannot see a job that ended without a result,
    so the submitting process would wait for ever: watch the array's jobs here and stop at the first that failed."""
    deadline, failed = time.monotonic() + SWEEP_TIMEOUT_S, []
    while proc.poll() is None and time.monotonic() < deadline and not failed:
        time.sleep(1)
        if cluster and array_id:
            failed = [j for j in cluster.jobs() if j.get("ArrayJobId") == array_id and j["JobState"] in ENDED_BADLY]
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    if proc.returncode != 0 or failed:
        jobs = cluster.cmd("scontrol", "show", "job") if cluster else ""
        logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in log.parent.rglob("*_log.*"))
        raise AssertionError(
            f"sweep exit {proc.returncode}\n{log.read_text()[-4000:]}\n{jobs}\n{logs}\n{cluster and cluster.logs()}"
        )


def cluster_env(cluster: SlurmCluster, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**app_env(), **cluster.env(), "HOME": str(tmp_path / "home")}


def assert_same_runs(slurm_sweep: Path, local_sweep: Path) -> dict[str, Path]:
    ours, ref = run_dirs(slurm_sweep), run_dirs(local_sweep)
    assert sorted(ours) == sorted(ref) and len(ours) == 2
    for name, d in ours.items():
        assert (d / "config.yaml").read_text() == (ref[name] / "config.yaml").read_text()
        m, m_ref = read_metrics(d), read_metrics(ref[name])
        assert comparable(m) == comparable(m_ref), name
        assert {k: v for k, v in m["run"].items() if k != "slurm"} == m_ref["run"]
        rows = {r["sample_id"]: outputs(r) for r in read_samples(d)}
        assert rows == {r["sample_id"]: outputs(r) for r in read_samples(ref[name])}, name
    return ours


def test_two_point_sweep_through_slurm_matches_the_local_launcher(slurm_cluster, start_sweep, tmp_path):
    env = cluster_env(slurm_cluster, tmp_path)
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    t0 = time.monotonic()
    local_proc = start_sweep(local, [*LOCAL, *CLEAN], env, tmp_path / "local.log")  # side by side
    site = on_cluster(slurm_cluster, account="myproj", setup="['echo harness-setup-line-ran']")
    slurm_proc = start_sweep(slurm, [*site, *CLEAN], env, tmp_path / "slurm.log")
    finish(slurm_proc, tmp_path / "slurm.log", slurm_cluster)
    t_slurm = time.monotonic() - t0
    finish(local_proc, tmp_path / "local.log")
    print(f"slurm sweep {t_slurm:.1f} s (both sweeps {time.monotonic() - t0:.1f} s)")

    # one sbatch array, one task per sweep point, as submitit wrote it for the real scheduler
    (script,) = (slurm / ".submitit").glob("*/*_submission.sh")
    text = script.read_text()
    for line in (
        "#SBATCH --array=0-1%2",
        f"#SBATCH --partition={slurm_cluster.partition}",
        "#SBATCH --account=myproj",
        "#SBATCH --gpus-per-node=0",
        "#SBATCH --time=240",
        "#SBATCH --signal=USR2@120",
        "echo harness-setup-line-ran",
    ):
        assert line in text, text
    array_id = script.parent.name
    for task in ("0", "1"):  # the scheduler ran them as asked, and the setup line ran in each job
        job = next(j for j in slurm_cluster.jobs() if j.get("ArrayJobId") == array_id and j.get("ArrayTaskId") == task)
        assert (job["JobState"], job["Account"], job["Partition"]) == ("COMPLETED", "myproj", slurm_cluster.partition)
        out = slurm / ".submitit" / f"{array_id}_{task}" / f"{array_id}_{task}_0_log.out"
        assert "harness-setup-line-ran" in out.read_text()

    runs = assert_same_runs(slurm, local)
    jobs = sorted((read_metrics(d)["run"]["slurm"] for d in runs.values()), key=lambda j: j["array_task_id"])
    assert [j["array_task_id"] for j in jobs] == ["0", "1"]
    assert {j["array_job_id"] for j in jobs} == {array_id}
    assert {j["node"] for j in jobs} == {slurm_cluster.node}
    assert len({j["job_id"] for j in jobs}) == 2 and {j["restart_count"] for j in jobs} == {0}
    assert "slurm" not in read_metrics(next(iter(run_dirs(local).values())))["run"]  # not a Slurm job

    # the sweep-end summary: the same table (timings aside), fronts and plots
    s, s_ref = (pd.read_csv(d / "summary" / "summary.csv").set_index("run_name").sort_index() for d in (slurm, local))
    keep = [c for c in s_ref.columns if c != "run_dir" and not PROCESS_LOCAL.search(c)]
    pd.testing.assert_frame_equal(s[keep], s_ref[keep])
    fronts, fronts_ref = (pd.read_csv(d / "summary" / "fronts.csv") for d in (slurm, local))
    pd.testing.assert_frame_equal(fronts, fronts_ref)
    files = {p.relative_to(slurm / "summary") for p in (slurm / "summary").rglob("*.png")}
    assert files == {p.relative_to(local / "summary") for p in (local / "summary").rglob("*.png")}
    (tpf_plot,) = (p for p in files if p.name.startswith("pareto_") and p.name.endswith("_tpf.png"))
    assert (slurm / "summary" / tpf_plot).read_bytes() == (local / "summary" / tpf_plot).read_bytes()


def wait_for(what: str, predicate, timeout: float = 300, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_preempted_timed_out_and_killed_jobs_resume_exactly_once(slurm_cluster, start_sweep, tmp_path):
    """Point 0 reaches its 2-minute time limit (submitit catches USR2 and requeues), then is preempted with
    `scancel --signal=USR1` mid-run (the harness routes USR1 to the same handler); point 1 is killed and requeued
    by Slurm itself (`scontrol requeue`). Both end with every sample once and the local run's results.

    No step depends on the machine's speed: each point's jobs pause after every stored sample while the test holds
    its pause file (tests/helpers/paused_run.py), so a point is surely mid-run when it is interrupted, and it goes on
    only once the test lets it. After its first interruption a point's time limit is raised to 30 minutes, so no
    later job of it meets a time-limit signal (Slurm may send that up to 60 s early, possibly while a requeued job
    is still starting on a busy machine, before submitit's handler is installed: a FAILED task, exit 140)."""
    env = {**cluster_env(slurm_cluster, tmp_path), PAUSE_DIR: str(tmp_path / "pause")}
    pauses = {steps: pause_file(tmp_path / "pause", steps) for steps in LONG_POINTS}
    (tmp_path / "pause").mkdir()
    for flag in pauses.values():
        flag.touch()
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    # the USR2 comes 10 s before the 2-minute limit, checked every 30 s: 80-110 s into point 0's first job, far
    # later than it takes to start and store a sample even on a loaded machine
    launcher = on_cluster(slurm_cluster, timeout_min=2, signal_delay_s=10)
    t0 = time.monotonic()
    local_proc = start_sweep(local, [*LOCAL, *INTERRUPTED], env, tmp_path / "local.log")
    slurm_proc = start_sweep(slurm, [*launcher, *INTERRUPTED], env, tmp_path / "slurm.log", module=PAUSED_APP)

    def array_job():
        names = (p.name for p in (slurm / ".submitit").glob("*_0"))
        return next((m.group(1) for n in names if (m := re.fullmatch(r"(\d+)_0", n))), None)

    def task_dir(max_steps: int):
        def find():
            for cfg in slurm.glob("*/config.yaml"):
                if OmegaConf.load(cfg).sampler.max_steps == max_steps:
                    return cfg.parent

        return wait_for(f"the run dir of max_steps={max_steps}", find)

    array_id = wait_for("the array job", array_job)
    long_dir, short_dir = task_dir(LONG_POINTS[0]), task_dir(LONG_POINTS[1])
    long_log = slurm / ".submitit" / f"{array_id}_0" / f"{array_id}_0_0_log.out"
    short_log = slurm / ".submitit" / f"{array_id}_1" / f"{array_id}_1_0_log.out"

    def no_more_time_limits(task: int) -> None:
        slurm_cluster.cmd("scontrol", "update", f"JobId={array_id}_{task}", "TimeLimit=30")

    # point 1: paused after its first sample; Slurm kills the job (SIGTERM, SIGKILL after KillWait) and queues it
    # again; it goes on once its second job has started (the first one is gone then)
    n_killed = wait_for("point 1's first sample", lambda: count_lines(short_dir / SAMPLES))
    no_more_time_limits(1)
    slurm_cluster.cmd("scontrol", "requeue", f"{array_id}_1")

    # point 0: paused after its first sample until its time limit; after the requeue, paused again after one more
    # sample, and then preempted
    n_timeout = wait_for("point 0's first sample", lambda: count_lines(long_dir / SAMPLES))
    wait_for("point 0's time-limit signal", lambda: "Caught signal SIGUSR2" in log_text(long_log), timeout=240)
    no_more_time_limits(0)
    wait_for("point 1's requeued job", lambda: log_text(short_log).count("Starting with JobEnvironment") >= 2)
    pauses[LONG_POINTS[1]].unlink()
    n_preempt = wait_for(
        "point 0 to decode again after its requeue",
        lambda: (n := count_lines(long_dir / SAMPLES)) > n_timeout and n,
        timeout=240,
    )
    slurm_cluster.cmd("scancel", "--signal=USR1", f"{array_id}_0")
    wait_for("point 0's preemption signal", lambda: "Caught signal SIGUSR1" in log_text(long_log))
    pauses[LONG_POINTS[0]].unlink()
    finish(slurm_proc, tmp_path / "slurm.log", slurm_cluster, array_id)
    t_slurm = time.monotonic() - t0
    finish(local_proc, tmp_path / "local.log")
    print(f"slurm sweep {t_slurm:.1f} s (both sweeps {time.monotonic() - t0:.1f} s)")

    runs = assert_same_runs(slurm, local)
    ids = {r["sample_id"] for r in read_samples(next(iter(run_dirs(local).values())))}
    assert len(ids) == NUM_LONG
    for d in runs.values():
        exactly_once(d, ids)

    # each interruption happened mid-run and was followed by a requeued job that finished the run
    assert 1 <= n_killed < len(ids) and 0 < n_timeout < n_preempt < len(ids), (n_killed, n_timeout, n_preempt)
    print(f"interrupted after {n_killed} (scontrol requeue), {n_timeout} (time limit), {n_preempt} (USR1) samples")
    long_text, short_text = log_text(long_log), log_text(short_log)
    assert "Caught signal SIGUSR2" in long_text and "Caught signal SIGUSR1" in long_text
    assert long_text.count("Requeued job") >= 2 and long_text.count("Starting with JobEnvironment") >= 3
    killed = short_text.split("Starting with JobEnvironment")[1]  # point 1's first job: Slurm's SIGTERM, no requeue
    assert "Bypassing signal SIGTERM" in killed and "Caught signal" not in killed and "Requeued job" not in killed
    assert read_metrics(long_dir)["run"]["slurm"]["restart_count"] >= 2
    assert read_metrics(short_dir)["run"]["slurm"]["restart_count"] >= 1
