"""Sweeps and shards through real Ray (`hydra/launcher=ray`), compared with the local launcher.

A fixture starts Ray in this test process with made-up GPUs (`ray.init(num_cpus=4, num_gpus=2)` on the CPU: Ray
then hands out GPU ids and sets `CUDA_VISIBLE_DEVICES` as on a GPU node), on the loopback interface with a token of
its own, and stops it afterwards, checking that none of its processes is left. The app connects to it as a user
would connect to a cluster (`hydra.launcher.ray.init.address=<head>`). Where Ray cannot start, the tests skip saying
why (`RAY UNAVAILABLE`). Interruptions do not rely on timing: the run pauses (tests/helpers/paused_run.py) until the
test has killed it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.runner.store import LOCK, SHARD_SAMPLES, read_metrics, read_samples, sample_files
from tests.helpers.app import REPO, app_env
from tests.helpers.compare import PROCESS_LOCAL, comparable, exactly_once, outputs, run_dirs
from tests.helpers.paused_run import PAUSE_DIR, pause_file

# a safety net only (nothing here waits for a moment in time): a sweep takes ~30 s on a quiet 2-core machine, and
# several minutes beside the rest of `make test` and a CPU hog
SWEEP_TIMEOUT_S = 1200
# one worker runs them all (pytest-xdist --dist loadgroup): one Ray per module, and its 2 fake GPUs are theirs
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(2 * SWEEP_TIMEOUT_S)]

STEPS = (4, 8, 16, 48)
POINT = ["model=sudoku6_diffusion", "eval=sudoku6", "eval.num_puzzles=12", "batch_size=2"]
SWEEP = [*POINT, f"sampler.max_steps={','.join(map(str, STEPS))}", "sweep_name=ray_test"]
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # the head and every worker on 127.0.0.1, never on the network
    "RAY_AUTH_MODE": "token",
    "RAY_USAGE_STATS_ENABLED": "0",
}


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head with 4 CPUs and 2 made-up GPUs, in this process; its address. Stopped, all its processes gone."""
    env = {**RAY_ENV, "RAY_AUTH_TOKEN": secrets.token_hex(16)}  # never ~/.ray/auth_token
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # before Ray reads its settings (at import)
    try:
        import ray
    except ImportError as e:
        pytest.skip(f"RAY UNAVAILABLE: {e} (make venv installs ray from requirements.txt)")
    try:
        ctx = ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, object_store_memory=80 * 2**20)
    except Exception as e:  # a machine where Ray's daemons cannot start
        pytest.skip(f"RAY UNAVAILABLE: ray.init failed: {e}")
    procs = [p.process for ps in ray._private.worker._global_node.all_processes.values() for p in ps]
    try:
        yield ctx.address_info["gcs_address"]
    finally:
        ray.shutdown()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        deadline = time.monotonic() + 30
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(p.poll() is not None for p in procs), "a Ray daemon outlived the fixture"


def start(module: str, overrides: list[str], log: Path, **env) -> subprocess.Popen:
    cmd = [sys.executable, "-m", module, *overrides]
    out = log.open("w")
    full_env = {**app_env(), **{k: str(v) for k, v in env.items()}}
    return subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc: subprocess.Popen, log: Path, ok: bool = True, timeout: float = SWEEP_TIMEOUT_S) -> str:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = log.read_text(errors="replace")
    assert (proc.returncode == 0) == ok, f"exit {proc.returncode}\n{text[-5000:]}"
    return text


def on_ray(address: str, *extra: str) -> list[str]:
    return ["hydra/launcher=ray", f"hydra.launcher.ray.init.address={address}", *extra]


def same_results(run_dir: Path, ref: Path, config: bool = True) -> None:
    if config:
        assert (run_dir / "config.yaml").read_text() == (ref / "config.yaml").read_text()
    assert comparable(read_metrics(run_dir)) == comparable(read_metrics(ref)), run_dir.name
    assert {r["sample_id"]: outputs(r) for r in read_samples(run_dir)} == {
        r["sample_id"]: outputs(r) for r in read_samples(ref)
    }


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """The reference: the same 4-point sweep through `hydra/launcher=local` (submitit, one process per point)."""
    root = tmp_path_factory.mktemp("local")
    log = root / "local.log"
    finish(start("harness.run", ["-m", "hydra/launcher=local", *SWEEP, f"hydra.sweep.dir={root / 'sweep'}"], log), log)
    return root / "sweep"


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def test_four_point_sweep_on_two_gpus_matches_the_local_launcher(ray_head, local_sweep, tmp_path):
    log = tmp_path / "ray.log"
    text = finish(
        start("harness.run", ["-m", *on_ray(ray_head), *SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"], log), log
    )
    ours, ref = run_dirs(tmp_path / "sweep"), run_dirs(local_sweep)
    assert sorted(ours) == sorted(ref) and len(ours) == 4
    tasks = {}
    for name, d in ours.items():
        same_results(d, ref[name])
        run, run_ref = read_metrics(d)["run"], read_metrics(ref[name])["run"]
        assert {k: v for k, v in run.items() if k != "ray"} == run_ref and "ray" not in run_ref
        tasks[name] = run["ray"]
    # one GPU per point, the one Ray assigned; never more than 2 points at once (whether two short points do
    # overlap depends on how fast Ray starts them on a busy machine: not asserted)
    for t in tasks.values():
        assert t["cuda_visible_devices"] in ("0", "1") and [t["cuda_visible_devices"]] == t["gpu_ids"]
    intervals = [(t["started_at"], t["finished_at"]) for t in tasks.values()]
    overlap = max_overlap(intervals)
    assert 1 <= overlap <= 2, intervals
    for a in tasks.values():  # points that ran at the same time ran on different GPUs
        for b in tasks.values():
            if a is not b and a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]:
                assert a["cuda_visible_devices"] != b["cuda_visible_devices"]
    assert len({t["task_id"] for t in tasks.values()}) == 4
    print(
        f"max concurrency {overlap}; CUDA_VISIBLE_DEVICES {sorted(t['cuda_visible_devices'] for t in tasks.values())}"
    )

    # the sweep-end summary, drawn by the submitting process: the local launcher's table, timings aside
    assert "[sweep summary]" in text
    s, s_ref = (
        pd.read_csv(d / "summary" / "summary.csv").set_index("run_name").sort_index()
        for d in (tmp_path / "sweep", local_sweep)
    )
    keep = [c for c in s_ref.columns if c != "run_dir" and not PROCESS_LOCAL.search(c)]
    pd.testing.assert_frame_equal(s[keep], s_ref[keep])
    pd.testing.assert_frame_equal(
        *(pd.read_csv(d / "summary" / "fronts.csv") for d in (tmp_path / "sweep", local_sweep))
    )


def wait_for(what: str, predicate, timeout: float = SWEEP_TIMEOUT_S, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        assert proc is None or proc.poll() is None, f"the sweep ended while waiting for {what}"
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def count_lines(run_dir: Path) -> int:
    return sum(f.read_bytes().count(b"\n") for f in sample_files(run_dir))


def kill_writer(run_dir: Path, lock: str = LOCK) -> int:
    """SIGKILL the process that holds the run dir (its pid is in the lock file)."""
    pid = int((run_dir / lock).read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    return pid


def test_point_killed_mid_run_is_completed_by_the_rerun_and_by_rays_retry(ray_head, local_sweep, tmp_path):
    """A point's process killed with SIGKILL mid-run: with `max_retries=0` the sweep fails and its re-run completes
    the point; with Ray's retry (the default) the same sweep completes it. Every sample once, the local results."""
    steps = 16
    pauses = tmp_path / "pause"
    pauses.mkdir()
    pause_file(pauses, steps).touch()
    args = [*POINT, f"sampler.max_steps={steps}", "sweep_name=ray_test", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    paused = {PAUSE_DIR: pauses}
    env_arg = "hydra.launcher.ray.env=[PYTHONPATH,HF_*,WANDB_*,HARNESS_TEST_*]"

    log = tmp_path / "first.log"
    proc = start(
        "tests.helpers.paused_run",
        ["-m", *on_ray(ray_head, "hydra.launcher.ray.max_retries=0", env_arg), *args],
        log,
        **paused,
    )
    run_dir = wait_for(
        "the run dir", lambda: next((p.parent for p in (tmp_path / "sweep").glob("*/samples.jsonl")), None), proc=proc
    )
    wait_for("the first sample", lambda: count_lines(run_dir) >= 1, proc=proc)
    killed = [kill_writer(run_dir)]
    finish(proc, log, ok=False)
    n_first = count_lines(run_dir)

    log = tmp_path / "rerun.log"
    proc = start("tests.helpers.paused_run", ["-m", *on_ray(ray_head, env_arg), *args], log, **paused)
    wait_for("the re-run's next sample", lambda: count_lines(run_dir) > n_first, proc=proc)
    n_second = count_lines(run_dir)
    killed.append(kill_writer(run_dir))  # Ray retries the task: it resumes again
    pause_file(pauses, steps).unlink()
    text = finish(proc, log)
    assert killed[0] != killed[1] and 0 < n_first < n_second < 12, (n_first, n_second)
    assert "[sweep summary]" in text

    (ref,) = (d for d in run_dirs(local_sweep).values() if read_metrics(d)["run"]["sampler"]["max_steps"] == steps)
    exactly_once(run_dir, {r["sample_id"] for r in read_samples(ref)})
    same_results(run_dir, ref)
    print(f"killed after {n_first} and {n_second} of 12 samples; completed by the re-run and by Ray's retry")


def test_two_shards_equal_the_unsharded_run_on_ray_and_as_processes(ray_head, local_sweep, tmp_path):
    steps = 8
    (ref,) = (d for d in run_dirs(local_sweep).values() if read_metrics(d)["run"]["sampler"]["max_steps"] == steps)
    ids = {r["sample_id"] for r in read_samples(ref)}
    point = [*POINT, f"sampler.max_steps={steps}", "sweep_name=ray_test"]

    # on Ray: one task per shard, each on its own GPU; the point's own task holds none
    log = tmp_path / "ray.log"
    finish(
        start("harness.run", ["-m", *on_ray(ray_head), *point, "shards=2", f"hydra.sweep.dir={tmp_path / 'ray'}"], log),
        log,
    )
    (run_dir,) = run_dirs(tmp_path / "ray").values()
    same_results(run_dir, ref, config=False)
    exactly_once(run_dir, ids)
    shards = read_metrics(run_dir)["run"]["shards"]
    assert sorted(s["cuda_visible_devices"] for s in shards) == ["0", "1"]
    assert read_metrics(run_dir)["run"]["ray"]["gpu_ids"] == []
    for i in (0, 1):  # shard i wrote items i, i+2, ... into its own file
        rows = [json.loads(line) for line in (run_dir / SHARD_SAMPLES.format(i)).read_text().splitlines()]
        assert len(rows) == 6 and {r["sample_id"] for r in rows} <= ids

    # as two processes, resuming a run that an unsharded process had half done
    run_dir = tmp_path / "resumed"
    run_dir.mkdir()
    done = (ref / "samples.jsonl").read_text().splitlines(keepends=True)[:5]
    (run_dir / "samples.jsonl").write_text("".join(done))
    (run_dir / "identity.json").write_text((ref / "identity.json").read_text())
    log = tmp_path / "processes.log"
    finish(start("harness.run", [*point, "shards=2", f"hydra.run.dir={run_dir}"], log), log)
    same_results(run_dir, ref, config=False)
    exactly_once(run_dir, ids)
    decoded = sum(1 for i in (0, 1) for _ in (run_dir / SHARD_SAMPLES.format(i)).read_text().splitlines())
    assert decoded == 12 - 5
