"""The dLLM leaderboard's AUP (`harness.analysis.aup.aup_d3llm`): hand-computed small sets, the 5-point filter, the
shared y_max, and rows the leaderboard publishes (points from d3LLM's AUP_leaderboard/data_*.yaml, scores from its
leaderboard table, asset/imgs/dllm_leaderboard.png: reference numbers, not computed here)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.aggregate import collect
from harness.analysis.aup import aup_d3llm, kept_points, quality_weight, split_points
from harness.analysis.fronts import annotate_fronts
from tests.helpers.runs import make_run_dir


def test_weight_is_one_at_the_best_accuracy_and_decays_below_it():
    assert quality_weight(80, 80) == 1.0
    assert quality_weight(90, 80) == 1.0  # capped at 1 above y_max
    assert quality_weight(40, 80) == pytest.approx(math.exp(-1.5))


def test_hand_computed_small_sets():
    # one point: the rectangle from TPF 0, unweighted (an AR model at 74.1% scores 74.1 whatever y_max is)
    assert aup_d3llm([1.0], [74.1], y_max=90) == pytest.approx(74.1)
    # two points, both at y_max: rectangle 1 * 80 + trapezoid (3 - 1) * (80 + 80) / 2 = 240
    assert aup_d3llm([1, 3], [80, 80], y_max=80) == pytest.approx(240)
    # the trapezoid weights each end; the first rectangle does not: 2 * 80 + (4 - 2) * (80 + 76 W(76)) / 2
    w = math.exp(-3 * (1 - 76 / 80))
    assert aup_d3llm([4, 2], [76, 80], y_max=80) == pytest.approx(2 * 80 + (80 + 76 * w))  # sorted by TPF first
    # the first point below y_max: still unweighted in the rectangle, weighted in the trapezoid
    w78 = math.exp(-3 * (1 - 78 / 80))
    assert aup_d3llm([1, 2], [78, 78], y_max=80) == pytest.approx(78 + 0.5 * (78 * w78 + 78 * w78))


def test_points_more_than_5_below_the_slowest_are_dropped():
    # sorted: (1, 70), (2, 66), (3, 64.9), (5, 65): 64.9 is 5.1 below 70: dropped; the area bridges 2 -> 5
    x, y = kept_points([5, 1, 3, 2], [65, 70, 64.9, 66])
    assert x.tolist() == [1, 2, 5] and y.tolist() == [70, 66, 65]
    wy = [v * math.exp(-3 * (1 - v / 70)) for v in (70, 66, 65)]
    expected = 70 + (2 - 1) * (wy[0] + wy[1]) / 2 + (5 - 2) * (wy[1] + wy[2]) / 2
    assert aup_d3llm([5, 1, 3, 2], [65, 70, 64.9, 66], y_max=70) == pytest.approx(expected)
    # exactly 5 below is kept; the reference is the accuracy at the lowest TPF, not the best
    assert kept_points([1, 2], [70, 65])[0].tolist() == [1, 2]
    assert kept_points([1, 2, 3], [60, 70, 54])[0].tolist() == [1, 2]
    # a fast point that lost 30 points adds nothing
    assert aup_d3llm([1, 2, 8], [70, 68, 40], y_max=70) == aup_d3llm([1, 2], [70, 68], y_max=70)


def test_a_shared_y_max_changes_a_score():
    pts = ([1, 4], [70, 68])
    alone = aup_d3llm(*pts, y_max=70)  # the method is the best of its task: its points weigh ~1
    shared = aup_d3llm(*pts, y_max=85)  # another method of the task reached 85%: this one's points weigh less
    assert alone == pytest.approx(70 + 3 * (70 + 68 * math.exp(-3 * (1 - 68 / 70))) / 2)
    assert shared == pytest.approx(70 + 3 * (70 * math.exp(-3 * (1 - 70 / 85)) + 68 * math.exp(-3 * (1 - 68 / 85))) / 2)
    assert shared < alone


@pytest.mark.parametrize(
    "points, y_max, published",
    [
        # data_llada.yaml, GSM8K-CoT (y_max 74.98: D2F at TPF 1): d3LLM-LLaDA 637.7, dParallel-LLaDA 358.1
        ([(1.0, 74.02), (9.11, 73.09)], 74.98, 637.7),
        ([(1.0, 74.0), (5.14, 72.63)], 74.98, 358.1),
        # data_llada.yaml, MBPP (y_max 63.6: the Qwen-2.5-7B AR baseline): d3LLM-LLaDA 88.4
        ([(1.0, 42.0), (4.21, 40.60)], 63.6, 88.4),
        # data_dream.yaml, GSM8K-CoT (y_max 83.94): EAGLE-3 319.0
        ([(1.0, 76.57), (5.12, 76.57)], 83.94, 319.0),
    ],
)
def test_reproduces_published_leaderboard_rows(points, y_max, published):
    tpf, acc = zip(*points)
    assert round(aup_d3llm(tpf, acc, y_max), 1) == published


def test_refuses_what_the_leaderboard_refuses():
    with pytest.raises(ValueError, match="TPF"):
        aup_d3llm([0.0, 2.0], [50, 50], y_max=50)
    with pytest.raises(ValueError, match="y_max"):
        aup_d3llm([1.0], [50], y_max=0)
    with pytest.raises(ValueError, match="y_max"):
        aup_d3llm([1.0], [0], y_max=-1)
    assert math.isnan(aup_d3llm([], [], y_max=50))


def test_every_accuracy_zero_scores_zero_as_d3llms_get_aup():
    """hao-ai-lab/d3LLM@e5bfcac AUP_leaderboard/aup_utils.get_aup([2.0], [0.0], 0.0) returns 0.0 (run by hand from a
    copy outside the repo); several all-zero points (where theirs divides by y_max = 0) are 0 too: every term is."""
    assert aup_d3llm([2.0], [0.0], y_max=0.0) == 0.0
    assert aup_d3llm([1.0, 2.0], [0.0, 0.0], y_max=0.0) == 0.0
    # and where theirs gives a number, ours is that number (their get_aup on these points: 294.8987586264393)
    assert aup_d3llm([1, 2, 5, 3], [70, 66, 65, 64.9], y_max=70) == pytest.approx(294.8987586264393, rel=1e-12)


def test_dropped_points_and_what_the_leaderboard_refuses_are_named():
    kept = split_points([1, 2, 5, 3], [70, 66, 65, 64.9])  # their filter drops (3, 64.9) too, and scores the rest
    assert kept.tpf.tolist() == [1, 2, 5] and kept.dropped == [(3.0, 64.9)] and not kept.d3llm_refuses
    fast = split_points([1, 2, 8], [70, 68, 40])  # their get_aup asserts: the fastest point lost 30
    assert fast.dropped == [(8.0, 40.0)] and fast.d3llm_refuses
    none = split_points([1, 2], [70, 65])  # exactly 5 below: kept
    assert none.dropped == [] and not none.d3llm_refuses


def test_y_max_is_shared_by_every_model_on_the_eval(tmp_path):
    """Adding a better model to the table lowers the other model's aup_d3llm (its y_max rises), never its
    front_area; a model on another eval is untouched."""
    make_run_dir(tmp_path, "slow", [(16, 8, i != 0, [4]) for i in range(20)])  # 95% at TPF 2
    make_run_dir(tmp_path, "fast", [(16, 4, i > 1, [2]) for i in range(20)])  # 90% at TPF 4
    alone, _ = annotate_fronts(collect([tmp_path]))
    w = lambda y, y_max: math.exp(-3 * (1 - y / y_max))  # noqa: E731
    # front (2, 95%), (4, 90%); y_max 95: 2 * 95 + (4 - 2) * (95 + 90 W(90)) / 2
    assert alone["aup_d3llm"].tolist() == pytest.approx([2 * 95 + 95 + 90 * w(90, 95)] * 2)
    assert alone["aup_y_max"].tolist() == pytest.approx([95.0, 95.0])
    make_run_dir(tmp_path, "other", [(16, 16, 1, [])] * 20, label="ar", model="better")
    make_run_dir(tmp_path, "elsewhere", [(16, 16, 0, [])] * 20, label="ar", model="better", eval_name="other")
    shared, fronts = annotate_fronts(collect([tmp_path]))
    tiny = shared[shared["model"] == "tiny"]
    assert tiny["aup_y_max"].tolist() == [100.0, 100.0]
    assert tiny["aup_d3llm"].tolist() == pytest.approx([2 * 95 + 95 * w(95, 100) + 90 * w(90, 100)] * 2)
    assert tiny["front_area"].tolist() == pytest.approx(alone["front_area"].tolist())
    f = fronts.set_index(["model", "eval"])
    assert f.loc[("better", "prompts"), "aup_d3llm"] == pytest.approx(100.0)
    assert f.loc[("better", "other"), "aup_d3llm"] == 0.0  # quality 0 everywhere: y_max 0, AUP 0 (d3LLM's value)
    assert f["aup_dropped"].tolist() == [0, 0, 0] and not f["aup_d3llm_refuses"].any()
