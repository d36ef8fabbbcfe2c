"""The ParallelBench figure (experiment=parallelbench and its twin): one panel per task, score against TPF for each
decoding family (its settings joined in TPF order, Wilson 95% bars), and the mean over tasks in the last panel, where
PBx is read. ParallelBench's finding to look for: copy keeps its score as TPF grows, shuffle does not."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

COLORS = {"masked": "#17becf", "diffusion": "#1f77b4", "ar": "#595959", "ar_draft": "#ff7f0e", "ar+draft": "#ff7f0e"}


def _panel(ax, runs: pd.DataFrame, title: str) -> None:
    for label, g in runs.groupby("label", sort=True):
        g = g.sort_values("tpf")
        color = COLORS.get(str(label), None)
        lo = (g["quality"] - g["quality_lo"].fillna(g["quality"])).clip(lower=0)
        hi = (g["quality_hi"].fillna(g["quality"]) - g["quality"]).clip(lower=0)
        ax.errorbar(
            g["tpf"], g["quality"], yerr=[lo, hi], marker="o", ms=4, lw=1.5, capsize=2, color=color, label=str(label)
        )
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)


def parallelbench_figure(table: pd.DataFrame) -> Figure | None:
    """Score vs TPF per task and family for the ParallelBench runs of a summary table; None without any."""
    if table.empty or "pb_task" not in table:
        return None
    runs = table[table["pb_task"].notna() & table["quality"].notna()].copy()
    if runs.empty:
        return None
    for col in ("quality_lo", "quality_hi"):
        runs[col] = runs[col] if col in runs else float("nan")
    tasks = sorted(runs["pb_task"].unique())
    cols = 4
    rows = math.ceil((len(tasks) + 1) / cols)
    fig = Figure(figsize=(4 * cols, 2.8 * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, task in zip(axes, tasks):
        _panel(ax, runs[runs["pb_task"] == task], task)
    knobs = [c for c in runs if c.startswith("sampler.") and runs[c].notna().any()]
    setting = runs[["label", "model", *knobs]].map(str).agg("|".join, axis=1)
    mean = runs.groupby(setting, sort=False).agg(
        label=("label", "first"), tpf=("tpf", "mean"), quality=("quality", "mean")
    )
    _panel(axes[len(tasks)], mean.assign(quality_lo=float("nan"), quality_hi=float("nan")), "mean over tasks")
    for ax in axes[len(tasks) + 1 :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    fig.supxlabel("TPF (valid output tokens / forward)")
    fig.supylabel("ParallelBench score")
    return fig


def parallelbench_figures(table: pd.DataFrame) -> dict[str, Figure]:
    """{"parallelbench": the figure} where the table holds ParallelBench runs, else {} (the sweep summary's form)."""
    fig = parallelbench_figure(table)
    return {} if fig is None else {"parallelbench": fig}
