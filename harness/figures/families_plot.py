"""The decoding-families figure (experiment=sudoku_families, docs/families.md): solved rate vs TPF for masked,
uniform-state, AR and AR + draft runs of one eval, one colour per family, one marker per sampler, each family's
quality-vs-TPF front as a step line in its colour, Wilson 95% bars on quality, and each family's default starred
(`harness.figures.plot_points.is_default`: the masked family's block refinement at diffusers' defaults, the uniform
checkpoint's own sampler; AR and AR + draft are one run each, their own default)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.analysis.families import ORDER, family_runs
from harness.analysis.fronts import front_mask
from harness.analysis.series import STYLES
from harness.figures.plot_points import POINT_COLUMNS, plot_points

COLORS = {s.families: s.colour for s in STYLES.values() if s.families}  # masked, uniform-state, AR, AR+draft
MARKERS = ["o", "s", "^", "D", "v", "P", "h", "X", "<", ">"]


def families_figure(df: pd.DataFrame, title: str | None = None) -> Figure | None:
    """Quality vs TPF (log axis) of one eval's runs by family; None when the runs hold fewer than two families."""
    pts = family_runs(df if set(POINT_COLUMNS) <= set(df) else plot_points(df))
    pts = pts[
        pd.to_numeric(pts["tpf"], errors="coerce").notna() & pd.to_numeric(pts["quality"], errors="coerce").notna()
    ]
    if pts.empty:
        return None
    fig = Figure(figsize=(10, 6.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    samplers = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(sorted(pts["sampler"].astype(str).unique()))}
    for fam in [f for f in ORDER if f in set(pts["family"])]:
        g, color = pts[pts["family"] == fam], COLORS[fam]
        front = g[front_mask(g["tpf"], g["quality"])].sort_values("tpf")
        ax.plot(front["tpf"], front["quality"], drawstyle="steps-pre", color=color, alpha=0.6, linewidth=2, zorder=1)
        single = fam in ("AR", "AR+draft")  # one run each: the family's default
        for (sampler, is_def), sub in g.groupby([g["sampler"].astype(str), g["is_default"] | single], sort=True):
            lo, hi = sub["quality_lo"].fillna(sub["quality"]), sub["quality_hi"].fillna(sub["quality"])
            ax.errorbar(
                sub["tpf"],
                sub["quality"],
                yerr=np.vstack([sub["quality"] - lo, hi - sub["quality"]]),
                fmt="*" if is_def else samplers[sampler],
                markersize=16 if is_def else 7,
                markerfacecolor=color,
                markeredgecolor="black",
                markeredgewidth=0.6,
                ecolor=color,
                capsize=2,
                alpha=0.9,
                zorder=4 if is_def else 3,
                label=fam if single else f"{fam}: {sampler}" + (" (default)" if is_def else ""),
            )
    ax.set_xscale("log")
    ax.set_xlabel("tokens per forward (TPF, log)")
    ax.set_ylabel("solved rate (Wilson 95% bars)")
    ax.set_title(title or f"decoding families at equal size: {pts['eval'].iloc[0]}")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))  # one legend entry per family x sampler
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="best")
    return fig
