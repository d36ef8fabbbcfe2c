"""Dominance with confidence: runs with a planted paired difference are judged both ways (real and null)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from harness.analysis.aggregate import collect, steps_curve, summarize
from harness.analysis.dominance import add_dominance, compare_paired, describe, holm, mcnemar_exact, paired_bootstrap
from harness.analysis.fronts import hypervolume
from samplers.config import EntropyBoundConfig
from tests.helpers.runs import make_run_dir

DEFAULT = {k: v for k, v in asdict(EntropyBoundConfig()).items()}
N = 200


def _run(root, name, correct, nfe=6, **knobs):
    """A finished run on the same N items: per item `correct` (0/1 or graded), 36 tokens in `nfe` forwards."""
    samples = [(36, nfe, c, [nfe]) for c in correct]
    return make_run_dir(root, name, samples, model="sudoku6", eval_name="sudoku6", sampler={**DEFAULT, **knobs})


def _planted(seed: int, p_ref: float, delta: float, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Paired 0/1 outcomes: the run is right wherever the reference is, plus on a `delta` share of the items
    the reference gets wrong (delta > 0), or independent coin flips of equal skill (delta = 0)."""
    rng = np.random.default_rng(seed)
    ref = (rng.random(n) < p_ref).astype(float)
    if delta == 0:
        return (rng.random(n) < p_ref).astype(float), ref
    run = ref.copy()
    wrong = np.flatnonzero(ref == 0)
    run[rng.choice(wrong, size=int(round(delta * n)), replace=False)] = 1.0
    return run, ref


@pytest.mark.slow
def test_planted_real_difference_dominates_and_null_does_not(tmp_path):
    ref_correct = [1.0] * 140 + [0.0] * 60
    real = [1.0] * 140 + [1.0] * 20 + [0.0] * 40  # +20 items, none lost: McNemar p = 0.5**20
    null = [0.0] * 3 + [1.0] * 137 + [1.0] * 3 + [0.0] * 57  # 3 gained, 3 lost: no difference
    small = [1.0] * 140 + [1.0] * 3 + [0.0] * 57  # +3 items, none lost: p = 0.125, a gain that may be noise
    _run(tmp_path, "default", ref_correct)
    _run(tmp_path, "real", real, remask_ratio=0.1)
    _run(tmp_path, "null", null, remask_ratio=0.3)
    _run(tmp_path, "small", small, entropy_bound=0.3)
    _run(tmp_path, "real_but_slower", real, nfe=7, entropy_bound=0.03)  # better quality, lower TPF: no
    table = add_dominance(collect([tmp_path])).set_index("run_name")
    assert (table["reference_run"] == "default").all()
    assert table.at["real", "dominates_default"]
    assert table.at["real", "p_value"] == pytest.approx(0.5**20)
    assert table.at["real", "quality_delta"] == pytest.approx(0.1)
    assert table.at["real", "dominance_test"] == "mcnemar_exact" and table.at["real", "dominance_items"] == N
    assert not table.at["null", "dominates_default"] and table.at["null", "quality_delta"] == 0
    assert table.at["null", "p_value"] == pytest.approx(0.65625)  # P(X >= 3), X ~ Bin(6, 1/2)
    assert not table.at["small", "dominates_default"] and table.at["small", "p_value"] == pytest.approx(0.125)
    assert not table.at["real_but_slower", "dominates_default"]  # TPF 36/7 < 36/6
    assert not table.at["default", "dominates_default"] and np.isnan(table.at["default", "p_value"])
    # Holm over the 4 comparisons: the real gain survives, and the adjusted p is never below the raw one
    assert table.at["real", "p_value_adjusted"] == pytest.approx(4 * 0.5**20)
    assert (table["p_value_adjusted"].dropna() >= table["p_value"].dropna()).all()
    text = describe(table.reset_index())
    assert "1 setting(s) dominate the default with confidence" in text and "real:" in text


def test_verdicts_hold_over_many_planted_runs():
    """Calibration and power, not one lucky draw: null pairs are flagged at most ~alpha of the time,
    a real +10-point gain (on 200 items) nearly always."""
    null = [mcnemar_exact(*_planted(s, 0.8, 0.0)) < 0.05 for s in range(300)]
    real = [mcnemar_exact(*_planted(s, 0.8, 0.1)) < 0.05 for s in range(300)]
    assert np.mean(null) <= 0.06
    assert np.mean(real) >= 0.99


def test_graded_scores_use_a_paired_bootstrap():
    rng = np.random.default_rng(0)
    ref = [{"sample_id": f"q{i}", "correct": float(x)} for i, x in enumerate(rng.uniform(0.3, 0.9, N))]
    better = [{**r, "correct": min(1.0, r["correct"] + 0.05)} for r in ref]
    noise = [{**r, "correct": r["correct"] + (0.1 if i % 2 else -0.1)} for i, r in enumerate(ref)]  # mean 0
    c = compare_paired(better, ref)
    assert c.test == "paired_bootstrap" and c.p_value < 0.001 and c.quality_delta > 0.04
    null = compare_paired(noise, ref)
    assert null.test == "paired_bootstrap" and abs(null.quality_delta) < 1e-12 and 0.3 < null.p_value < 0.7
    assert paired_bootstrap(np.zeros(50), np.zeros(50)) == 1.0  # no difference at all: never significant


def test_items_are_paired_by_id_and_item_hash():
    a = [{"sample_id": "x", "correct": 1.0, "item_sha": "1"}]
    with pytest.raises(ValueError, match="different items"):
        compare_paired(a, [{"sample_id": "x", "correct": 0.0, "item_sha": "2"}])
    with pytest.raises(ValueError, match="no items"):
        compare_paired(a, [{"sample_id": "y", "correct": 0.0}])


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, np.nan]).tolist()[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert np.isnan(holm([0.01, np.nan])[1])


def test_no_reference_no_verdict_and_named_reference(tmp_path):
    _run(tmp_path, "b0.3", [1.0] * 150 + [0.0] * 50, entropy_bound=0.3)
    _run(tmp_path, "b1", [1.0] * 190 + [0.0] * 10, entropy_bound=1.0)
    table = add_dominance(collect([tmp_path]))
    assert table["reference_run"].isna().all() and not table["dominates_default"].any()
    assert "no dominance verdict" in describe(table)
    named = add_dominance(collect([tmp_path]), reference_run="b0.3").set_index("run_name")
    assert named.at["b1", "dominates_default"] and named.at["b1", "quality_delta"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="alpha"):
        add_dominance(collect([tmp_path]), alpha=1.5)


def test_summary_has_the_dominance_columns_and_the_steps_curve(tmp_path, capsys):
    from harness.analysis.aggregate import print_summary

    _run(tmp_path / "runs", "default", [1.0] * 150 + [0.0] * 50, nfe=6)
    _run(tmp_path / "runs", "n96", [1.0] * 180 + [0.0] * 20, nfe=8, max_steps=96)
    _run(tmp_path / "runs", "n4", [1.0] * 100 + [0.0] * 100, nfe=3, max_steps=4)
    _run(tmp_path / "runs", "n96-b0.3", [1.0] * 100 + [0.0] * 100, max_steps=96, entropy_bound=0.3)
    table, fronts, files = summarize([tmp_path / "runs"], tmp_path / "summary")
    for c in ("dominates_default", "quality_delta", "p_value"):
        assert c in table
    curve = steps_curve(table)
    assert curve["max_steps"].tolist() == [4, 48, 96] and curve["quality"].tolist() == [0.5, 0.75, 0.9]
    assert (tmp_path / "summary" / "steps_curve.csv").is_file()
    print_summary(table, fronts)
    out = capsys.readouterr().out
    assert "Quality vs max denoising steps" in out and "no setting dominates the default" in out


def test_hypervolume():
    assert hypervolume([], []) == 0.0
    assert hypervolume([2.0, 3.0], [1.0, 0.5]) == pytest.approx(1.0 + 0.5 * 1.0 + 0.0)
    assert hypervolume([3.0, 2.0, 2.5], [0.5, 1.0, 0.4]) == pytest.approx(1.5)  # dominated points add nothing
    assert hypervolume([2.0, 3.0], [1.0, 0.5], tpf_max=2.5) == pytest.approx(1.25)
    assert hypervolume([0.5, 2.0], [1.0, 0.0]) == 0.0  # nothing beats the reference point (1, 0) on both axes
    assert hypervolume([2.0, 3.0], [1.0, 0.5], ref=(1.0, 0.5)) == pytest.approx(0.5)
    assert hypervolume([2.0, np.nan], [1.0, 0.9]) == pytest.approx(1.0)


def test_faster_and_not_worse_needs_a_margin_with_confidence(tmp_path):
    """A faster setting with the reference's outcome on every item is `faster_not_worse` (quality within the
    2-point margin with confidence); one that loses 10 points, or one that is not faster, is not."""
    outcomes = [1.0] * 180 + [0.0] * 20
    _run(tmp_path, "default", outcomes, nfe=6)
    _run(tmp_path, "same_faster", outcomes, nfe=4, max_steps=8)
    _run(tmp_path, "worse_faster", [1.0] * 160 + [0.0] * 40, nfe=3, max_steps=4)
    _run(tmp_path, "same_slower", outcomes, nfe=8, max_steps=96)
    table = add_dominance(collect([tmp_path])).set_index("run_name")
    flags = table["faster_not_worse"].to_dict()
    assert flags == {"default": False, "same_faster": True, "worse_faster": False, "same_slower": False}
    assert not table["dominates_default"].any()  # equal quality is never "better"
    assert table.at["same_faster", "p_not_worse"] < 0.05 and table.at["same_faster", "not_worse_margin"] == 0.02
    text = describe(table.reset_index())
    assert "1 setting(s) are faster and lose less than 0.02 quality" in text and "same_faster:" in text


def test_runs_stored_before_a_knob_existed_still_match_the_default():
    """A run table mixing old runs (no `sampler.verify` / `stream_after_stable` columns, or NaN there) with new
    ones: the old default run is still the default, and a verifying run is not."""
    import math

    from harness.analysis.dominance import NEWER, default_knobs, matches_knobs

    knobs = default_knobs()
    old = {"sampler": knobs["name"], **{f"sampler.{k}": v for k, v in knobs.items() if k != "name" and k not in NEWER}}
    assert matches_knobs(old, knobs)
    assert matches_knobs({**old, **{f"sampler.{k}": math.nan for k in NEWER}}, knobs)
    assert not matches_knobs({**old, "sampler.verify": "always"}, knobs)
