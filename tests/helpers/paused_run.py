"""The real app with a pause that the test controls: `python -m tests.helpers.paused_run OVERRIDES` is
`python -m harness.run OVERRIDES`, except that after storing each sample the run waits while the file
`$HARNESS_TEST_PAUSE_DIR/<the run's value of $HARNESS_TEST_PAUSE_KEY>` exists (default key `sampler.max_steps`).

A test that must interrupt a run mid-way (SIGKILL, a Slurm time limit, a preemption) creates the file, waits until
the run has stored what it needs, interrupts it and removes the file: the run is surely mid-way then, however fast
or busy the machine, instead of the test hoping that it still is. Launchers pickle this task function by value
(it is `__main__`), so the pause is installed in whatever process runs the job (a submitit or Slurm job, a Ray task).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness import run as app
from harness.runner.store import ResultStore

PAUSE_DIR, PAUSE_KEY = "HARNESS_TEST_PAUSE_DIR", "HARNESS_TEST_PAUSE_KEY"


def pause_file(pause_dir: str | Path, value: object) -> Path:
    return Path(pause_dir) / str(value)


@hydra.main(config_path="../../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    if pause_dir := os.environ.get(PAUSE_DIR):
        flag = pause_file(pause_dir, OmegaConf.select(cfg, os.environ.get(PAUSE_KEY, "sampler.max_steps")))
        append = ResultStore.append

        def append_then_wait(self, row):
            append(self, row)
            while flag.exists():
                time.sleep(0.1)

        ResultStore.append = append_then_wait
    return app.run(cfg, HydraConfig.get().runtime.output_dir).get("quality")


if __name__ == "__main__":
    main()
