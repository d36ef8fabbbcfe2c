"""Launcher configs and the sweep-end callback, through real Hydra multiruns in real subprocesses.

- a throwaway Hydra app (tmp_path) using the repo's launcher/logger YAML: two jobs through submitit_local,
  each logging a W&B run offline (mode auto, no key), then `SweepSummary` aggregates, plots and logs a
  summary run; everything is read back from disk;
- the repo's SLURM launcher YAML composed with its cluster defaults (real submissions: tests/test_slurm.py);
- the real app (`python -m harness.run`) swept through submitit_local with the tiny model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from harness.runner.store import read_metrics, read_samples
from tests.helpers.wandb_offline import find_offline_runs, read_offline_run

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

APP = """
import os
import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import OmegaConf
from contract.records import GenerationResult, decode_metrics
from harness.runner.store import ResultStore


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    run_dir = HydraConfig.get().runtime.output_dir
    logger = instantiate(cfg.logger)
    logger.start(run_name=cfg.run_name, group=str(cfg.sweep_name), config=OmegaConf.to_container(cfg, resolve=True),
                 run_dir=run_dir)
    store, rows, nfe = ResultStore(run_dir), [], max(1, int(1 / cfg.bound))
    for i in range(3):
        res = GenerationResult(sample_id=f"q{i}", token_ids=list(range(16)), text=f"answer {i}", nfe=nfe,
                               steps_per_canvas=[nfe], wall_time_s=0.1)
        row = {**res.to_dict(), "meta": {}, "correct": float(i < (3 if cfg.bound < 0.3 else 1))}
        store.append(row)
        rows.append(row)
    metrics = {**decode_metrics(rows), "quality": sum(r["correct"] for r in rows) / 3, "pid": os.getpid(),
               "run": {"run_name": cfg.run_name, "label": "diffusion", "model": "toy", "eval": "toy_eval",
                       "sampler": {"name": "entropy_bound", "entropy_bound": cfg.bound, "max_steps": 16},
                       "seed": 0}}
    store.write_metrics(metrics)
    logger.finish(metrics, rows)


if __name__ == "__main__":
    main()
"""

APP_CONFIG = """
defaults:
  - logger: wandb
  - _self_
bound: 0.1
sweep_name: toy_sweep
run_name: b${bound}
hydra:
  sweep:
    dir: sweeps/${sweep_name}
    subdir: ${run_name}
  callbacks:
    sweep_summary:
      _target_: harness.tracking.callbacks.SweepSummary
      group: ${sweep_name}
"""


def offline_env(home: Path) -> dict[str, str]:
    """No W&B key anywhere (env or netrc), so mode=auto must choose offline; the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "PYTHONPATH": str(REPO)}


def make_app(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    (app / "conf").mkdir(parents=True)
    (app / "app.py").write_text(APP)
    (app / "conf" / "config.yaml").write_text(APP_CONFIG)
    shutil.copytree(CONF / "logger", app / "conf" / "logger")
    shutil.copytree(CONF / "hydra" / "launcher", app / "conf" / "hydra" / "launcher")
    return app


@pytest.mark.slow
def test_submitit_local_sweep_with_wandb_and_sweep_summary(tmp_path):
    app = make_app(tmp_path)
    out = subprocess.run(
        [sys.executable, "app.py", "-m", "hydra/launcher=local", "bound=0.1,0.5"],
        cwd=app,
        env=offline_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sweep = app / "sweeps" / "toy_sweep"
    assert sorted(p.name for p in (sweep / ".submitit").iterdir() if p.name != "%j")  # submitit job folders

    # one process per job, neither of them this one
    pids = {read_metrics(sweep / r)["pid"] for r in ("b0.1", "b0.5")}
    assert len(pids) == 2 and os.getpid() not in pids

    # one offline W&B run per job: identity, config, summary metrics and the samples table
    for name, quality in (("b0.1", 1.0), ("b0.5", 1 / 3)):
        (path,) = find_offline_runs(sweep / name / "wandb")
        run = read_offline_run(path)
        assert (run.name, run.group, run.job_type, run.project) == (name, "toy_sweep", "eval", "diffusiongemma-harness")
        assert run.config["run_name"] == name and run.config["logger"]["mode"] == "auto"
        metrics = read_metrics(sweep / name)
        assert run.summary["quality"] == pytest.approx(quality) == pytest.approx(metrics["quality"])
        assert run.summary["tpf"] == pytest.approx(metrics["tpf"]) and "run" not in run.summary
        table = run.table("samples")
        assert list(table.columns) == [
            "sample_id",
            "text",
            "correct",
            "format_ok",
            "tpf",
            "nfe",
            "num_tokens",
            "finished_by",
            "ttft_s",
            "latency_s",
            "ttfv_s",
            "revised_tokens",
            "corr_changed",
            "corr_repairs",
            "corr_breaks",
        ]
        assert table["corr_changed"].isna().all()  # the toy app records no trajectory: not measured, not 0
        rows = read_samples(sweep / name)
        assert table["sample_id"].tolist() == [r["sample_id"] for r in rows]
        assert table["correct"].tolist() == [r["correct"] for r in rows]

    # sweep end: table + plots under the sweep dir, printed, and a summary run in the same group
    summary = pd.read_csv(sweep / "summary" / "summary.csv")
    assert sorted(summary["run_name"]) == ["b0.1", "b0.5"]
    assert summary.set_index("run_name").loc["b0.5", "tpf"] == pytest.approx(8.0)
    assert summary["on_front"].all()
    for f in ("pareto_toy_eval_tpf.png", "pareto_toy_eval_tokens_per_second.svg", "runs/b0.5_steps.png"):
        assert (sweep / "summary" / f).stat().st_size > 1000
    assert "[sweep summary]" in out.stdout and "Area under the quality-vs-TPF front" in out.stdout
    (path,) = find_offline_runs(sweep / "summary" / "wandb")
    srun = read_offline_run(path)
    assert (srun.name, srun.group, srun.job_type) == ("toy_sweep-summary", "toy_sweep", "sweep_summary")
    runs = srun.table("runs")
    assert sorted(runs["run_name"]) == ["b0.1", "b0.5"] and "front_area" in runs and "aup_d3llm" in runs
    assert srun.table("fronts")["front_area"].iloc[0] == pytest.approx(summary["front_area"].iloc[0])
    for key in ("pareto/pareto_toy_eval_tpf", "pareto/pareto_toy_eval_tokens_per_second"):
        assert srun.media(key).read_bytes()[:4] == b"\x89PNG"
    # the front as native W&B charts, from a table with the knob columns; a step histogram per run
    charts = srun.config["_wandb"]["visualize"]
    assert {"pareto/toy_eval/quality_vs_tpf", "pareto/toy_eval/fronts_vs_tpf"} <= set(charts)
    points = srun.table("pareto/toy_eval/quality_vs_tpf_table").set_index("run_name")
    assert points.loc["b0.5", "entropy_bound"] == 0.5 and points.loc["b0.5", "family"] == "entropy_bound"
    assert srun.summary["steps/b0.5"]["_type"] == "histogram"


def test_slurm_launcher_yaml_has_cluster_defaults(tmp_path):
    """The repo's `hydra/launcher=slurm` composes into Hydra's SLURM launcher with the defaults docs/slurm.md promises
    for a GPU cluster. Submitting through it, and the requeue behaviour, run on a real Slurm in tests/test_slurm.py."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import instantiate

    app = make_app(tmp_path)
    with initialize_config_dir(str(app / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            return_hydra_config=True,
            overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu", f"hydra.sweep.dir={tmp_path}/sweep"],
        )
    HydraConfig.instance().set_config(cfg)
    launcher = instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    params = launcher.params
    assert {k: params[k] for k in ("gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "partition")} == {
        "gpus_per_node": 1,
        "cpus_per_task": 8,
        "mem_gb": 64,
        "timeout_min": 240,
        "partition": "gpu",
    }
    # requeued on its time limit up to 3 times; submitit's signal (USR2) comes 120 s before the limit
    assert (params["max_num_timeout"], params["signal_delay_s"]) == (3, 120)


def test_joblib_launcher_yaml_composes(tmp_path):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(make_app(tmp_path) / "conf"), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True, overrides=["hydra/launcher=parallel"])
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2
    with initialize_config_dir(str(make_app(tmp_path / "b") / "conf"), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True, overrides=["hydra/launcher=local"])
    assert cfg.hydra.launcher._target_.endswith("LocalLauncher") and cfg.hydra.launcher.gpus_per_node == 0


@pytest.mark.slow
def test_real_app_two_job_sweep_through_submitit_local(tmp_path):
    tiny = REPO / "outputs" / "tiny" / "diffusion" / "config.json"
    assert tiny.exists(), "the configs' tiny checkpoint is missing: run `make tiny-models` (make test does)"
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "harness.run",
        "-m",
        "hydra/launcher=local",
        "model=tiny_diffusion",
        "eval=prompts",
        "seed=0,1",
        "eval.limit=1",
        "eval.max_new_tokens=8",
        "sampler.max_steps=4",
        "sampler.capture_trajectory=true",
        "sweep_name=launcher_test",
        f"hydra.sweep.dir={sweep}",
    ]  # the sweep-summary callback is in conf/hydra
    out = subprocess.run(cmd, cwd=REPO, env=offline_env(tmp_path / "home"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/metrics.json"))
    assert len(runs) == 2
    for r in runs:
        m = read_metrics(r)
        assert m["run"]["label"] == "diffusion" and m["run"]["sampler"]["max_steps"] == 4
        assert (r / "config.yaml").exists() and (r / ".hydra" / "config.yaml").exists()
    summary = pd.read_csv(sweep / "summary" / "summary.csv")
    assert sorted(summary["seed"]) == [0, 1] and summary["consistent"].all()
    assert (summary["sampler.max_steps"] == 4).all()
    figs = {p.name for p in (sweep / "summary" / "runs").iterdir()}
    assert sum(n.endswith("_steps.png") for n in figs) == 2
    assert sum("_canvas_" in n and n.endswith(".png") for n in figs) == 2  # trajectories were captured
    assert textwrap.dedent("[sweep summary]") in out.stdout


def test_local_launchers_refuse_to_stack_gpu_jobs_on_one_gpu():
    """With fake device counts: submitit's local executor would give every job GPUs 0..g-1 at once, joblib every
    worker cuda:0; both refuse before anything runs and name hydra/launcher=ray. CPU sweeps and single jobs pass."""
    from harness.launch.devices import check_joblib, check_submitit_local, uses_cuda, visible_gpus

    check_submitit_local(jobs=4, gpus_per_node=0, visible=8)  # a CPU sweep on a GPU machine
    check_submitit_local(jobs=1, gpus_per_node=2, visible=8)  # one job may have two GPUs
    with pytest.raises(ValueError, match=r"gpus_per_node=1.*all 4 jobs at once.*hydra/launcher=ray"):
        check_submitit_local(jobs=4, gpus_per_node=1, visible=8)
    with pytest.raises(ValueError, match=r"gpus_per_node=2: this machine shows 1 GPU"):
        check_submitit_local(jobs=1, gpus_per_node=2, visible=1)
    check_joblib(jobs=4, n_jobs=2, visible=0, cuda_jobs=[True] * 4)  # no GPU: nothing to share
    check_joblib(jobs=4, n_jobs=2, visible=8, cuda_jobs=[False] * 4)  # CPU models on a GPU machine
    check_joblib(jobs=4, n_jobs=1, visible=8, cuda_jobs=[True] * 4)  # one at a time
    with pytest.raises(ValueError, match=r"n_jobs=2: .*2 GPU jobs at once.*8 GPU\(s\).*cuda:0.*hydra/launcher=ray"):
        check_joblib(jobs=4, n_jobs=2, visible=8, cuda_jobs=[True] * 4)
    assert (
        visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"] and visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    )
    assert uses_cuda("cuda") and uses_cuda("cuda:1") and uses_cuda("cpu", "auto") and not uses_cuda("cpu")


@pytest.mark.slow
def test_launcher_yamls_compose_into_the_guarded_launchers_and_ray():
    from tests.helpers.app import compose_app

    for name, target in (("local", "GuardedLocalLauncher"), ("parallel", "GuardedJoblibLauncher")):
        cfg = compose_app(f"hydra/launcher={name}", with_hydra=True)
        assert cfg.hydra.launcher._target_.endswith(target)
    cfg = compose_app("hydra/launcher=ray", "hydra.launcher.ray.init.address=auto", with_hydra=True)
    from harness.launch.ray_launch import RaySettings

    s = RaySettings.parse(cfg.hydra.launcher.ray)
    assert (s.num_gpus, s.num_cpus, s.max_retries, s.init["address"]) == ("auto", 1, 2, "auto")
    assert "HF_*" in s.env and "WANDB_*" in s.env and "num_cpus" not in s.init  # nulls are not passed to ray.init
    for key, bad, msg in (("num_gpus", -1, "num_gpus: auto or a number"), ("max_retries", 1.5, "max_retries")):
        with pytest.raises(ValueError, match=f"hydra.launcher.ray.{msg}"):
            RaySettings.parse({**cfg.hydra.launcher.ray, key: bad})


def test_sharded_run_dir_is_read_merged(tmp_path):
    """Shard files and samples.jsonl are one run to every reader (first row per id wins); each store writes its own."""
    from harness.runner.store import SHARD_SAMPLES, ResultStore, RunDirBusy, read_samples, sample_files

    row = {"num_tokens": 1, "nfe": 1, "wall_time_s": 0.1}
    main = ResultStore(tmp_path)
    main.append({**row, "sample_id": "a"})
    shard = ResultStore(tmp_path, shard=1)  # its own lock beside the run dir's
    shard.append({**row, "sample_id": "b"})
    with (tmp_path / SHARD_SAMPLES.format(1)).open("a") as f:
        f.write('{"sample_id": "c", "nfe"')  # a torn last line in the shard's file
    with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
        ResultStore(tmp_path, shard=1)
    assert [p.name for p in sample_files(tmp_path)] == ["samples.jsonl", "samples.shard-1.jsonl"]
    assert sorted(r["sample_id"] for r in read_samples(tmp_path)) == ["a", "b"]
    assert sorted(main.load()) == ["a", "b"]  # another store's file is read, never rewritten
    assert (tmp_path / SHARD_SAMPLES.format(1)).read_text().endswith('"nfe"')
    assert sorted(shard.load()) == ["a", "b"] and list(tmp_path.glob("samples.shard-1.jsonl.bad-*"))
    main.reset()
    assert sample_files(tmp_path) == []
