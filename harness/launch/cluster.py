"""Running as a Slurm job (`hydra/launcher=slurm`): what the run record says about the job, and preemption.

Each sweep point runs inside submitit's job process. submitit checkpoints and requeues the job
(`scontrol requeue`) when SIGUSR2 arrives: the signal sbatch asks for `signal_delay_s` before the time limit
(`--signal=USR2@<delay>`; a timeout counts against `max_num_timeout`, a preemption does not). Hydra's launcher is
checkpointable (it resubmits itself with the same overrides), so the requeued job re-runs the same config into the
same run dir and resumes from `samples.jsonl`; the run dir's `flock` died with the old process.

SIGUSR1 is the other signal users and sites preempt with (`scancel --signal=USR1`; Hydra's launcher docs name it),
and Python's default action for it is to end the process: the job would end FAILED with its samples half done.
`route_preemption_signals` hands USR1 to submitit's handler too, so both signals requeue. A job killed outright
(SIGKILL, `scancel` without a signal, a node failure) is not requeued by submitit; re-submitting the same command,
or Slurm's own requeue (`scontrol requeue`, preemption with PreemptMode=REQUEUE), resumes it the same way.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job a run ran in, as recorded in `metrics.json` under `run.slurm`."""

    job_id: str  # SLURM_JOB_ID: this job (each array task has its own)
    array_job_id: str | None  # SLURM_ARRAY_JOB_ID: the sweep's array (the id sbatch printed)
    array_task_id: str | None  # SLURM_ARRAY_TASK_ID: the sweep point
    node: str | None  # SLURMD_NODENAME
    restart_count: int  # SLURM_RESTART_COUNT: how often the job was requeued (0: never)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> SlurmJob | None:
        """The job this process runs in, or None outside Slurm."""
        if "SLURM_JOB_ID" not in env:
            return None
        return cls(
            job_id=env["SLURM_JOB_ID"],
            array_job_id=env.get("SLURM_ARRAY_JOB_ID"),
            array_task_id=env.get("SLURM_ARRAY_TASK_ID"),
            node=env.get("SLURMD_NODENAME"),
            restart_count=int(env.get("SLURM_RESTART_COUNT", "0")),  # unset before the first requeue
        )


def route_preemption_signals() -> bool:
    """Inside a submitit Slurm job, let SIGUSR1 checkpoint and requeue exactly as SIGUSR2 does (see the module
    docstring). True when the handler was installed; a no-op elsewhere or where USR1 already has a handler."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return False
    requeue = signal.getsignal(getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")))
    if not callable(requeue) or signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
        return False
    try:
        signal.signal(signal.SIGUSR1, requeue)
    except ValueError:  # not the main thread (a launcher nested inside the job): leave signals to the main one
        return False
    log.info("Slurm job %s: SIGUSR1 and SIGUSR2 checkpoint and requeue this job", os.environ.get("SLURM_JOB_ID"))
    return True
