"""Figures and tables for any family's default (issue 45): the star's legend, the dominance summary, the point labels
and the printed table describe whichever default a model's runs have, masked (block refinement) included."""

from __future__ import annotations

from dataclasses import asdict

from harness.analysis.aggregate import collect, format_table
from harness.analysis.dominance import add_dominance, describe
from harness.figures.pareto import pareto_figure
from harness.figures.plot_points import plot_points
from samplers.config import EntropyBoundConfig
from samplers.masked import BlockRefinementConfig, LowConfidenceConfig, ReMDMConfig
from tests.helpers.runs import make_run_dir

SAMPLES = [(16, 4, 1, [2, 2]), (16, 4, 1, [2, 2]), (16, 6, 0, [3, 3]), (16, 4, 1, [2, 2])]


def _sweep(root, uniform: bool):
    """Masked runs of one model (its default: block refinement at diffusers' defaults; low confidence; ReMDM at a
    ratio of 0.1), and, with `uniform`, the uniform-state checkpoint's default sampler on another model."""
    kw = {"label": "masked", "model": "masked6"}
    make_run_dir(root, "refine", SAMPLES, sampler=asdict(BlockRefinementConfig()), **kw)
    make_run_dir(root, "lowconf", [(16, 8, 1, [4, 4])] * 4, sampler=asdict(LowConfidenceConfig()), **kw)
    make_run_dir(root, "remdm", [(16, 8, 0, [4, 4])] * 4, sampler=asdict(ReMDMConfig(remask_ratio=0.1)), **kw)
    if uniform:
        make_run_dir(root, "eb", SAMPLES, sampler=asdict(EntropyBoundConfig()), model="uniform6")
    return root


def test_masked_default_is_the_reference_the_star_and_the_legend(tmp_path):
    table = add_dominance(collect([_sweep(tmp_path, uniform=False)]))
    assert set(table["reference_run"]) == {"refine"}  # the masked family's default, not "no default run"
    assert "No run with" not in describe(table) and "reference refine" in describe(table)
    pts = plot_points(table)
    assert pts.set_index("run_name")["is_default"].to_dict() == {"refine": True, "lowconf": False, "remdm": False}
    legend = {t.get_text() for t in pareto_figure(pts).legends[0].get_texts()}
    assert "default sampler (block refinement, threshold 0.95, 32 steps per block)" in legend
    assert not any("entropy bound" in t for t in legend)


def test_each_familys_default_is_described_and_labels_skip_a_samplers_own_knobs(tmp_path):
    table = add_dominance(collect([_sweep(tmp_path, uniform=True)]))
    assert set(table["reference_run"]) == {"refine", "eb"}  # one reference per model, each its family's default
    pts = plot_points(table)
    legend = {t.get_text() for t in pareto_figure(pts).legends[0].get_texts()}
    masked = "block refinement, threshold 0.95, 32 steps per block"
    uniform = "entropy bound b=0.1, 48 steps, T 0.8->0.4"
    assert f"default sampler ({masked}; {uniform})" in legend
    labels = pts.set_index("run_name")["point_label"].to_dict()
    assert not any("cap_at_block" in v for v in labels.values())  # low_confidence's and ReMDM's own default
    assert labels["remdm"] == "remdm rm=0.1" and labels["lowconf"] == "low_confidence"


def test_printed_table_is_wrapped_in_blocks(tmp_path):
    table = add_dominance(collect([_sweep(tmp_path, uniform=True)]))
    text = format_table(table)
    assert max(map(len, text.splitlines())) <= 160
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(b.splitlines()[0].split()[0] == "#" for b in blocks)
    assert all(len(b.splitlines()) == 1 + len(table) for b in blocks)  # every block has every run
