"""Every experiment config launches as a quick CPU multirun (lightning-hydra-template style)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.app import REPO, compose_app, run_app

# parts/ are not experiments; GPU presets (report_*, output_lengths*) decode the released models: their CPU twins
# (experiment/twin/) run end to end in tests/test_report_presets.py and tests/test_output_lengths.py instead
TWINS = {p.stem for p in (REPO / "conf" / "experiment" / "twin").glob("*.yaml")}
EXPERIMENTS = sorted(
    p.stem
    for p in (REPO / "conf" / "experiment").glob("*.yaml")
    if not p.stem.startswith("report_") and p.stem not in TWINS
)


# sweep axes that only repeat the same code path at another value: one value each here (sudoku_families: every
# `fam` option at one step budget of four; tests/test_families.py runs its table end to end; sudoku_strategies: at one
# level of four, tests/test_strategies_sweep.py)
NARROWED = {"sudoku_families": ["budget=8"], "sudoku_strategies": ["level=l4"]}


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_as_quick_multirun(experiment, tmp_path):
    run_app(
        f"experiment={experiment}",
        "eval.num_puzzles=3",
        "batch_size=3",
        *NARROWED.get(experiment, []),
        f"hydra.sweep.dir={tmp_path}",
        "hydra.callbacks={}",
        timeout=600,
    )
    metrics = [json.loads(p.read_text()) for p in Path(tmp_path).glob("*/metrics.json")]
    assert metrics, f"{experiment} produced no finished run"
    for m in metrics:
        assert m["num_samples"] == 3 and m["nfe"] > 0 and 0.0 <= m["quality"] <= 1.0


def test_experiment_values_override_the_main_config():
    """experiment/ files state only what differs, and what they state wins (e.g. one sweep dir for make sweep)."""
    cfg = compose_app("experiment=sudoku_topk")
    assert cfg.sweep_name == "sudoku_sweep" and cfg.batch_size == 100
    assert cfg.model.name == "sudoku6_diffusion" and cfg.sampler.name == "confidence_topk"


@pytest.mark.parametrize(
    "overrides,prefix",
    [
        ([], "tiny_diffusion__entropy_bound__prompts__s0__bs8__"),
        (
            ["sampler.max_steps=8", "sampler.entropy_bound=0.3"],
            "tiny_diffusion__entropy_bound-n8-b0.3__prompts__s0__bs8__",
        ),
        (
            ["sampler=confidence_topk", "sampler.tokens_per_step=3"],
            "tiny_diffusion__confidence_topk-k3__prompts__s0__bs8__",
        ),
        (
            [
                "sampler=confidence_threshold",
                "sampler.t_max=1.0",
                "sampler.stop_entropy=0.01",
                "sampler.remask_ratio=0.1",
                "sampler.capture_trajectory=true",
            ],
            "tiny_diffusion__confidence_threshold-tmax1.0-stop_entropy0.01-rm0.1__prompts__s0__bs8__",
        ),
        # AR runs name their sampler, the token rule, like every family's (issue 52; before it: sudoku6_ar__sudoku6__)
        (["model=sudoku6_ar", "eval=sudoku6", "seed=3", "batch_size=40"], "sudoku6_ar__token__sudoku6__s3__bs40__"),
        (
            ["model=tiny_ar", "sampler.do_sample=true", "sampler.temperature=0.7", "sampler.top_p=0.9"],
            "tiny_ar__token-do_sampleTrue-temp0.7-top_p0.9__prompts__s0__bs8__",
        ),
    ],
)
def test_run_names_keep_their_spelling(overrides, prefix):
    """Run-dir names are resume keys: the knob spellings (samplers.knobs) must never change."""
    name = compose_app(*overrides).run_name
    assert name.startswith(prefix) and len(name) == len(prefix) + 6


def _compose(*overrides):
    return compose_app(*overrides, with_hydra=True)


def test_make_sweep_experiments_and_parts():
    """`make sweep` names these experiments; the shared part lives in parts/, not among the experiments."""
    assert {"sudoku_sweep", "sudoku_remask", "sudoku_confidence", "sudoku_topk", "sudoku_baselines"} <= set(EXPERIMENTS)
    assert "sudoku_base" not in EXPERIMENTS and (REPO / "conf/experiment/parts/sudoku_base.yaml").is_file()


def test_paths_are_absolute_from_the_repo_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory plays no part
    cfg = _compose()
    assert cfg.paths.root_dir == str(REPO) and cfg.paths.output_dir == str(REPO / "outputs")
    assert cfg.hydra.run.dir == f"{REPO}/outputs/runs/{cfg.run_name}"
    assert cfg.hydra.sweep.dir.startswith(f"{REPO}/outputs/sweeps/")
    moved = _compose("paths.output_dir=/scratch/out", "experiment=sudoku_sweep")
    assert moved.hydra.sweep.dir == "/scratch/out/sweeps/sudoku_sweep"
    assert moved.run_name == _compose("experiment=sudoku_sweep").run_name  # paths never enter a run name


def test_debug_runs_a_handful_in_one_batch_without_logger():
    cfg = _compose("experiment=sudoku_topk", "logger=wandb", "debug=default")
    assert cfg.eval.limit == 4 and cfg.batch_size == 4 and cfg.resume is False
    assert cfg.hydra.sweep.dir == f"{REPO}/outputs/debug/sweeps/sudoku_sweep"
    assert cfg.logger._target_ == "harness.tracking.loggers.WandbLogger"  # the command line still wins
    assert _compose("debug=default").logger._target_ == "harness.tracking.loggers.NoLogger"


def test_local_settings_feed_wandb_and_slurm():
    cfg = _compose(
        "local=example",
        "local.wandb_entity=team",
        "local.slurm_account=acct",
        "logger=wandb",
        "hydra/launcher=slurm",
        "+hydra.job.env_set.HF_HOME=/data/hf",
    )
    assert cfg.logger.entity == "team" and cfg.hydra.launcher.account == "acct"
    assert cfg.hydra.launcher.partition is None and cfg.hydra.job.env_set.HF_HOME == "/data/hf"
    if not (REPO / "conf/local/default.yaml").exists():  # a machine without local settings: nothing set
        plain = _compose("logger=wandb", "hydra/launcher=slurm")
        assert plain.logger.entity is None and plain.hydra.launcher.account is None
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "conf/local/*.yaml" in ignored and "!conf/local/example.yaml" in ignored
