"""Run the Hydra app (`python -m harness.run`) in a real subprocess, from the repo root, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import sandbox_guard

REPO = Path(__file__).resolve().parents[2]  # the repo root, whatever the cwd of the test run


def app_env() -> dict[str, str]:
    """This environment, offline, with the repo importable (and, under a test, the sandbox guard's site folder)."""
    guard = [str(sandbox_guard.SITE_DIR)] if sandbox_guard.LOG_VAR in os.environ else []
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *guard]),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "HYDRA_FULL_ERROR": "0",
    }


def run_app(*overrides, cwd=REPO, check=True, timeout=300):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run", *overrides],
        cwd=cwd,
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr[-3000:])
    return proc


def compose_app(*overrides: str, with_hydra: bool = False):
    """The app's composed config (`conf/config.yaml` + overrides), in-process, as `python -m harness.run` sees it;
    `with_hydra` keeps the `hydra` node (launcher, sweeper, run/sweep dirs)."""
    from hydra import compose, initialize_config_dir

    from harness.runner.configs import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=with_hydra)
