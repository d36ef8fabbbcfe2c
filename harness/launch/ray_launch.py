"""Sweep points and shards as Ray tasks (`hydra/launcher=ray`, `shards=N` under it): settings, connecting, the task.

A plugin of our own (hydra_plugins/dg_launchers) rather than hydra-ray-launcher 1.2.2, because that one pins
cloudpickle < 3 (submitit here runs on 3.x), reserves the same resources for every job (a sharded point's
coordinator must hold no GPU while its shards hold one each), has no "one GPU where the cluster has GPUs" default,
and lets Ray reuse one worker process for the next CPU point (module state, W&B, thread settings carried over).
Here every point runs in a fresh worker process (`max_calls=1`), in the submitting directory, with the submitting
process's HF_* / WANDB_* / ... variables (the job's runtime_env), and its run record names the task, node and
devices (`RayTask`). Ray sets `CUDA_VISIBLE_DEVICES` to the task's own GPUs and queues tasks beyond the free ones.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# what a point's process needs from the submitting environment (imports, hub cache and token, W&B, offline, threads)
DEFAULT_ENV = (
    *("PYTHONPATH", "HF_*", "HUGGING_FACE_*", "TRANSFORMERS_*", "WANDB_*", "TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS"),
)
KEY = "hydra.launcher.ray"


@dataclass(frozen=True)
class RaySettings:
    """`hydra.launcher.ray`, checked: bad values fail before Ray starts, naming the key."""

    init: dict[str, Any] = field(default_factory=dict)  # ray.init keyword arguments; address null: start Ray here
    num_gpus: float | str = "auto"  # per point (and per shard); auto: 1 where the cluster has GPUs, else 0
    num_cpus: float = 1
    max_retries: int = 2  # Ray re-runs a point whose worker process died (it resumes); 0: only a re-run does
    env: tuple[str, ...] = DEFAULT_ENV  # names (fnmatch patterns) of variables handed to every task

    @classmethod
    def parse(cls, cfg: Mapping[str, Any]) -> RaySettings:
        cfg = dict(cfg)
        init = {k: v for k, v in dict(cfg.get("init") or {}).items() if v is not None}
        address = init.get("address")
        if address is not None and not isinstance(address, str):
            raise ValueError(f"{KEY}.init.address: null (start Ray here), auto or ray://host:port, got {address!r}")
        num_gpus, num_cpus, retries = cfg.get("num_gpus", "auto"), cfg.get("num_cpus", 1), cfg.get("max_retries", 2)
        if num_gpus != "auto" and (isinstance(num_gpus, bool) or not isinstance(num_gpus, int | float) or num_gpus < 0):
            raise ValueError(f"{KEY}.num_gpus: auto or a number >= 0 of GPUs per point, got {num_gpus!r}")
        if isinstance(num_cpus, bool) or not isinstance(num_cpus, int | float) or num_cpus < 0:
            raise ValueError(f"{KEY}.num_cpus: a number >= 0 of CPUs per point, got {num_cpus!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"{KEY}.max_retries: an integer >= 0, got {retries!r}")
        env = cfg.get("env", DEFAULT_ENV)
        if not all(isinstance(e, str) for e in env or ()):
            raise ValueError(f"{KEY}.env: a list of variable names or patterns, got {env!r}")
        return cls(init, num_gpus, num_cpus, retries, tuple(env or ()))

    def connect(self) -> None:
        """Start Ray on this machine (address null) or join the cluster at `init.address`; once per process."""
        init = dict(self.init)
        if init.get("address") is None and "ray" not in sys.modules:
            # a Ray of our own serves this machine only: keep it on the loopback interface, off the network (Ray
            # reads this when it is imported)
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        if ray.is_initialized():
            return
        runtime_env = dict(init.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**forwarded_env(self.env), **dict(runtime_env.get("env_vars") or {})}
        t0 = time.monotonic()
        ray.init(runtime_env=runtime_env, **init)
        log.info("Ray: %s in %.1f s, %s", init.get("address") or "started here", time.monotonic() - t0, resources())

    def task_options(self, gpus: bool = True) -> dict[str, Any]:
        """`ray.remote` options of one point or shard; `gpus=False` for a sharded point's coordinator, which only
        waits for its shards."""
        num_gpus = self.num_gpus
        if num_gpus == "auto":
            num_gpus = 1 if resources().get("GPU", 0) > 0 else 0
        return {
            "num_cpus": self.num_cpus,
            "num_gpus": num_gpus if gpus else 0,
            "max_calls": 1,  # a fresh process per task: no state carried from one point to the next
            "max_retries": self.max_retries,
        }


def resources() -> dict[str, float]:
    import ray

    return {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}


def forwarded_env(patterns: tuple[str, ...], env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The submitting process's variables whose names match one of `patterns` (fnmatch)."""
    return {k: v for k, v in env.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def in_ray_task() -> bool:
    """True inside a Ray task (a point or shard of `hydra/launcher=ray`); never imports Ray itself."""
    ray = sys.modules.get("ray")
    return bool(ray and ray.is_initialized() and ray.get_runtime_context().get_task_id())


@dataclass(frozen=True)
class RayTask:
    """The Ray task a run ran in, as recorded in `metrics.json` under `run.ray`."""

    task_id: str
    node_id: str
    node_ip: str
    gpu_ids: list[str]  # what Ray assigned to this task
    cuda_visible_devices: str | None  # what the process saw (Ray sets it to gpu_ids)

    @classmethod
    def current(cls) -> RayTask | None:
        if not in_ray_task():
            return None
        import ray

        ctx = ray.get_runtime_context()
        return cls(
            task_id=ctx.get_task_id(),
            node_id=ctx.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            gpu_ids=[str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )


def run_point(hydra_context, sweep_config, task_function, singleton_state, cwd: str):
    """The body of one point's Ray task: Hydra's own `run_job`, as every launcher calls it, so run dirs, names,
    logs and the job's return are those of a local run. Runs in the submitting directory (relative paths mean the
    same as there: it must exist on every node, see docs/scaling.md)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra.core.utils import run_job, setup_globals

    if not os.path.isdir(cwd):
        raise FileNotFoundError(f"{cwd}: the submitting directory is not on this node; the project must be shared")
    os.chdir(cwd)
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(sweep_config)
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
