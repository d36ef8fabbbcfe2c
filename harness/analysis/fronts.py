"""Pareto fronts and the area under them: pure maths on the run table (numpy + pandas, no plotting).

Front: a run is on the (model, eval) front when no other run of that model and eval has both TPF >= and
quality >= with one of them strictly greater (maximize both; exact duplicates count once).

Area under the front (`front_area`, ours; not the leaderboard's AUP): with the front as the step function
f(x) = max{quality_i : tpf_i >= x} (the best quality reachable at TPF at least x; 0 past the fastest run),
front_area = 1/(hi - lo) * integral of f(x) over [lo, hi]. It is in quality units (a mean of `correct` in [0, 1]
gives a front_area in [0, 1]): the mean best quality over the TPF range. Default range: lo = 1 (AR) and hi = the
largest TPF any model reached on that eval, so models on one eval share a range; pass `tpf_range` to fix it across
tables. Adding a run never lowers it.

AUP as the dLLM leaderboard scores it (`aup_d3llm`, `harness.analysis.aup`): the model's front points, accuracy in
percent, weighted by how far below the best accuracy they are, integrated from TPF 0; `aup_y_max` (the best quality
of any run on the eval in this table, in percent) is shared by every model on the eval; per front, `aup_dropped`
counts the points the AUP leaves out and `aup_d3llm_refuses` says the leaderboard would not score it at all. Its
scale is accuracy x TPF (an AR model at 80% scores 80), comparable with the leaderboard's numbers, not with
`front_area`.

Hypervolume (the multi-objective search's yardstick): the area of the (TPF, quality) region that some run
dominates and that dominates a reference point (default TPF 1, quality 0: AR speed, nothing right). Unlike
front_area it is not normalized by a range, so a run that reaches a higher TPF adds area: fronts found by different
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

from harness.analysis.aup import aup_d3llm, split_points

FRONT_COLUMNS = [
    "model",
    "eval",
    "runs",
    "front_runs",
    "tpf_min",
    "tpf_max",
    "front_area",
    "aup_d3llm",
    "aup_y_max",
    "aup_dropped",  # front points the AUP leaves out (more than 5 accuracy points below the slowest)
    "aup_d3llm_refuses",  # the leaderboard's get_aup would refuse this front (its fastest point is that far below)
    "front",
]
# per run: its (model, eval) group's figures
RUN_COLUMNS = {"on_front": False, "front_area": np.nan, "front_area_tpf_min": np.nan, "front_area_tpf_max": np.nan}
RUN_COLUMNS |= {"aup_d3llm": np.nan, "aup_y_max": np.nan}


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
    """Add `RUN_COLUMNS` per run (its (model, eval) group's front membership and figures); return it and one row
    per (model, eval) (`FRONT_COLUMNS`)."""
    table = table.copy()
    for c, v in RUN_COLUMNS.items():
        table[c] = v
    fronts: list[dict[str, Any]] = []
    if table.empty:
        return table, pd.DataFrame(columns=FRONT_COLUMNS)
    for (model, ev), g in table.groupby(["model", "eval"], dropna=False, sort=True):
        on_eval = table["eval"] == ev
        lo, hi = tpf_range or (1.0, float(table.loc[on_eval, "tpf"].max()))
        mask = front_mask(g["tpf"], g["quality"])
        scored = g["quality"].notna().any() and g["tpf"].notna().any()
        area = area_under_front(g["tpf"], g["quality"], lo, hi) if scored and hi > lo else np.nan
        f = g[mask].sort_values("tpf")
        y_max = 100 * float(table.loc[on_eval, "quality"].max()) if scored else np.nan
        fast = f[f["tpf"] > 0]  # a run with no forward has no TPF to score (the leaderboard refuses it)
        aup = aup_d3llm(fast["tpf"], 100 * fast["quality"], y_max) if scored and y_max >= 0 else np.nan
        pts = split_points(fast["tpf"], 100 * fast["quality"])
        table.loc[g.index, "on_front"] = mask
        table.loc[g.index, ["front_area", "front_area_tpf_min", "front_area_tpf_max"]] = [area, lo, hi]
        table.loc[g.index, ["aup_d3llm", "aup_y_max"]] = [aup, y_max]
        fronts.append(
            {
                "model": model,
                "eval": ev,
                "runs": len(g),
                "front_runs": int(mask.sum()),
                "tpf_min": lo,
                "tpf_max": hi,
                "front_area": area,
                "aup_d3llm": aup,
                "aup_y_max": y_max,
                "aup_dropped": len(pts.dropped),
                "aup_d3llm_refuses": pts.d3llm_refuses,
                "front": " | ".join(f"{t:.3g}:{q:.3g}" for t, q in zip(f["tpf"], f["quality"])),
            }
        )
    table["on_front"] = table["on_front"].astype(bool)
    return table, pd.DataFrame(fronts, columns=FRONT_COLUMNS)
