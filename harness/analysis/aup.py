"""AUP as the dLLM leaderboard scores it (d3LLM's `AUP_leaderboard/aup_utils.get_aup`), so our numbers compare with
theirs. Not our `front_area` (`harness.analysis.fronts`: the mean best quality over a TPF range, in quality units).

For one method's (TPF, accuracy) points, accuracy in percent (our quality x 100):
1. sort the points by TPF (stable: ties keep their order);
2. drop the points whose accuracy is more than `y_min_offset` (5) points below the accuracy at the lowest TPF;
3. AUP = rho_1 * y_1 + sum_i (rho_i - rho_{i-1}) * (y_i W(y_i) + y_{i-1} W(y_{i-1})) / 2 over the kept points:
   a rectangle from TPF 0 to the first point at its unweighted accuracy, then trapezoids of the weighted accuracy,
   with W(y) = min(exp(-alpha (1 - y / y_max)), 1), alpha = 3;
4. y_max: the best accuracy across every method of the task (one value shared by all methods scored together).

The leaderboard asserts instead of filtering when the fastest point is more than 5 points below the slowest (it
never scores such a method); here those points are dropped, as step 2 says, so every method gets a score. On every
input the leaderboard scores, the two agree (tests/test_aup.py reproduces published rows).

Which points form a "method" here: a model's Pareto front on an eval (its best trade-offs, as a method's published
points are), and y_max is the best quality of any run on that eval in the table (`annotate_fronts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

ALPHA = 3.0
Y_MIN_OFFSET = 5.0  # accuracy points below the slowest point's accuracy past which a point is dropped


def quality_weight(y: float, y_max: float, alpha: float = ALPHA) -> float:
    """W(y) = min(exp(-alpha (1 - y / y_max)), 1): 1 at the best accuracy, decaying below it."""
    return min(math.exp(-alpha * (1 - y / y_max)), 1.0)


def kept_points(tpf: Iterable[float], accuracy: Iterable[float], y_min_offset: float = Y_MIN_OFFSET):
    """The points AUP integrates: sorted by TPF, those within `y_min_offset` of the lowest-TPF point's accuracy."""
    x, y = np.asarray(list(tpf), dtype=float), np.asarray(list(accuracy), dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    keep = y >= y[0] - y_min_offset if len(y) else np.zeros(0, dtype=bool)
    return x[keep], y[keep]


def aup_d3llm(
    tpf: Iterable[float],
    accuracy: Iterable[float],
    y_max: float,
    alpha: float = ALPHA,
    y_min_offset: float = Y_MIN_OFFSET,
) -> float:
    """The leaderboard's AUP of one method's points (accuracy in percent, see the module docstring); NaN when no
    point has both numbers. Refused (ValueError) for a TPF <= 0 or a y_max <= 0, as the leaderboard refuses them."""
    x, y = kept_points(tpf, accuracy, y_min_offset)
    if not len(x):
        return math.nan
    if (x <= 0).any():
        raise ValueError(f"aup_d3llm: every TPF must be positive, got {x.min()}")
    if not y_max > 0:
        raise ValueError(f"aup_d3llm: y_max must be positive, got {y_max}")
    w = np.array([yi * quality_weight(yi, y_max, alpha) for yi in y])
    return float(x[0] * y[0] + np.sum(np.diff(x) * (w[1:] + w[:-1]) / 2))
