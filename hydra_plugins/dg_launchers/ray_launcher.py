"""`hydra/launcher=ray`: every sweep point is a Ray task that reserves its own GPU(s) and CPUs
(harness.launch.ray_launch).

Ray queues the points beyond the free GPUs and sets each task's `CUDA_VISIBLE_DEVICES`; `ray.init` starts Ray on
this machine (`hydra.launcher.ray.init.address=null`) or joins a running cluster (`auto`, `ray://head:10001`). The
task runs Hydra's `run_job` like every launcher, so run dirs, names, resume, identity checks and W&B grouping are a
local run's; the sweep-end summary runs here, in the submitting process. Heavy imports are deferred: Hydra imports
every plugin module at start-up, also for runs that never sweep.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


class RayLauncher(Launcher):
    def __init__(self, ray: Any) -> None:
        from harness.launch.ray_launch import RaySettings

        plain = OmegaConf.to_container(ray, resolve=True) if OmegaConf.is_config(ray) else dict(ray)
        self.settings = RaySettings.parse(plain)  # a bad setting fails before Ray starts
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobStatus, configure_log, filter_overrides, setup_globals

        from harness.launch.ray_launch import run_point

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.settings.connect()  # before Ray is imported here: a Ray started here reads its network setting then
        import ray

        log.info("Ray launcher: %d jobs, sweep output dir %s", len(job_overrides), sweep_dir)
        pending = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = f"job_id_for_{idx}"
                sweep_config.hydra.job.num = idx
            # a sharded point's own task only waits for its shards, which reserve the GPUs (harness.launch.shards)
            options = self.settings.task_options(gpus=int(sweep_config.get("shards") or 1) <= 1)
            log.info("\t#%d : %s (%s)", idx, " ".join(filter_overrides(overrides)), options)
            ref = ray.remote(**options)(run_point).remote(
                self.hydra_context, sweep_config, self.task_function, Singleton.get_state(), os.getcwd()
            )
            pending.append((list(overrides), sweep_config, ref))
        results: list[JobReturn] = []
        try:
            for overrides, sweep_config, ref in pending:
                try:
                    results.append(ray.get(ref))
                except ray.exceptions.RayError as e:  # the task's process died past max_retries, or was cancelled
                    log.error("job %s failed in Ray: %s", " ".join(overrides), e)
                    results.append(JobReturn(overrides, sweep_config, status=JobStatus.FAILED, _return_value=e))
        except KeyboardInterrupt:
            for *_, ref in pending:
                ray.cancel(ref, force=True)
            raise
        return results
