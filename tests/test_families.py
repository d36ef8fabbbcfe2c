"""experiment=sudoku_families end to end on a few puzzles: masked, uniform-state and AR runs of the shipped checkpoints
into one sweep dir, then the families table, the dominance tests and the figure (harness.analysis.families)."""

from __future__ import annotations

import pytest

from harness.analysis.aggregate import collect
from harness.analysis.families import family_dominance, family_table, format_families, training_budget
from harness.figures.families_plot import families_figure
from harness.figures.plot_points import plot_points
from tests.helpers.app import REPO, run_app


def test_training_budget_sums_every_phase():
    b = training_budget("models/checkpoints/sudoku6_diffusion")  # phases 1, 2, 3 (train_log.csv), 4: docs/training.md
    assert b["train_steps"] == 5337 + 3214 + 1377 + 1685 and b["parameters"] == 869_736
    assert training_budget("models/checkpoints/sudoku6_ar")["train_steps"] == 6000
    assert training_budget("models/checkpoints/sudoku6_masked")["train_steps"] == 2842 + 4355  # both phases


@pytest.mark.slow
def test_small_families_sweep_end_to_end(tmp_path):
    assert (REPO / "models/checkpoints/sudoku6_masked/model.safetensors").exists()
    run_app(
        "-m",
        "experiment=sudoku_families",
        "eval.num_puzzles=12",
        "budget=8",
        "fam=masked_remdm_r025,uniform_b01,ar",
        f"hydra.sweep.dir={tmp_path}",
        "hydra.callbacks={}",
        timeout=120,
    )
    table = collect([tmp_path])
    ft = family_table(table).set_index("family")
    assert list(ft.index) == ["masked", "uniform-state", "AR"]
    assert ft.loc["masked", "parameters"] == ft.loc["AR", "parameters"] == 868_736  # equal size, mask row included
    assert ft.loc["masked", "budget"] == ft.loc["uniform-state", "budget"] == 8
    assert ft.loc["masked", "renoised_per_step"] > 0  # re-masking on: counted per forward
    for fam in ("masked", "uniform-state"):  # trajectories recorded: self-correction measured, not assumed
        assert ft.loc[fam, "changed_per_sample"] >= ft.loc[fam, "repairs_per_sample"] + ft.loc[fam, "breaks_per_sample"]
    assert ft["repairs_per_sample"].isna()["AR"]  # AR commits never change: not measured, not zero
    dom = family_dominance(table)
    assert len(dom) == 6 and (dom["items"] == 12).all()
    assert "| masked |" in format_families(table)
    assert families_figure(plot_points(table)) is not None
