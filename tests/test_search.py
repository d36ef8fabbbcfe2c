"""The multi-objective sampler search (`hydra/sweeper=optuna_moo`, harness.analysis.search): its space, its study, and a
search killed with SIGKILL and re-run, which must end with the same trials as one never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from harness.analysis.search import (
    OVERRIDES_ATTR,
    RUN_DIR_ATTR,
    STUDY_FILE,
    Objective,
    SearchConfigError,
    SearchSpace,
    objectives_of,
    open_study,
    trial_seed,
)
from tests.helpers.app import REPO, app_env, run_app
from tests.helpers.runs import make_run_dir

OBJECTIVES = (Objective("quality", "maximize"), Objective("tpf", "maximize"))
SPACE = {
    "sampler": {"choices": ["entropy_bound", "confidence_topk"]},
    "sampler.entropy_bound": {"low": 0.01, "high": 3.0, "log": True, "when": {"sampler": "entropy_bound"}},
    "sampler.tokens_per_step": {"type": "int", "low": 1, "high": 12, "when": {"sampler": "confidence_topk"}},
    "sampler.max_steps": {"type": "int", "low": 2, "high": 128, "log": True},
    "sampler.remask_ratio": {"low": 0.0, "high": 0.4, "step": 0.05},
}


def _study(tmp_path, space=SPACE, objectives=OBJECTIVES):
    return open_study(tmp_path / STUDY_FILE, "s", objectives, SearchSpace.parse(space))


@pytest.mark.parametrize(
    "space,msg",
    [
        ({}, "empty"),
        ({"sampler.t_max": {"low": 1.0, "high": 0.5}}, "low < high"),
        ({"sampler.entropy_bound": {"low": 0.0, "high": 1.0, "log": True}}, "log scale"),
        ({"sampler.max_steps": {"low": 1, "hihg": 8}}, "unknown field"),
        ({"sampler.max_steps": {"type": "str", "low": 1, "high": 8}}, "type"),
        ({"sampler.threshold": {"low": 0.5, "high": 0.9, "when": {"sampler": "x"}}}, "declared before"),
        ({"sampler": {"choices": []}}, "non-empty"),
    ],
)
def test_bad_space_is_refused_naming_the_key(space, msg):
    with pytest.raises(SearchConfigError, match=msg) as e:
        SearchSpace.parse(space)
    assert "hydra.sweeper.space" in str(e.value)


def test_a_family_gets_its_own_knobs_and_values_render_for_run_names():
    space = SearchSpace.parse(SPACE)
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        overrides = dict(o.split("=", 1) for o in space.suggest(study.ask()))
        family = overrides["sampler"]
        seen.add(family)
        assert ("sampler.entropy_bound" in overrides) == (family == "entropy_bound")
        assert ("sampler.tokens_per_step" in overrides) == (family == "confidence_topk")
        assert 2 <= int(overrides["sampler.max_steps"]) <= 128
        assert len(overrides.get("sampler.entropy_bound", "0.1")) <= 6  # 3 significant digits, not 0.0123456789
        assert float(overrides["sampler.remask_ratio"]) * 20 == pytest.approx(
            round(float(overrides["sampler.remask_ratio"]) * 20)
        )
    assert seen == {"entropy_bound", "confidence_topk"}
    assert trial_seed(0, 5) == trial_seed(0, 5) != trial_seed(0, 6)


def test_study_persists_and_refuses_another_space_or_objectives(tmp_path):
    study = _study(tmp_path)
    t = study.ask()
    t.set_user_attr(OVERRIDES_ATTR, ["sampler=entropy_bound"])
    study.tell(t, [0.9, 7.0])
    again = _study(tmp_path)  # a second process would see the same
    assert [x.values for x in again.get_trials()] == [[0.9, 7.0]] and again.metric_names == ["quality", "tpf"]
    with pytest.raises(SearchConfigError, match="another hydra.sweeper.space"):
        _study(tmp_path, space={**SPACE, "sampler.t_max": {"low": 0.6, "high": 1.2}})
    with pytest.raises(SearchConfigError, match="tokens_per_second"):
        _study(tmp_path, objectives=(OBJECTIVES[0], Objective("tokens_per_second", "maximize")))


def test_objectives_are_read_from_the_run_dir(tmp_path):
    run = make_run_dir(tmp_path, "r", [(36, 6, 1, [6]), (36, 4, 0, [4])])
    assert objectives_of(run, OBJECTIVES) == [0.5, 7.2]
    with pytest.raises(ValueError, match="'tokens_per_sec'"):
        objectives_of(run, (Objective("tokens_per_sec", "maximize"),))


# --- the sweeper end to end (real Hydra app, shipped Sudoku model) --------------------------------------------

SEARCH = ["experiment=sudoku_search", "hydra.callbacks={}", "hydra.sweeper.tpe.n_startup_trials=3"]


def _search_args(sweep_dir: Path, n_trials: int, puzzles: int = 24) -> list[str]:
    return [
        *SEARCH,
        f"eval.num_puzzles={puzzles}",
        "batch_size=1",
        f"hydra.sweeper.n_trials={n_trials}",
        f"hydra.sweep.dir={sweep_dir}",
    ]


def _trials(sweep_dir: Path) -> list[optuna.trial.FrozenTrial]:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(sweep_dir / STUDY_FILE)))
    return optuna.load_study(study_name=sweep_dir.name, storage=storage).get_trials()


def _summary(trials) -> list[tuple]:
    return [
        (t.number, t.state.name, tuple(t.user_attrs.get(OVERRIDES_ATTR, ())), tuple(t.values or ())) for t in trials
    ]


@pytest.mark.slow
def test_killed_search_resumes_with_no_trial_lost_or_repeated(tmp_path):
    n = 5
    clean_dir, crash_dir = tmp_path / "clean", tmp_path / "crash"
    run_app(*_search_args(clean_dir, n), timeout=600)
    clean = _trials(clean_dir)
    assert [t.state for t in clean] == [TrialState.COMPLETE] * n

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run", *_search_args(crash_dir, n)],
        cwd=REPO,
        env=app_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, running = time.time() + 300, None
    while time.time() < deadline and running is None:  # kill inside the third trial's run, mid-samples
        dirs = [d for d in crash_dir.glob("sudoku6_*") if (d / "samples.jsonl").exists()]
        done = [d for d in dirs if (d / "metrics.json").exists()]
        busy = [
            d
            for d in dirs
            if not (d / "metrics.json").exists() and len((d / "samples.jsonl").read_text().splitlines()) >= 2
        ]
        if len(done) >= 2 and busy:
            proc.send_signal(signal.SIGKILL)
            running = busy[0]
        time.sleep(0.01)
    proc.wait()
    assert running is not None, "the search never reached its third trial"
    partial = len((running / "samples.jsonl").read_text().splitlines())
    assert partial < 24 and not (running / "metrics.json").exists()
    killed = _trials(crash_dir)
    assert killed[-1].state == TrialState.RUNNING and OVERRIDES_ATTR in killed[-1].user_attrs

    run_app(*_search_args(crash_dir, n), timeout=600)  # the same command again: continues the study
    resumed = _trials(crash_dir)
    assert _summary(resumed) == _summary(clean)  # same trials, same order, same results: none lost or repeated
    for t in resumed:
        run_dir = Path(t.user_attrs[RUN_DIR_ATTR])
        rows = [json.loads(x)["sample_id"] for x in (run_dir / "samples.jsonl").read_text().splitlines()]
        assert len(rows) == len(set(rows)) == 24  # every sample exactly once, also in the run that was killed
    assert Path(resumed[killed[-1].number].user_attrs[RUN_DIR_ATTR]).resolve() == running.resolve()  # same dir
    assert len({t.user_attrs[RUN_DIR_ATTR] for t in resumed}) == len(list(crash_dir.glob("sudoku6_*")))


@pytest.mark.slow
def test_a_trial_asked_but_never_launched_is_failed_and_not_counted(tmp_path):
    sweep = tmp_path / "s"
    run_app(*_search_args(sweep, 1, puzzles=4), timeout=600)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.runner.configs import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=sudoku_search"], return_hydra_config=True)
    space = SearchSpace.parse(OmegaConf.to_container(cfg.hydra.sweeper.space, resolve=True))
    study = open_study(sweep / STUDY_FILE, sweep.name, OBJECTIVES, space)
    space.dims[0].suggest(study.ask())  # killed between the ask and the launch: no overrides recorded yet
    run_app(*_search_args(sweep, 2, puzzles=4), timeout=600)
    trials = _trials(sweep)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert OVERRIDES_ATTR not in trials[1].user_attrs
    assert sum(OVERRIDES_ATTR in t.user_attrs for t in trials) == 2  # n_trials counts launched trials only


@pytest.mark.slow
@pytest.mark.parametrize(
    "override,key",
    [
        ("hydra.sweeper.sampler=bogus", "hydra.sweeper.sampler"),
        ("sampler.max_steps=4,8", "hydra.sweeper.space"),
        ("hydra.sweeper.space.sampler.max_steps.low=0", "hydra.sweeper.space.sampler.max_steps"),
        ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials"),
        ("hydra.sweeper.directions=[maximize]", "hydra.sweeper.directions"),
    ],
)
def test_bad_search_settings_fail_before_any_run(override, key, tmp_path):
    proc = run_app(*SEARCH, f"hydra.sweep.dir={tmp_path}", override, check=False, timeout=120)
    assert proc.returncode != 0 and key in proc.stderr, proc.stderr[-2000:]
    assert not list(tmp_path.glob("sudoku6_*"))


@pytest.mark.slow
def test_failed_trials_are_recorded_and_stop_the_search_at_max_failures(tmp_path):
    """A run without one of the objectives is a failed trial, not a crash; max_failures of them stop the search."""
    args = [*_search_args(tmp_path, 3, puzzles=2), "hydra.sweeper.objectives=[quality,no_such_metric]"]
    proc = run_app(*args, "hydra.sweeper.max_failures=2", check=False, timeout=600)
    assert proc.returncode != 0 and "2 trials failed (hydra.sweeper.max_failures)" in proc.stderr, proc.stderr[-2000:]
    trials = _trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL]
    assert "no_such_metric" in proc.stderr  # the log names what was missing
