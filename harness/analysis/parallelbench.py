"""PBx, ParallelBench's leaderboard score, over a sweep of a model's parallelism settings.

ParallelBench (parallelbench.github.io) ranks a model + decoding strategy by PBx: the highest tokens-per-step at which
the mean score over its tasks stays at or above x% (PB80, PB75, PB70). Their scoring code is not published; the rule
below is read off their site's data (`data/figures/<model>/<strategy>.csv`: per setting, each task's tokens-per-step
and accuracy and their `avg` row; `data/leaderboard/<model>.json`: PBx), and reproduces every published PBx
(4 models, 33 model x strategy rows, 3 thresholds: 99 values: tests/test_parallelbench_pbx.py):
1. a setting's point: tokens-per-step and score, each the mean over the tasks (score in percent);
2. points sorted by tokens-per-step; of points at the same tokens-per-step the best score counts;
3. PBx = 0 if the slowest point scores below x; else the tokens-per-step of the last point before the score first
   drops below x, linearly interpolated into that segment, except for strategies whose tokens-per-step is fixed by the
   knob (every point a whole number: top-k, left-to-right, random), where it is that last point's; past the fastest
   point it is that point's (no extrapolation).

Their tokens-per-step is max_tokens / NFE (a canvas padded to max_tokens, NFE its forwards); ours, TPF, is valid
output tokens / forwards. A run records both (`pb_tokens_per_step`, `tpf`); this module gives PBx on each axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd

THRESHOLDS = (80, 75, 70)
ORDER_COLUMNS = ["mean_order_l2r", "mean_order_distance", "mean_order_edits"]
STRATEGY = ["model", "label", "sampler"]  # a model + decoding rule (its name); its knobs are the sweep's settings


def pbx(tps: Iterable[float], score: Iterable[float], x: float, interpolate: bool | None = None) -> float:
    """PBx of one strategy's points (score in percent); `interpolate=None`: unless every tokens-per-step is whole."""
    best: dict[float, float] = {}
    for t, s in zip(tps, score, strict=True):
        best[float(t)] = max(float(s), best.get(float(t), float("-inf")))
    points = sorted(best.items())
    if interpolate is None:
        interpolate = not all(t.is_integer() for t, _ in points)
    if not points or points[0][1] < x:
        return 0.0
    for (t0, s0), (t1, s1) in zip(points, points[1:]):
        if s1 < x:
            return t0 + (s0 - x) / (s0 - s1) * (t1 - t0) if interpolate else t0
    return points[-1][0]


def setting_points(runs: pd.DataFrame, axis: str) -> pd.DataFrame:
    """One strategy's runs -> one point per setting: the mean `axis` and score (percent) over the tasks that every
    setting ran (column `tasks`: how many)."""
    knobs = [c for c in runs if c.startswith("sampler.") and runs[c].notna().any()]
    keyed = runs.assign(_setting=runs[knobs].map(str).agg("|".join, axis=1) if knobs else "")
    common = set.intersection(*(set(g["pb_task"]) for _, g in keyed.groupby("_setting")))
    kept = keyed[keyed["pb_task"].isin(common)]
    points = kept.groupby("_setting").agg(x=(axis, "mean"), score=("quality", "mean"), tasks=("pb_task", "nunique"))
    return points.assign(score=points["score"] * 100.0).reset_index()


def strategy_groups(table: pd.DataFrame) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """The scored ParallelBench runs of a summary table by strategy: (its `STRATEGY` fields, its runs); a missing
    field reads "-". Nothing when the table has no scored ParallelBench run."""
    if table.empty or "pb_task" not in table:
        return
    runs = table[table["pb_task"].notna() & table["quality"].notna()].copy()
    for col in STRATEGY:
        runs[col] = runs[col].fillna("-") if col in runs else "-"
    for key, group in runs.groupby(STRATEGY, sort=True):
        yield dict(zip(STRATEGY, key, strict=True)), group


def pbx_table(table: pd.DataFrame, thresholds: tuple[int, ...] = THRESHOLDS) -> pd.DataFrame:
    """Per strategy (model, decoder label, sampler rule) of the ParallelBench runs in a summary table: its PBx on
    their tokens-per-step (`PB80`...) and on our TPF (`PB80_tpf`...), the tasks that entered and the settings."""
    rows = []
    for row, group in strategy_groups(table):
        for axis, suffix in (("pb_tokens_per_step", ""), ("tpf", "_tpf")):
            points = setting_points(group, axis)
            row |= {f"PB{x}{suffix}": pbx(points["x"], points["score"], x) for x in thresholds}
        row |= {"tasks": int(points["tasks"].min()), "settings": len(points), "best_score": points["score"].max()}
        row |= {k: group[k].mean() for k in ORDER_COLUMNS if k in group}  # evals.decode_order, over the runs
        rows.append(row)
    return pd.DataFrame(rows)


def task_pbx_table(table: pd.DataFrame, x: int = THRESHOLDS[0]) -> pd.DataFrame:
    """PBx of each strategy on each task alone (the same rule on that task's points, ParallelBench's tokens-per-step):
    where the mean over tasks hides it (a model that fails the hard tasks has PBx 0 on the mean), the speed at which
    each task still scores x%. One row per strategy, one column per task (`<group>/<task>` short name)."""
    rows = []
    for row, group in strategy_groups(table):
        for task, g in group.groupby("pb_task", sort=True):
            row[task.split("/", 1)[-1]] = pbx(g["pb_tokens_per_step"], 100.0 * g["quality"], x)
        rows.append(row)
    return pd.DataFrame(rows)


def per_task_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Each ParallelBench run's task score with its interval and both speed axes, for the summary."""
    cols = ["model", "label", "pb_task", "quality", "quality_lo", "quality_hi", "pb_tokens_per_step", "tpf"]
    cols += ORDER_COLUMNS
    runs = table[table["pb_task"].notna()] if "pb_task" in table else table.iloc[0:0]
    knobs = [c for c in runs if c.startswith("sampler.") and runs[c].astype(str).nunique() > 1]
    return runs[[c for c in cols[:2] + knobs + cols[2:] if c in runs]].reset_index(drop=True)
