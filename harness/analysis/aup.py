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
never scores such a method); here those points are dropped, as step 2 says, so every method gets a score, and it is
said: `split_points` names the dropped points and whether the leaderboard would refuse the method, which the summary
records (`aup_dropped`, `aup_d3llm_refuses`) and the d3LLM export warns about and writes out. On every input the
leaderboard scores, the two agree (tests/test_aup.py reproduces published rows). Every accuracy 0 (so y_max 0):
AUP 0.0, as their `get_aup` returns for it (their weight divides by y_max, but a lone point, which is all a Pareto
front of zeros is, never reaches it; with every accuracy 0 every term is 0 whatever the weight).

Which points form a "method" here: a model's Pareto front on an eval (its best trade-offs, as a method's published
points are), and y_max is the best quality of any run on that eval in the table (`annotate_fronts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

ALPHA = 3.0
Y_MIN_OFFSET = 5.0  # accuracy points below the slowest point's accuracy past which a point is dropped


def quality_weight(y: float, y_max: float, alpha: float = ALPHA) -> float:
    """W(y) = min(exp(-alpha (1 - y / y_max)), 1): 1 at the best accuracy, decaying below it."""
    return min(math.exp(-alpha * (1 - y / y_max)), 1.0)


@dataclass(frozen=True)
class AupPoints:
    """One method's points as the AUP sees them, sorted by TPF: those it integrates and those step 2 drops."""

    tpf: np.ndarray
    accuracy: np.ndarray
    dropped: list[tuple[float, float]]  # (TPF, accuracy) more than `y_min_offset` below the slowest point
    d3llm_refuses: bool  # the fastest point is that far below: the leaderboard's get_aup asserts, scores nothing


def split_points(tpf: Iterable[float], accuracy: Iterable[float], y_min_offset: float = Y_MIN_OFFSET) -> AupPoints:
    """Sorted by TPF (stable; points missing either number left out): kept are those within `y_min_offset` of the
    lowest-TPF point's accuracy."""
    x, y = np.asarray(list(tpf), dtype=float), np.asarray(list(accuracy), dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if not len(y):
        return AupPoints(x, y, [], False)
    keep = y >= y[0] - y_min_offset
    dropped = [(float(a), float(b)) for a, b in zip(x[~keep], y[~keep])]
    return AupPoints(x[keep], y[keep], dropped, bool(y[0] - y[-1] > y_min_offset))


def kept_points(tpf: Iterable[float], accuracy: Iterable[float], y_min_offset: float = Y_MIN_OFFSET):
    """The points AUP integrates: sorted by TPF, those within `y_min_offset` of the lowest-TPF point's accuracy."""
    pts = split_points(tpf, accuracy, y_min_offset)
    return pts.tpf, pts.accuracy


def aup_d3llm(
    tpf: Iterable[float],
    accuracy: Iterable[float],
    y_max: float,
    alpha: float = ALPHA,
    y_min_offset: float = Y_MIN_OFFSET,
) -> float:
    """The leaderboard's AUP of one method's points (accuracy in percent, see the module docstring); NaN when no
    point has both numbers; 0.0 when y_max is 0 (every accuracy 0). Refused (ValueError) for a TPF <= 0, as the
    leaderboard refuses it, and for a y_max below 0 or, at 0, below an accuracy (no weight is defined there)."""
    x, y = kept_points(tpf, accuracy, y_min_offset)
    if not len(x):
        return math.nan
    if (x <= 0).any():
        raise ValueError(f"aup_d3llm: every TPF must be positive, got {x.min()}")
    if not y_max >= 0 or (y_max == 0 and (y > 0).any()):
        raise ValueError(f"aup_d3llm: y_max must be positive (or 0 where every accuracy is 0), got {y_max}")
    if y_max == 0:
        return 0.0
    w = np.array([yi * quality_weight(yi, y_max, alpha) for yi in y])
    return float(x[0] * y[0] + np.sum(np.diff(x) * (w[1:] + w[:-1]) / 2))
