"""A small CPU sweep on the shipped 6x6 model: fewer steps buy TPF, a looser entropy bound costs puzzles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.app import REPO, run_app

pytestmark = pytest.mark.slow


def test_sweep_on_shipped_model_shows_the_tradeoff(tmp_path):
    assert (REPO / "models/checkpoints/sudoku6_diffusion/model.safetensors").exists()
    run_app(
        "-m",
        "model=sudoku6_diffusion",
        "eval=sudoku6",
        "eval.num_puzzles=100",
        "batch_size=100",
        "sampler.max_steps=4,48",
        "sampler.entropy_bound=0.1,20.0",
        f"hydra.sweep.dir={tmp_path}",
        timeout=600,
    )
    runs = {}
    for p in Path(tmp_path).glob("*/metrics.json"):
        m = json.loads(p.read_text())
        runs[(m["run"]["sampler"]["max_steps"], m["run"]["sampler"]["entropy_bound"])] = m
    ref, loose, short = runs[(48, 0.1)], runs[(48, 20.0)], runs[(4, 0.1)]
    assert loose["quality"] < ref["quality"]  # accepting everything at once solves fewer puzzles
    assert short["tpf"] > ref["tpf"] and short["quality"] < ref["quality"]  # a step cap buys TPF with puzzles
    assert ref["quality"] >= 0.5  # a genuinely trained model (full figures: docs/training.md)
    assert any(
        (Path(tmp_path) / "summary").rglob("pareto_sudoku6-n*_tpf.png")
    )  # the sweep-end plot (eval identity in the name)
