"""Intervals: bootstrap ones for the benchmark ratios (TPF, tokens/s), how far a figure would move on other samples;
Wilson's for a rate (quality).

TPF is heavy-tailed: a canvas that hits the step cap costs as many forwards as several ordinary ones, so a few
samples can move the benchmark TPF. The interval resamples samples (with replacement) and recomputes the ratio
of sums per resample (total valid tokens / total forwards, the one TPF rule of `contract.records`), never a mean
of per-sample ratios. Percentile interval from `scipy.stats.bootstrap` (paired: a sample's numerator and
denominator move together), seeded, so the same samples always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0
Z95 = 1.959963984540054  # the two-sided 95% normal quantile


@dataclass(frozen=True)
class RatioInterval:
    """sum(num) / sum(den) and its bootstrap interval over the samples (`lo` == `hi` == the ratio for one sample)."""

    value: float
    lo: float
    hi: float


def _ratio_of_sums(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of zero-cost samples only: inf / nan
        return num.sum(axis=axis) / den.sum(axis=axis)


def ratio_resamples(
    num: Sequence[float], den: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> np.ndarray:
    """The ratio of sums on `resamples` resamples of the samples (paired), seeded; empty below two samples."""
    from scipy.stats import bootstrap

    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(n) < 2:
        return np.empty(0)
    res = bootstrap(
        (n, d),
        _ratio_of_sums,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return np.asarray(res.bootstrap_distribution, dtype=float)


def ratio_interval(
    num: Sequence[float], den: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> RatioInterval | None:
    """sum(num) / sum(den) with its percentile bootstrap interval; None when the denominator sums to 0."""
    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(n) != len(d):
        raise ValueError(f"ratio_interval: {len(n)} numerators vs {len(d)} denominators")
    if not len(n) or not d.sum() > 0:
        return None
    value = float(n.sum() / d.sum())
    dist = ratio_resamples(n, d, resamples, seed)
    dist = dist[np.isfinite(dist)]  # a resample that drew only zero-cost samples has no ratio
    if not len(dist):
        return RatioInterval(value, value, value)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(dist, [tail, 100 - tail])
    # the interval holds the point estimate (a skewed tail may put both ends on one side of it by rounding)
    return RatioInterval(value, min(value, float(lo)), max(value, float(hi)))


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion `p` over `n` samples; (nan, nan) without a usable p or n."""
    if p is None or n is None or math.isnan(p) or math.isnan(n) or n <= 0 or not 0.0 <= p <= 1.0:
        return math.nan, math.nan
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the interval always holds p; rounding must not push its ends past p (at p = 0 or 1: a negative error bar)
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))
