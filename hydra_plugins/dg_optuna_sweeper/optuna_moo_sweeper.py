"""The `optuna_moo` Hydra sweeper: ask Optuna for a trial, run it as one job of the multirun, tell the result.

Hydra finds it by scanning the `hydra_plugins` namespace package (this folder sits beside `harness/` on the path);
its config is `conf/hydra/sweeper/optuna_moo.yaml`. The search logic (space, study, kill-and-resume rules) is in
`harness.analysis.search`; this class only wires it to Hydra's launcher. Heavy imports are deferred: Hydra imports every
plugin module at start-up, also for runs that never sweep.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


class OptunaMooSweeper(Sweeper):
    def __init__(
        self,
        objectives: Any,
        space: Any,
        directions: Any = None,
        n_trials: int = 11,
        n_jobs: int = 1,
        sampler: str = "tpe",
        tpe: Any = None,
        nsga2: Any = None,
        random: Any = None,
        seed: int = 0,
        study_name: str | None = None,
        storage: str | None = None,
        enqueue: Any = None,
        max_failures: int = 3,
    ) -> None:
        from harness.analysis.search import SearchConfigError, SearchSpace, parse_objectives

        self.objectives = parse_objectives(_plain(objectives), _plain(directions))
        self.space = SearchSpace.parse(_plain(space) or {})
        for key, value, ok in (
            ("n_trials", n_trials, isinstance(n_trials, int) and n_trials >= 1),
            ("n_jobs", n_jobs, isinstance(n_jobs, int) and n_jobs >= 1),
            ("seed", seed, isinstance(seed, int) and seed >= 0),
            ("max_failures", max_failures, isinstance(max_failures, int) and max_failures >= 1),
        ):
            if not ok or isinstance(value, bool):
                raise SearchConfigError(f"hydra.sweeper.{key}: must be an integer >= {0 if key == 'seed' else 1}")
        self.n_trials, self.n_jobs, self.seed, self.max_failures = n_trials, n_jobs, seed, max_failures
        self.sampler_name = str(sampler)
        self.sampler = dict(_plain({"tpe": tpe, "nsga2": nsga2, "random": random}.get(self.sampler_name)) or {})
        self.study_name, self.storage = study_name, storage
        self.enqueue = list(_plain(enqueue) or [])
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        from harness.analysis.search import make_sampler

        make_sampler(self.sampler_name, self.seed, **self.sampler)  # a bad sampler setting fails before any run
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        """Ask, launch, tell: batches of `n_jobs` trials until `n_trials` were launched; trials that were running
        when an earlier search stopped are relaunched first (the same overrides, so their run dirs resume)."""
        from harness.analysis.search import describe_study

        study = self._open_study(arguments)
        resumed, count, failures = self._recover(study)
        returns = []
        while True:
            batch, resumed, count = self._next_batch(study, resumed, count)
            if not batch:
                break
            results, failures = self._launch_and_tell(study, arguments, batch, failures)
            returns.append(results)
        print(describe_study(study))
        return returns

    def _open_study(self, arguments: list[str]):
        """The study this sweep dir (or `storage`) holds, after refusing value sweeps among the overrides."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from harness.analysis.search import STUDY_FILE, SearchConfigError, open_study

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        for o in parser.parse_overrides(arguments):
            if o.is_sweep_override():
                raise SearchConfigError(
                    f"{o.input_line}: a sweep over values is not a search override; declare it in hydra.sweeper.space"
                )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        path = Path(self.storage) if self.storage else sweep_dir / STUDY_FILE
        study = open_study(path, self.study_name or sweep_dir.name, self.objectives, self.space)
        log.info("Optuna study %s in %s (optuna-dashboard %s)", study.study_name, path, path)
        return study

    def _recover(self, study) -> tuple[list, int, int]:
        """A fresh study gets the enqueued points; of an earlier search's trials: those launched and still running
        (to relaunch), the number launched, and the failures among them (asked but never launched: failed now)."""
        from optuna.trial import TrialState

        from harness.analysis.search import launched

        trials = study.get_trials(deepcopy=False)
        if not trials:
            for params in self.enqueue:
                study.enqueue_trial(params)
        resumed = [t for t in trials if t.state == TrialState.RUNNING and launched(t)]
        for t in trials:
            if t.state == TrialState.RUNNING and not launched(t):  # asked but killed before it was launched
                study.tell(t.number, state=TrialState.FAIL)
        if resumed:
            log.info(
                "resuming %d trial(s) that were running when the search stopped: %s",
                len(resumed),
                [t.number for t in resumed],
            )
        failures = sum(t.state == TrialState.FAIL and launched(t) for t in trials)
        return resumed, sum(launched(t) for t in trials), failures

    def _next_batch(self, study, resumed: list, count: int) -> tuple[list, list, int]:
        """Up to `n_jobs` (trial, overrides): resumed trials first, then new ones asked of the study."""
        from optuna.trial import Trial

        from harness.analysis.search import OVERRIDES_ATTR, make_sampler, trial_seed

        # a trial launched before the search was killed: the same overrides, so the same run dir (it resumes);
        # Trial(study, id) is how Optuna itself reopens a trial (FrozenTrial keeps the id private)
        batch = [(Trial(study, t._trial_id), list(t.user_attrs[OVERRIDES_ATTR])) for t in resumed[: self.n_jobs]]
        resumed = resumed[self.n_jobs :]
        while len(batch) < self.n_jobs and count < self.n_trials and not resumed:
            number = len(study.get_trials(deepcopy=False))
            study.sampler = make_sampler(self.sampler_name, trial_seed(self.seed, number), **self.sampler)
            trial = study.ask()
            overrides = self.space.suggest(trial)
            trial.set_user_attr(OVERRIDES_ATTR, overrides)  # from here on, a re-run relaunches it
            batch.append((trial, overrides))
            count += 1
        return batch, resumed, count

    def _launch_and_tell(self, study, arguments: list[str], batch: list, failures: int) -> tuple[Any, int]:
        """Launch one batch and tell the study each trial's objectives, or its failure (`max_failures` stops it)."""
        from optuna.trial import TrialState

        from harness.analysis.search import RUN_DIR_ATTR, objectives_of

        jobs = [list(arguments) + overrides for _, overrides in batch]
        try:
            self.validate_batch_is_legal(jobs)  # a space that composes no valid config: stop, trials failed
        except Exception:
            for trial, _ in batch:
                study.tell(trial, state=TrialState.FAIL)
            raise
        results = self.launcher.launch(jobs, initial_job_idx=batch[0][0].number)
        for (trial, overrides), ret in zip(batch, results):
            try:
                if ret.status != JobStatus.COMPLETED:
                    _ = ret.return_value  # re-raises the job's exception (as BasicSweeper does)
                run_dir = str(ret.hydra_cfg.hydra.runtime.output_dir)
                values = objectives_of(run_dir, self.objectives)
            except Exception as e:  # a failed job, or a run without the objectives: a failed trial
                failures += 1
                study.tell(trial, state=TrialState.FAIL)
                log.error("trial %d failed (%s): %r", trial.number, " ".join(overrides), e)
                if failures >= self.max_failures:
                    raise RuntimeError(f"{failures} trials failed (hydra.sweeper.max_failures)") from e
                continue
            trial.set_user_attr(RUN_DIR_ATTR, run_dir)
            study.tell(trial, values)
        return results, failures
