"""Bootstrap intervals for TPF and tokens/s (contract.intervals) in metrics, the run table, the figures, and the
paired TPF test of `faster_not_worse`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contract.intervals import RatioInterval, ratio_interval
from contract.records import GenerationResult, decode_metrics
from harness.analysis.aggregate import collect, summarize
from harness.analysis.dominance import add_dominance
from harness.figures.front_figure import pareto_figure
from tests.helpers.runs import make_run_dir

CAP = 48


def _rows(nfes: list[int], tokens: int = 36) -> list[dict]:
    """Per-sample result dicts as samples.jsonl stores them: one canvas each, `nfe` steps, a hit at the cap."""
    return [
        GenerationResult(
            sample_id=f"q{i}",
            token_ids=list(range(tokens)),
            text="",
            nfe=n,
            wall_time_s=0.01 * n,
            steps_per_canvas=[n],
            step_cap_hits=int(n >= CAP),
        ).to_dict()
        for i, n in enumerate(nfes)
    ]


def test_the_ratio_of_sums_is_resampled_not_a_mean_of_ratios():
    num, den = [10, 10, 10, 10], [1, 1, 1, 17]
    iv = ratio_interval(num, den)
    assert iv.value == pytest.approx(40 / 20)  # not the mean of per-sample ratios (7.65)
    assert iv.lo <= iv.value <= iv.hi and iv.hi <= 10  # every resample is a ratio of sums: at most 10
    assert ratio_interval(num, den) == iv  # seeded: the same samples give the same interval
    rng = np.random.default_rng(0)
    many = rng.integers(10, 40, size=50), rng.integers(1, 10, size=50)
    assert ratio_interval(*many) == ratio_interval(*many) != ratio_interval(*many, seed=1)
    assert ratio_interval([5], [2]) == RatioInterval(2.5, 2.5, 2.5) and ratio_interval([5], [0]) is None


def test_a_step_cap_outlier_widens_the_tpf_interval():
    rng = np.random.default_rng(0)
    ordinary = [int(n) for n in rng.integers(5, 8, size=100)]  # 5..7 steps per canvas
    calm = decode_metrics(_rows(ordinary))
    capped = decode_metrics(_rows(ordinary[:-3] + [CAP] * 3))  # three canvases ran to the step cap
    width = lambda m: m["tpf_hi"] - m["tpf_lo"]  # noqa: E731
    assert calm["tpf_lo"] <= calm["tpf"] <= calm["tpf_hi"]
    assert capped["tpf"] < calm["tpf"]
    assert width(capped) > 2 * width(calm)  # three samples of a hundred more than double the spread
    assert capped["step_cap_hit_rate"] == pytest.approx(3 / 100) and calm["step_cap_hit_rate"] == 0
    # tokens/s has an interval where each sample has its wall-time share; none where one lacks it
    assert capped["tokens_per_second_lo"] <= capped["tokens_per_second"] <= capped["tokens_per_second_hi"]
    no_wall = [{**r, "wall_time_s": 0.0} for r in _rows(ordinary)]
    assert decode_metrics(no_wall)["tokens_per_second_lo"] is None


def test_intervals_in_metrics_json_and_filled_for_older_runs(tmp_path):
    run = make_run_dir(tmp_path, "r", [(36, n, 1, [n]) for n in (4, 5, 6, 48)], sampler={"max_steps": CAP})
    stored = json.loads((run / "metrics.json").read_text())
    assert stored["tpf_lo"] <= stored["tpf"] <= stored["tpf_hi"] and stored["step_cap_hit_rate"] == 0.25
    old = make_run_dir(tmp_path, "old", [(36, n, 1, [n]) for n in (4, 5, 6, 48)], sampler={"max_steps": CAP})
    metrics = json.loads((old / "metrics.json").read_text())
    for k in ("tpf_lo", "tpf_hi", "tokens_per_second_lo", "tokens_per_second_hi"):
        del metrics[k]  # a run stored before the intervals existed
    (old / "metrics.json").write_text(json.dumps(metrics))
    table = collect([tmp_path]).set_index("run_name")
    assert table.loc["old", ["tpf_lo", "tpf_hi"]].tolist() == pytest.approx(table.loc["r", ["tpf_lo", "tpf_hi"]])
    _, _, files = summarize([tmp_path], tmp_path / "summary")
    printed = (tmp_path / "summary" / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"tpf_lo", "tpf_hi", "step_cap_hit_rate", "tokens_per_second_lo"} <= set(printed)


def test_the_figure_draws_tpf_intervals_as_horizontal_bars(tmp_path):
    make_run_dir(tmp_path, "a", [(36, n, 1, [n]) for n in (4, 5, 6, 48)])
    make_run_dir(tmp_path, "b", [(36, n, 0, [n]) for n in (2, 2, 3, 3)])
    table = collect([tmp_path])
    fig = pareto_figure(table, "tpf")
    drawn = {}
    for ax in fig.axes:
        for c in ax.containers:
            data, _caps, (xbars, _ybars) = c.lines
            for (px, py), seg in zip(data.get_xydata(), xbars.get_segments()):
                (x0, y0), (x1, y1) = seg
                assert y0 == y1 == pytest.approx(py)  # horizontal, at the point's quality
                drawn[round(px, 6)] = (min(x0, x1), max(x0, x1))
    for _, r in table.iterrows():
        assert drawn[round(r["tpf"], 6)] == pytest.approx((r["tpf_lo"], r["tpf_hi"]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "horizontal bars: tpf bootstrap 95% (samples)" in legend


def _paired_run(root, name, nfes, model="m"):
    return make_run_dir(root, name, [(36, n, 1, [n]) for n in nfes], model=model, eval_name="e", sampler=DEFAULT)


DEFAULT: dict = {}


def test_faster_not_worse_needs_a_tpf_gain_that_holds_over_items(tmp_path):
    """Two settings faster in total TPF than the reference, with its outcome on every item: one faster on every
    item, one whose gain comes from two canvases that no longer hit the step cap while 18 items got slower. The
    paired bootstrap of TPF keeps the first and refuses the second (the old rule, TPF > reference's, took both)."""
    from dataclasses import asdict

    from samplers.config import EntropyBoundConfig

    ref_knobs = {k: v for k, v in asdict(EntropyBoundConfig()).items()}
    ref = [10] * 198 + [CAP] * 2
    tail_only = [10] * 180 + [11] * 18 + [10] * 2
    everywhere = [9] * 198 + [CAP] * 2
    for name, nfes, knobs in (
        ("default", ref, ref_knobs),
        ("tail_only", tail_only, {**ref_knobs, "entropy_bound": 0.3}),
        ("everywhere", everywhere, {**ref_knobs, "entropy_bound": 0.2}),
    ):
        make_run_dir(tmp_path, name, [(36, n, 1, [n]) for n in nfes], model="m", eval_name="e", sampler=knobs)
    table = add_dominance(collect([tmp_path])).set_index("run_name")
    assert table.at["tail_only", "tpf"] > table.at["default", "tpf"]  # faster in total ...
    assert table.at["tail_only", "p_not_worse"] < 0.05  # ... and not worse ...
    assert table.at["tail_only", "p_faster"] > 0.05 and not table.at["tail_only", "faster_not_worse"]  # ... unproven
    assert table.at["everywhere", "p_faster"] < 0.001 and table.at["everywhere", "faster_not_worse"]
