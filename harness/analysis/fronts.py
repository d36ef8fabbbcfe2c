"""Pareto fronts and the area under them: pure maths on the run table (numpy + pandas, no plotting).

Front: a run is on the (model, eval) front when no other run of that model and eval has both TPF >= and
quality >= with one of them strictly greater (maximize both; exact duplicates count once).

Area under the front (AUP, in the spirit of d3LLM's AUP, not its exact weighting): with the front as the
step function f(x) = max{quality_i : tpf_i >= x} (the best quality reachable at TPF at least x; 0 past
the fastest run), AUP = 1/(hi - lo) * integral of f(x) over [lo, hi]. It is in quality units (a mean of
`correct` in [0, 1] gives AUP in [0, 1]): the mean best quality over the TPF range. Default range:
lo = 1 (AR) and hi = the largest TPF any model reached on that eval, so models on one eval share a range;
pass `tpf_range` to fix it across tables. Adding a run never lowers AUP.

Hypervolume (the multi-objective search's yardstick): the area of the (TPF, quality) region that some run
dominates and that dominates a reference point (default TPF 1, quality 0: AR speed, nothing right). Unlike AUP
it is not normalized by a range, so a run that reaches a higher TPF adds area: fronts found by different
searches compare by it directly (`harness/analysis/search_vs_grid.py`). `hypervolume(..., tpf_max=hi)` clips at a TPF,
the
comparison over a shared range.

`harness.analysis.aggregate` marks the fronts in the run table with `annotate_fronts`; `harness.figures.pareto` draws
them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

FRONT_COLUMNS = ["model", "eval", "runs", "front_runs", "tpf_min", "tpf_max", "aup", "front"]


def front_mask(x: Iterable[float], y: Iterable[float]) -> np.ndarray:
    """True where the point is on the maximize-both Pareto front (NaN points never are)."""
    x, y = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)
    mask = np.zeros(len(x), dtype=bool)
    best = -np.inf
    for i in np.lexsort((-y, -x)):  # x descending, ties by y descending
        if np.isnan(x[i]) or np.isnan(y[i]):
            continue
        if y[i] > best:
            mask[i], best = True, y[i]
    return mask


def area_under_front(tpf: Iterable[float], quality: Iterable[float], lo: float, hi: float) -> float:
    """Normalized area under the front's step function over [lo, hi] (see the module docstring)."""
    if not hi > lo:
        raise ValueError(f"empty TPF range [{lo}, {hi}]")
    x, y = np.asarray(list(tpf), dtype=float), np.asarray(list(quality), dtype=float)
    m = front_mask(x, y)
    order = np.argsort(x[m])
    total, prev = 0.0, -np.inf
    for xj, yj in zip(x[m][order], y[m][order]):
        a, b = max(prev, lo), min(xj, hi)
        if b > a:
            total += yj * (b - a)
        prev = xj
    return total / (hi - lo)


def hypervolume(
    tpf: Iterable[float], quality: Iterable[float], ref: tuple[float, float] = (1.0, 0.0), tpf_max: float | None = None
) -> float:
    """Area dominated by the points and dominating `ref` = (tpf, quality), maximize both; optionally only up to
    `tpf_max`. NaN points and points not better than `ref` on both axes add nothing; an empty set gives 0."""
    x, y = np.asarray(list(tpf), dtype=float), np.asarray(list(quality), dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y)) & (x > ref[0]) & (y > ref[1])
    if not keep.any():
        return 0.0
    hi = float(x[keep].max()) if tpf_max is None else min(float(tpf_max), float(x[keep].max()))
    if not hi > ref[0]:
        return 0.0
    return area_under_front(x[keep], y[keep] - ref[1], ref[0], hi) * (hi - ref[0])


def annotate_fronts(
    table: pd.DataFrame, tpf_range: tuple[float, float] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add `on_front`, `aup`, `aup_tpf_min`, `aup_tpf_max` per run; return it and one row per (model, eval)."""
    table = table.copy()
    for c, v in (("on_front", False), ("aup", np.nan), ("aup_tpf_min", np.nan), ("aup_tpf_max", np.nan)):
        table[c] = v
    fronts: list[dict[str, Any]] = []
    if table.empty:
        return table, pd.DataFrame(columns=FRONT_COLUMNS)
    for (model, ev), g in table.groupby(["model", "eval"], dropna=False, sort=True):
        lo, hi = tpf_range or (1.0, float(table.loc[table["eval"] == ev, "tpf"].max()))
        mask = front_mask(g["tpf"], g["quality"])
        scored = g["quality"].notna().any() and g["tpf"].notna().any()
        aup = area_under_front(g["tpf"], g["quality"], lo, hi) if scored and hi > lo else np.nan
        table.loc[g.index, "on_front"] = mask
        table.loc[g.index, ["aup", "aup_tpf_min", "aup_tpf_max"]] = [aup, lo, hi]
        f = g[mask].sort_values("tpf")
        fronts.append(
            {
                "model": model,
                "eval": ev,
                "runs": len(g),
                "front_runs": int(mask.sum()),
                "tpf_min": lo,
                "tpf_max": hi,
                "aup": aup,
                "front": " | ".join(f"{t:.3g}:{q:.3g}" for t, q in zip(f["tpf"], f["quality"])),
            }
        )
    table["on_front"] = table["on_front"].astype(bool)
    return table, pd.DataFrame(fronts)
