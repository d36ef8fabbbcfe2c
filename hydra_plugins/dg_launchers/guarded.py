"""`hydra/launcher=local` (submitit) and `hydra/launcher=parallel` (joblib) that refuse to stack GPU jobs on one
GPU before any job starts (harness.launch.devices says why and names `hydra/launcher=ray`); otherwise unchanged."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher


class GuardedLocalLauncher(LocalLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from harness.launch.devices import check_submitit_local, visible_gpus

        gpus = int(self.params.get("gpus_per_node") or 0)
        check_submitit_local(len(job_overrides), gpus, len(visible_gpus()) if gpus else 0)
        return super().launch(job_overrides, initial_job_idx)


class GuardedJoblibLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from harness.launch.devices import check_joblib, uses_cuda, visible_gpus

        visible = len(visible_gpus())
        if visible and len(job_overrides) > 1:
            cuda = []
            for overrides in job_overrides:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                model = cfg.get("model") or {}
                cuda.append(uses_cuda(model.get("device"), model.get("device_map")))
            check_joblib(len(job_overrides), int(self.joblib.get("n_jobs") or 1), visible, cuda)
        return super().launch(job_overrides, initial_job_idx)
