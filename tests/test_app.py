"""The Hydra app end to end, in real subprocesses: fail-fast config errors, run dirs, multirun, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.app import REPO, run_app
from tests.helpers.app import app_env as _env

pytestmark = pytest.mark.slow  # every test runs the app in subprocesses


@pytest.fixture(scope="module")
def app_args(tiny_diffusion_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("app")
    prompts = out / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"prompt number {i}"}) + "\n" for i in range(10)))
    return out, [
        f"model.path={tiny_diffusion_dir}",
        f"eval.path={prompts}",
        "eval.max_new_tokens=16",
        "sampler.max_steps=3",
        f"hydra.run.dir={out}/run",
        f"hydra.sweep.dir={out}/sweep",
    ]


@pytest.mark.parametrize(
    "override,key",
    [
        ("sampler.entropy_bound=-1", "sampler.entropy_bound"),
        ("sampler.entropy_bound=0", "sampler.entropy_bound"),
        ("sampler.t_max=0.1", "sampler.t_max"),
        ("sampler.max_steps=0", "sampler.max_steps"),
        ("sampler.max_steps=abc", "sampler.max_steps"),
        ("sampler.stepz=3", "stepz"),
        ("sampler=nonexistent", "nonexistent"),
        ("model.path=no/such/dir", "model.path"),
        ("model.path=", "model.path"),
        ("eval.path=missing.jsonl", "eval.path"),
        ("resume=no", "resume"),
        ("seed=1.5", "seed"),
        ("shards=0", "shards"),
        ("batch_size=0", "batch_size"),
        ("batch_size=1.5", "batch_size"),
        ("eval.stop_strings=['']", "eval.stop_strings"),
        ("eval.max_new_tokens=0", "eval.max_new_tokens"),
        ("sampler.t_max=inf", "sampler.t_max"),
    ],
)
def test_bad_config_fails_before_model_loads(override, key, tmp_path):
    t0 = time.perf_counter()
    proc = run_app(override, f"hydra.run.dir={tmp_path}/run", check=False, timeout=120)
    assert proc.returncode != 0
    assert key in proc.stderr
    assert "Loading weights" not in proc.stderr  # nothing was loaded
    assert not (tmp_path / "run" / "samples.jsonl").exists()
    assert time.perf_counter() - t0 < 60  # generous bound for a loaded CI box; ~1 s when idle


def test_single_run_writes_config_samples_metrics(app_args):
    out, args = app_args
    run_app(*args)
    run_dir = out / "run"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("quality", "tpf", "nfe", "tokens_per_second", "num_samples"):
        assert key in metrics
    assert metrics["num_samples"] == 10 and metrics["run"]["label"] == "diffusion"
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == sorted(f"p{i}" for i in range(10))
    assert metrics["tpf"] == pytest.approx(sum(r["num_tokens"] for r in rows) / sum(r["nfe"] for r in rows))
    assert "max_steps: 3" in (run_dir / "config.yaml").read_text()


def test_multirun_names_run_dirs_from_config(app_args):
    out, args = app_args
    run_app("-m", *args, "sampler.entropy_bound=0.05,0.5", "eval.limit=2")
    dirs = sorted(p.name for p in (out / "sweep").iterdir() if (p / "metrics.json").exists())
    assert len(dirs) == 2 and any("b0.05" in d for d in dirs) and any("b0.5" in d for d in dirs)


def test_killed_run_resumes_exactly_once_with_same_metrics(app_args, tmp_path):
    out, args = app_args
    base = [a for a in args if not a.startswith("hydra.run.dir")] + ["batch_size=1"]
    run_app(*base, f"hydra.run.dir={tmp_path}/clean")
    clean = json.loads((tmp_path / "clean" / "metrics.json").read_text())

    crash_dir = tmp_path / "crash"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run", *base, f"hydra.run.dir={crash_dir}"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    samples = crash_dir / "samples.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not samples.exists() or len(samples.read_text().splitlines()) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = len(samples.read_text().splitlines())
    assert 3 <= partial < 10 and not (crash_dir / "metrics.json").exists()

    run_app(*base, f"hydra.run.dir={crash_dir}")  # same config, same dir: resumes
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == sorted(f"p{i}" for i in range(10))  # each exactly once
    resumed = json.loads((crash_dir / "metrics.json").read_text())
    for key in ("num_tokens", "nfe", "tpf", "num_samples", "mean_steps_per_canvas"):
        assert resumed[key] == clean[key]
    clean_rows = {
        json.loads(line)["sample_id"]: json.loads(line)["token_ids"]
        for line in (tmp_path / "clean" / "samples.jsonl").read_text().splitlines()
    }
    assert {r["sample_id"]: r["token_ids"] for r in rows} == clean_rows
