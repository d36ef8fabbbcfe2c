"""Decode-order diagnostics (evals/decode_order.py) on hand-made trajectories of both formats (real decodes: the
twin/parallelbench run in tests/test_parallelbench_twin.py)."""

from __future__ import annotations

import pytest

from evals.decode_order import ar_like_note, commit_order, run_decode_order, sample_decode_order

MASK = 9


def masked_step(tokens: list[int], offset: int = 0) -> dict:
    return {
        "canvas": 0,
        "step": 0,
        "argmax": tokens,
        "tokens": tokens,
        "mask_id": MASK,
        "offset": offset,
        "accepted": [i for i, t in enumerate(tokens) if t != MASK],
    }


def test_left_to_right_fills_are_flagged_and_parallel_ones_are_not():
    l2r = [masked_step([1, MASK, MASK, MASK]), masked_step([1, 2, MASK, MASK]), masked_step([1, 2, 3, MASK])]
    l2r.append(masked_step([1, 2, 3, 4]))
    assert commit_order(l2r, 4) == (1.0, 0.0)
    outside_in = [masked_step([MASK, MASK, MASK, 4]), masked_step([1, MASK, MASK, 4]), masked_step([1, 2, 3, 4])]
    share, distance = commit_order(outside_in, 4)
    assert share == pytest.approx(2 / 4) and distance == pytest.approx((3 + 0 + 0 + 1) / 4)  # 1, 2 in one step
    block = [masked_step([1, 2, 3, 4])]  # a whole block in one forward: parallel, not AR-like
    assert commit_order(block, 4) == (1 / 4, pytest.approx(6 / 4))
    rows = [sample_decode_order(t, 4) for t in (l2r, l2r, outside_in)]
    run = run_decode_order(rows)
    assert run["mean_order_l2r"] == pytest.approx(5 / 6) and not run["decode_order_ar_like"]
    assert run_decode_order(rows[:2])["decode_order_ar_like"]
    assert "AR-LIKE" in ar_like_note(run_decode_order(rows[:2])) and ar_like_note(run) == ""


def test_uniform_state_accepts_edits_and_positions_past_the_answer():
    steps = [
        {"canvas": 0, "step": 0, "argmax": [5, 6, 7, 0], "tokens": [5, 6, 7, 0], "accepted": [2, 3]},
        {"canvas": 0, "step": 1, "argmax": [5, 6, 8, 0], "tokens": [5, 6, 8, 0], "accepted": [0, 1, 2]},
    ]
    out = sample_decode_order(steps, 3)  # position 3 is past the cut (EOS): not an answer position
    assert out == {"order_l2r": pytest.approx(1 / 3), "order_distance": pytest.approx(1.0), "order_edits": 1}
    assert sample_decode_order(None, 3) == dict.fromkeys(out)  # AR: not measured
