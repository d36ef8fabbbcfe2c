"""Multi-objective sampler search on Optuna: the search space, the persistent study, a trial's objectives.

The Hydra sweeper `hydra/sweeper=optuna_moo` (`hydra_plugins/dg_optuna_sweeper/`) drives this module with
Optuna's ask-and-tell interface: it asks a trial, turns its parameters into ordinary command-line overrides
(`SearchSpace.suggest`), launches them as one job of the multirun (so the run dir is named from the config as
always, and a repeated configuration resumes or reuses its run dir), reads the objectives back from that run dir's
`metrics.json` (`objectives_of`) and tells the study. The study lives in `<sweep dir>/study.journal` (Optuna's
journal file storage: one append-only file, no database server; `optuna-dashboard` opens it).

The space is declared in config, one entry per override key, in order (`hydra.sweeper.space`):

    sampler: {choices: [entropy_bound, confidence_topk]}          # a config group: the sampler family
    sampler.entropy_bound: {low: 0.01, high: 3.0, log: true, when: {sampler: entropy_bound}}
    sampler.max_steps: {type: int, low: 2, high: 128, log: true}
    sampler.remask_ratio: {low: 0.0, high: 0.4, step: 0.05}

`choices` makes a categorical, `low`/`high` a float (or `type: int`) range, `log` a log scale, `step` a grid;
`when` suggests a knob only when earlier entries took one of the given values (a family's own knobs). Floats
without a step go into the override rounded to `digits` significant digits (default 3), so run names stay
readable and the value that ran is the one recorded (`trial.user_attrs["overrides"]`).

Kill and resume: a trial is asked, its overrides written to the study, then it runs. A search killed at any
point and re-run finds the trials that were launched but never told (state RUNNING, overrides recorded), runs
them again into the same run dirs (runs resume from `samples.jsonl`, a finished one is only re-read) and tells
them; a trial asked but never launched (no overrides yet) is marked failed and takes no place in `n_trials`.
Each ask uses a sampler seeded with `(seed, trial number)`, so a resumed search asks the same trials as one
that was never interrupted.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from harness.runner.store import read_metrics

STUDY_FILE = "study.journal"
OVERRIDES_ATTR = "overrides"  # user attr: the trial's overrides, written before it is launched
RUN_DIR_ATTR = "run_dir"
SPACE_ATTR = "space"  # study user attr: the space the study was made with (a resume must use the same)
SAMPLERS = ("tpe", "nsga2", "random")
DIRECTIONS = ("maximize", "minimize")


class SearchConfigError(ValueError):
    """A bad search setting; the message names the key."""


@dataclass(frozen=True)
class Dimension:
    """One override key of the search space (see the module docstring for the config spelling)."""

    key: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    kind: str = "float"  # float | int | categorical
    log: bool = False
    step: float | None = None
    digits: int = 3
    when: Mapping[str, tuple] = field(default_factory=dict)

    @staticmethod
    def parse(key: str, spec: Mapping[str, Any]) -> Dimension:
        where = f"hydra.sweeper.space.{key}"
        if not isinstance(spec, Mapping):
            raise SearchConfigError(f"{where}: must be a mapping such as {{low: 0.1, high: 1.0}}, got {spec!r}")
        unknown = set(spec) - {"choices", "low", "high", "type", "log", "step", "digits", "when"}
        if unknown:
            raise SearchConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
        when = {str(k): tuple(v) if isinstance(v, list | tuple) else (v,) for k, v in (spec.get("when") or {}).items()}
        if "choices" in spec:
            choices = tuple(spec["choices"])
            if not choices or "low" in spec or "high" in spec:
                raise SearchConfigError(f"{where}: `choices` must be a non-empty list, without low/high")
            return Dimension(key, choices=choices, kind="categorical", when=when)
        kind = str(spec.get("type", "float"))
        if kind not in ("float", "int"):
            raise SearchConfigError(f"{where}.type: must be float or int, got {kind!r}")
        low, high = spec.get("low"), spec.get("high")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)):
            raise SearchConfigError(f"{where}: needs finite numbers `low` and `high` (or `choices`)")
        if not low < high:
            raise SearchConfigError(f"{where}: needs low < high, got low={low} high={high}")
        log, step = bool(spec.get("log", False)), spec.get("step")
        if log and (low <= 0 or step is not None):
            raise SearchConfigError(f"{where}: a log scale needs low > 0 and no step")
        if step is not None and not (isinstance(step, int | float) and step > 0):
            raise SearchConfigError(f"{where}.step: must be a number > 0, got {step!r}")
        return Dimension(key, None, low, high, kind, log, step, int(spec.get("digits", 3)), when)

    def active(self, values: Mapping[str, Any]) -> bool:
        return all(values.get(k) in allowed for k, allowed in self.when.items())

    def suggest(self, trial: Trial) -> Any:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            step = int(self.step or 1)
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=step, log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), step=self.step, log=self.log)

    def render(self, value: Any) -> str:
        """The value as it goes into the override (and so into the run name)."""
        if self.kind != "float":
            return str(value)
        if self.step is not None:
            decimals = max(0, -math.floor(math.log10(self.step)) + 1)
            return repr(round(float(value), decimals))
        return repr(float(f"{float(value):.{self.digits}g}"))


@dataclass(frozen=True)
class SearchSpace:
    dims: tuple[Dimension, ...]

    @staticmethod
    def parse(spec: Mapping[str, Mapping[str, Any]]) -> SearchSpace:
        if not spec:
            raise SearchConfigError("hydra.sweeper.space: empty; declare at least one knob to search")
        dims = tuple(Dimension.parse(str(k), v) for k, v in spec.items())
        seen: set[str] = set()
        for d in dims:
            for k in d.when:
                if k not in seen:
                    raise SearchConfigError(f"hydra.sweeper.space.{d.key}.when: {k!r} must be declared before it")
            seen.add(d.key)
        return SearchSpace(dims)

    def suggest(self, trial: Trial) -> list[str]:
        """Ask the trial for every active dimension, in order; the overrides that run it."""
        values: dict[str, Any] = {}
        overrides = []
        for d in self.dims:
            if d.active(values):
                values[d.key] = d.suggest(trial)
                overrides.append(f"{d.key}={d.render(values[d.key])}")
        return overrides

    def fingerprint(self) -> str:
        return json.dumps([d.__dict__ | {"when": dict(d.when)} for d in self.dims], sort_keys=True, default=str)


@dataclass(frozen=True)
class Objective:
    metric: str  # a top-level key of metrics.json
    direction: str  # maximize | minimize


def parse_objectives(metrics: Sequence[str], directions: Sequence[str] | None = None) -> tuple[Objective, ...]:
    """`objectives: [quality, tpf]` (metrics.json keys) with `directions` (default: maximize each)."""
    if not metrics or isinstance(metrics, str | Mapping):
        raise SearchConfigError("hydra.sweeper.objectives: a non-empty list of metrics.json keys, e.g. [quality, tpf]")
    directions = list(directions) if directions is not None else ["maximize"] * len(metrics)
    if len(directions) != len(metrics) or any(d not in DIRECTIONS for d in directions):
        raise SearchConfigError(
            f"hydra.sweeper.directions: one of {DIRECTIONS} per objective ({list(metrics)}), got {directions}"
        )
    return tuple(Objective(str(m), str(d)) for m, d in zip(metrics, directions))


def make_sampler(name: str, seed: int, **kwargs: Any) -> optuna.samplers.BaseSampler:
    """`tpe` (multi-objective TPE, joint over the knobs), `nsga2` (NSGA-II) or `random`, seeded."""
    if name == "tpe":
        kwargs = {"multivariate": True, "group": True, **kwargs}
        with warnings.catch_warnings():  # multivariate/group: "experimental" flags, stable in practice
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, **kwargs)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, **kwargs)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed, **kwargs)
    raise SearchConfigError(f"hydra.sweeper.sampler: must be one of {SAMPLERS}, got {name!r}")


def trial_seed(seed: int, number: int) -> int:
    """The sampler seed for the ask of trial `number`: the same ask in a resumed search as in a fresh one."""
    return (seed * 1_000_003 + number) % (2**32)


def open_study(path: str | Path, name: str, objectives: Sequence[Objective], space: SearchSpace) -> optuna.study.Study:
    """The study in the journal file at `path`, created on first use; refused if it was made with another
    space or other objectives (a resume must continue the same search)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(path)))
    directions = [o.direction for o in objectives]
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions, load_if_exists=True)
    except ValueError as e:
        raise SearchConfigError(f"{path}: study {name!r} exists with other objectives ({e})") from None
    metrics = [o.metric for o in objectives]
    if study.metric_names is None:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2, still so in 5.0
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metrics)
    if study.metric_names != metrics or [d.name.lower() for d in study.directions] != directions:
        raise SearchConfigError(
            f"{path}: study {name!r} optimizes {study.metric_names} ({[d.name.lower() for d in study.directions]}), "
            f"not {metrics} ({directions}); use another sweep dir or delete the study file"
        )
    stored = study.user_attrs.get(SPACE_ATTR)
    if stored is None:
        study.set_user_attr(SPACE_ATTR, space.fingerprint())
    elif stored != space.fingerprint():
        raise SearchConfigError(
            f"{path}: study {name!r} was made with another hydra.sweeper.space; use another sweep dir "
            "(sweep_name=...) or delete the study file to start afresh"
        )
    return study


def launched(trial: FrozenTrial) -> bool:
    """Whether a trial's overrides were recorded, i.e. it was (or was about to be) launched."""
    return OVERRIDES_ATTR in trial.user_attrs


def objectives_of(run_dir: str | Path, objectives: Sequence[Objective]) -> list[float]:
    """The objective values a finished run dir's metrics.json holds; ValueError naming the key if one is missing."""
    metrics = read_metrics(run_dir)
    values = []
    for o in objectives:
        v = metrics.get(o.metric)
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{Path(run_dir) / 'metrics.json'}: objective {o.metric!r} is {v!r}, not a number")
        values.append(float(v))
    return values


def front_trials(study: optuna.study.Study) -> list[FrozenTrial]:
    """The study's Pareto-optimal complete trials, ordered by the first objective."""
    return sorted(study.best_trials, key=lambda t: t.values[0])


def describe_study(study: optuna.study.Study) -> str:
    states = [t.state for t in study.get_trials(deepcopy=False)]
    done = sum(s == TrialState.COMPLETE for s in states)
    failed = sum(s == TrialState.FAIL for s in states)
    names = study.metric_names or [f"objective{i}" for i in range(len(study.directions))]
    lines = [f"study {study.study_name}: {done} complete, {failed} failed trial(s); Pareto-optimal:"]
    for t in front_trials(study):
        vals = ", ".join(f"{n}={v:.4g}" for n, v in zip(names, t.values))
        lines.append(f"  #{t.number}: {vals}  [{' '.join(t.user_attrs.get(OVERRIDES_ATTR, []))}]")
    return "\n".join(lines)
