"""Every experiment config launches as a quick CPU multirun (lightning-hydra-template style)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_app import REPO, run_app

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml") if p.stem != "sudoku_base")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_as_quick_multirun(experiment, tmp_path):
    run_app(f"experiment={experiment}", "eval.num_puzzles=3", "batch_size=3",
            f"hydra.sweep.dir={tmp_path}", "hydra.callbacks={}", timeout=600)
    metrics = [json.loads(p.read_text()) for p in Path(tmp_path).glob("*/metrics.json")]
    assert metrics, f"{experiment} produced no finished run"
    for m in metrics:
        assert m["num_samples"] == 3 and m["nfe"] > 0 and 0.0 <= m["quality"] <= 1.0


def test_experiment_values_override_the_main_config():
    """experiment/ files state only what differs, and what they state wins (e.g. one sweep dir for make sweep)."""
    from hydra import compose, initialize_config_dir

    from harness.configs import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=sudoku_topk"])
    assert cfg.sweep_name == "sudoku_sweep" and cfg.batch_size == 100
    assert cfg.model.name == "sudoku6_diffusion" and cfg.sampler.name == "confidence_topk"
