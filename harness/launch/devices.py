"""GPUs on one machine: how many this process sees, and the local launchers' refusal to stack jobs on one GPU.

submitit's local executor (`hydra/launcher=local`) gives every job the same devices (`range(gpus_per_node)`) and
starts all jobs at once; joblib's workers (`hydra/launcher=parallel`) see every GPU and put their model on `cuda:0`.
Either way several copies of a model land on GPU 0 at the same time. Neither can give each job its own device,
so both refuse such a sweep before any job starts and name `hydra/launcher=ray` (one GPU per point, the rest
queued); CPU sweeps and single jobs go on as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

RAY_HINT = (
    "use hydra/launcher=ray instead: each point gets a GPU of its own and points beyond the free GPUs wait "
    "(docs/scaling.md)"
)


def visible_gpus(env: Mapping[str, str] = os.environ) -> list[str]:
    """The CUDA devices this process may use: `CUDA_VISIBLE_DEVICES` when set, else every device torch counts."""
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def uses_cuda(model_device: str | None, device_map: object = None) -> bool:
    """Whether a model config puts weights on a GPU (`model.device: cuda[:k]`, or any `device_map`)."""
    return str(model_device or "").startswith("cuda") or bool(device_map)


def check_submitit_local(jobs: int, gpus_per_node: int, visible: int) -> None:
    """`hydra/launcher=local`: with `gpus_per_node >= 1` every job would get GPUs 0..gpus_per_node-1, all at once."""
    if gpus_per_node >= 1 and jobs > 1:
        raise ValueError(
            f"hydra.launcher.gpus_per_node={gpus_per_node}: hydra/launcher=local starts all {jobs} jobs at once and "
            f"gives each the same GPUs (0..{gpus_per_node - 1}), so they would share them; {RAY_HINT}"
        )
    if gpus_per_node > visible:
        raise ValueError(f"hydra.launcher.gpus_per_node={gpus_per_node}: this machine shows {visible} GPU(s)")


def check_joblib(jobs: int, n_jobs: int, visible: int, cuda_jobs: Sequence[bool]) -> None:
    """`hydra/launcher=parallel`: on a CUDA machine, two jobs at once on GPUs would both use `cuda:0`."""
    at_once = min(jobs, n_jobs if n_jobs > 0 else os.cpu_count() or 1)
    if visible >= 1 and at_once > 1 and sum(cuda_jobs) > 1:
        raise ValueError(
            f"hydra.launcher.n_jobs={n_jobs}: hydra/launcher=parallel would run {at_once} GPU jobs at once on this "
            f"machine's {visible} GPU(s), every one on cuda:0 (joblib assigns no device); {RAY_HINT}, or set "
            f"hydra.launcher.n_jobs=1"
        )
