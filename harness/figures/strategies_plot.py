"""The strategies figure (experiment=sudoku_strategies, docs/families.md#the-fields-strategies): quality vs TPF of one
eval, one front per (model, sampler) as `harness.analysis.strategies` computes them: the field's strategies as solid
step lines with markers, every other sampler of the table (the masked family's own, uniform-state, AR) dashed, so a
strategy's front reads against ours. Legend entries carry each front's AUP (d3LLM's)."""

from __future__ import annotations

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from harness.analysis.fronts import front_mask
from harness.analysis.strategies import strategy_runs, strategy_table
from harness.figures.families_plot import MARKERS


def strategies_figures(table: pd.DataFrame) -> dict[str, Figure]:
    """`strategies_<eval>` -> its figure, for each eval with strategy runs."""
    runs, st = strategy_runs(table), strategy_table(table)
    return {f"strategies_{ev}": _figure(g, st[st["eval"] == ev], ev) for ev, g in runs.groupby("eval", sort=True)}


def _figure(runs: pd.DataFrame, st: pd.DataFrame, ev: str) -> Figure:
    fig = Figure(figsize=(10, 6.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    cmap = colormaps["tab20"]
    for i, r in enumerate(st.itertuples(index=False)):
        g = runs[(runs["model"] == r.model) & (runs["sampler"] == r.sampler)]
        f = g[front_mask(g["tpf"], g["quality"])].sort_values("tpf")
        colour, style = cmap(i % 20), "-" if r.strategy else "--"
        label = f"{r.sampler} ({r.model}), AUP {r.aup_d3llm:.0f}" + ("" if r.strategy else " [ours]")
        ax.plot(f["tpf"], f["quality"], drawstyle="steps-pre", linestyle=style, color=colour, linewidth=2, alpha=0.7)
        ax.scatter(
            g["tpf"],
            g["quality"],
            marker=MARKERS[i % len(MARKERS)],
            color=colour,
            edgecolor="black",
            linewidth=0.5,
            s=36,
            zorder=3,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_xlabel("tokens per forward (TPF, log)")
    ax.set_ylabel("quality")
    ax.set_title(f"the field's strategies (solid) beside our samplers (dashed): {ev}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig
