"""The speed/quality figure: quality vs TPF (or tokens/s) for the runs of one eval, drawn to explain itself.

What each point means comes from `harness.figures.plot_points` (family, default, Wilson interval, label); labels are
placed by `harness.figures.plot_labels` (none overlap); fronts and their area come from `harness.analysis.fronts`.
`harness.figures.pareto` calls `pareto_figure` for every eval of a report; `harness.figures.pareto_html` draws the same
figure
as an interactive page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from harness.analysis import series
from harness.analysis.fronts import area_under_front, front_mask
from harness.figures.plot_labels import freeze_layout, place_labels
from harness.figures.plot_points import (
    HIGHLIGHT_COLOR,
    NOT_WORSE_COLOR,
    POINT_COLUMNS,
    default_description,
    plot_points,
    series_colors,
    series_order,
)

X_AXES = {"tpf": "tokens per forward (TPF)", "tokens_per_second": "tokens / s"}
DOMINATES = "dominates_default"  # gid of the red rings
NOT_WORSE = "faster_not_worse"  # gid of the dashed green rings
DPI = 150  # the figure's own dpi is the saved one: label boxes checked on screen are the boxes in the PNG
LABEL_BOX = {"boxstyle": "square,pad=0.08", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}
FRONT_STYLES = ["-", "-.", ":", (0, (5, 1))]


def series_name(pts: pd.DataFrame, model: Any, family: str) -> str:
    """A series' legend name: its family, prefixed with the model when several models have that family."""
    name = pts.loc[pts["family"] == family, "family_name"].iloc[0]
    return f"{model} · {name}" if pts.loc[pts["family"] == family, "model"].nunique() > 1 else name


def _series_front_area(g: pd.DataFrame) -> float:
    """The area under this series' own front, over its model's front-area range (so series of a model compare)."""
    lo, hi = "front_area_tpf_min", "front_area_tpf_max"
    if lo not in g or g[lo].isna().all() or not (g[hi] > g[lo]).any():
        return np.nan
    return area_under_front(g["tpf"], g["quality"], float(g[lo].iloc[0]), float(g[hi].iloc[0]))


def front_legend(g: pd.DataFrame) -> str:
    """` (front area 0.429 over TPF 1-6 · AUP(d3LLM) 231.5, y_max 100)`: a model's two areas, named apart."""
    parts = []
    if "front_area" in g and pd.notna(g["front_area"].iloc[0]):
        a, b = g["front_area_tpf_min"].iloc[0], g["front_area_tpf_max"].iloc[0]
        parts.append(f"front area {g['front_area'].iloc[0]:.3f} over TPF {a:.3g}-{b:.3g}")
    if "aup_d3llm" in g and pd.notna(g["aup_d3llm"].iloc[0]):
        parts.append(f"AUP(d3LLM) {g['aup_d3llm'].iloc[0]:.1f}, y_max {g['aup_y_max'].iloc[0]:.3g}")
    return f" ({' · '.join(parts)})" if parts else ""


def x_errors(pts: pd.DataFrame, x: str) -> np.ndarray | None:
    """Horizontal bars: the bootstrap interval of `x` (`<x>_lo` / `<x>_hi`, `contract.intervals`), 0 where none."""
    if f"{x}_lo" not in pts or pts[f"{x}_lo"].isna().all():
        return None
    lo = pd.to_numeric(pts[f"{x}_lo"], errors="coerce").fillna(pts[x])
    hi = pd.to_numeric(pts[f"{x}_hi"], errors="coerce").fillna(pts[x])
    return np.vstack([(pts[x] - lo).clip(lower=0), (hi - pts[x]).clip(lower=0)])


def _proxy(marker: str, color: str, label: str, size: float = 8, **kw: Any) -> Line2D:
    kw = {"markeredgecolor": "black", "markeredgewidth": 0.6, **kw}
    return Line2D([], [], marker=marker, color=color, linestyle="none", markersize=size, label=label, **kw)


def quality_bands(lo: Sequence[float], hi: Sequence[float], min_gap: float = 0.3) -> list[tuple[float, float]]:
    """The quality ranges the points' intervals cover, highest first: two when an empty band wider than `min_gap`
    of the whole span separates them (the figure then breaks its y-axis there), else one."""
    spans = sorted((a, b) for a, b in zip(lo, hi) if pd.notna(a) and pd.notna(b))
    if not spans:
        return [(0.0, 1.0)]
    merged = [list(spans[0])]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = merged[-1][1] - merged[0][0]
    gaps = [(merged[i + 1][0] - merged[i][1], i) for i in range(len(merged) - 1)]
    if not gaps or total <= 0 or max(gaps)[0] < min_gap * total:
        return [(merged[0][0], merged[-1][1])]
    _, i = max(gaps)
    return [(merged[i + 1][0], merged[-1][1]), (merged[0][0], merged[i][1])]


def _marker_size(row: pd.Series) -> float:
    return 17.0 if row["is_default"] else (7.0 if series.knob_labelled(row["label"]) else 9.0)


def pareto_figure(df: pd.DataFrame, x: str = "tpf", title: str | None = None) -> Figure:
    """Quality vs `x` for the runs of one eval (see `harness.figures.plot_points` for what each column means): a marker
    shape per decoder kind, a colour per sampler family, Wilson 95% bars on quality, the default sampler as a
    star with a dashed line at its quality, runs that dominate it ringed in red, a step line per model's front,
    and labels stating the knobs that vary within a family, placed so that none overlap (`harness.figures.plot_labels`).
    When the runs fall into two quality bands far apart (baselines far below the diffusion runs), the y-axis is
    broken between them (two panels, one x-axis), so the crowded band gets the height."""
    pts = df if set(POINT_COLUMNS) <= set(df) else plot_points(df)
    pts = pts[pd.to_numeric(pts[x], errors="coerce").notna() & pd.to_numeric(pts["quality"], errors="coerce").notna()]
    lo = pts["quality_lo"].fillna(pts["quality"])
    hi = pts["quality_hi"].fillna(pts["quality"])
    bands = quality_bands(lo, hi)
    fig = Figure(figsize=(12, 8.5), dpi=DPI, layout="constrained")
    axes = _band_axes(fig, bands, lo)
    band_of = np.zeros(len(pts), dtype=int)
    if len(bands) == 2:
        band_of = np.where(lo.to_numpy() >= bands[0][0], 0, 1)
    colors = series_colors(pts)
    handles = _draw_series(axes, pts, band_of, colors, x)
    handles += _draw_fronts(axes, pts, x)
    handles += _draw_default_lines(axes, pts, colors)
    handles += _draw_rings(axes, pts, x)
    handles += _bar_legend(pts, x)
    ev = pts["eval"].iloc[0] if len(pts) else (df["eval"].iloc[0] if len(df) else "")
    _frame_axes(axes, bands, pts, x)
    fig.supylabel(f"quality ({ev})", fontsize=10)
    fig.suptitle(title or f"{ev}: quality vs {X_AXES.get(x, x)}", fontsize=12)
    ncol = 3 if max(len(h.get_label()) for h in handles) <= 60 else 2  # long front entries: two columns fit
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=ncol, frameon=False)
    _label_points(fig, axes, pts, band_of, x)
    return fig


def _band_axes(fig: Figure, bands: list[tuple[float, float]], lo: pd.Series) -> list[Any]:
    """One panel per quality band; of two, the band with more runs gets the height (its labels need room), the other
    at most a quarter."""
    if len(bands) != 2:
        return [fig.subplots()]
    counts = [int(((lo >= a) & (lo <= b)).sum()) for a, b in bands]
    ratios = [3.0, 1.0] if counts[0] >= counts[1] else [1.0, 3.0]
    return list(fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": ratios, "hspace": 0.02}))


def _draw_series(axes: list[Any], pts: pd.DataFrame, band_of: np.ndarray, colors: dict, x: str) -> list[Any]:
    """Each (model, family) series' points with their bars, on the panel of their band; one legend handle each."""
    handles: list[Any] = []
    for model, fam in series_order(pts):
        in_series = ((pts["model"] == model) & (pts["family"] == fam)).to_numpy()
        g = pts[in_series]
        color, kind = colors[(model, fam)], str(g["label"].iloc[0])
        for b, ax in enumerate(axes):
            for is_def, sub in pts[in_series & (band_of == b)].groupby("is_default", sort=True):
                yerr = np.vstack([sub["quality"] - sub["quality_lo"], sub["quality_hi"] - sub["quality"]])
                ax.errorbar(
                    sub[x],
                    sub["quality"],
                    yerr=yerr,
                    xerr=x_errors(sub, x),
                    fmt="*" if is_def else series.style(kind).marker,
                    markersize=_marker_size(sub.iloc[0]),
                    markerfacecolor=color,
                    markeredgecolor="black",
                    markeredgewidth=0.6,
                    ecolor=color,
                    elinewidth=1.0,
                    capsize=2.5,
                    alpha=0.9,
                    zorder=4 if is_def else 3,
                    label=f"_{model}·{fam}{'·default' if is_def else ''}",
                )
        area = _series_front_area(g) if x == "tpf" else np.nan
        name = series_name(pts, model, fam) + (f"  (front area {area:.3f})" if pd.notna(area) else "")
        handles.append(_proxy(series.style(kind).marker, color, name))
    return handles


def _draw_fronts(axes: list[Any], pts: pd.DataFrame, x: str) -> list[Any]:
    """A step line per model's front (a one-run model's front is its point: no line)."""
    handles: list[Any] = []
    fronts = [(model, g) for model, g in pts.groupby("model", sort=True, dropna=False) if len(g) > 1]
    for i, (model, g) in enumerate(fronts):
        f = g[front_mask(g[x], g["quality"])].sort_values(x)
        aup = front_legend(g) if x == "tpf" else ""
        # a broad translucent band, so a front never reads as a label's thin leader line
        style = {"color": "0.5", "linestyle": FRONT_STYLES[i % len(FRONT_STYLES)], "linewidth": 2.4, "alpha": 0.45}
        for ax in axes:
            ax.plot(f[x], f["quality"], drawstyle="steps-pre", zorder=1, label=f"front: {model}{aup}", **style)
        handles.append(Line2D([], [], label=f"front: {model}{aup}", **style))
    return handles


def _draw_default_lines(axes: list[Any], pts: pd.DataFrame, colors: dict) -> list[Any]:
    """What the star marks, and a dashed line at each model's default quality."""
    handles: list[Any] = []
    defaults = pts[pts["is_default"]]
    if len(defaults):  # what the star marks, from the starred runs' own knobs (one line per family's default)
        described = dict.fromkeys(default_description(r) for _, r in defaults.iterrows())
        handles.append(_proxy("*", "white", f"default sampler ({'; '.join(described)})", size=14))
    several = defaults["model"].nunique() > 1
    for model, d in defaults.groupby("model", sort=True):
        r = d.iloc[0]
        q = f"{r['quality']:.3f}" + (
            f" [{r['quality_lo']:.3f}, {r['quality_hi']:.3f}]" if pd.notna(r["quality_lo"]) else ""
        )
        label = f"default quality{f' ({model})' if several else ''}: {q}"
        style = {"color": colors[(model, r["family"])], "linestyle": "--", "linewidth": 1.0}
        for ax in axes:
            ax.axhline(r["quality"], zorder=0, label=label, **style)
        handles.append(Line2D([], [], label=label, **style))
    return handles


def _draw_rings(axes: list[Any], pts: pd.DataFrame, x: str) -> list[Any]:
    """Red rings on runs that dominate the default, dashed green ones on runs faster at no quality loss."""
    handles: list[Any] = []
    dom = pts[pts["dominates_default"].astype(bool)]
    if len(dom):
        for ax in axes:
            ax.scatter(
                dom[x],
                dom["quality"],
                s=200,
                facecolors="none",
                edgecolors=HIGHLIGHT_COLOR,
                linewidths=2,
                gid=DOMINATES,
            )
        handles.append(
            _proxy("o", "none", "dominates the default", size=14, markeredgecolor=HIGHLIGHT_COLOR, markeredgewidth=2)
        )
    quick = pts[pts["faster_not_worse"].astype(bool)] if "faster_not_worse" in pts else pts.iloc[0:0]
    if len(quick):
        ring = {"facecolors": "none", "edgecolors": NOT_WORSE_COLOR, "linewidths": 1.5, "linestyles": "--"}
        for ax in axes:
            ax.scatter(quick[x], quick["quality"], s=260, gid=NOT_WORSE, **ring)
        label = "faster than the default, quality not lower (margin, with confidence)"
        handles.append(_proxy("o", "none", label, size=15, markeredgecolor=NOT_WORSE_COLOR, markeredgewidth=1.5))
    return handles


def _bar_legend(pts: pd.DataFrame, x: str) -> list[Any]:
    """Legend entries saying what the vertical (and, where drawn, horizontal) bars are."""
    n = pd.to_numeric(pts["num_samples"], errors="coerce").dropna().unique() if "num_samples" in pts else []
    bars = f"n={int(n[0])} samples per run" if len(n) == 1 else "n = each run's samples"
    handles = [Line2D([], [], color="0.3", marker="_", markersize=8, label=f"bars: Wilson 95% interval ({bars})")]
    if x_errors(pts, x) is not None:
        label = f"horizontal bars: {x.replace('_', ' ')} bootstrap 95% (samples)"
        handles.append(Line2D([], [], color="0.3", marker="|", markersize=8, linestyle="none", label=label))
    return handles


def _frame_axes(axes: list[Any], bands: list[tuple[float, float]], pts: pd.DataFrame, x: str) -> None:
    """Limits per panel (headroom above, room on the right for labels), grid, break marks and the x label."""
    x_lo, x_hi = float(pts[x].min()), float(pts[x].max())
    x_span = max(x_hi - x_lo, abs(x_hi) * 0.1, 1e-9)
    for (a, b), ax in zip(bands, axes):
        pad = max(0.015, 0.1 * (b - a))
        ax.set_ylim(a - pad, b + 2 * pad)  # headroom above the top point: its label goes somewhere
        ax.set_xlim(x_lo - 0.05 * x_span, x_hi + 0.14 * x_span)  # labels extend right: room on that side
        ax.grid(True, alpha=0.3)
    _break_marks(axes)
    axes[-1].set_xlabel(X_AXES.get(x, x))


def _break_marks(axes: list[Any]) -> None:
    """The usual // marks where a y-axis is broken between two panels."""
    if len(axes) != 2:
        return
    top, bottom = axes
    top.spines["bottom"].set_visible(False)
    bottom.spines["top"].set_visible(False)
    top.tick_params(axis="x", which="both", bottom=False)
    kw = {"marker": [(-1, -0.5), (1, 0.5)], "markersize": 10, "linestyle": "none", "color": "k", "clip_on": False}
    top.plot([0, 1], [0, 0], transform=top.transAxes, **kw)
    bottom.plot([0, 1], [1, 1], transform=bottom.transAxes, **kw)


def _label_points(fig: Figure, axes: list[Any], pts: pd.DataFrame, band_of: np.ndarray, x: str) -> list[Text]:
    """One label per point (its family's varying knobs), placed without overlap; a note counts any left out.
    Priority for the free spots near the points: the default, runs that dominate it, front runs and baselines."""
    on_front = np.zeros(len(pts), dtype=bool)
    for _, g in pts.groupby("model", sort=False, dropna=False):
        on_front[[pts.index.get_loc(i) for i in g.index]] = front_mask(g[x], g["quality"])
    renderer = freeze_layout(fig)
    texts: list[Text] = []
    hidden = 0
    for b, ax in enumerate(axes):
        labelled, others, ax_texts, priority = [], [], [], []
        for (_, r), front, rb in zip(pts.iterrows(), on_front, band_of):
            if rb != b:
                continue
            marker = (r[x], r["quality"], _marker_size(r) / 2 * DPI / 72)
            text = f"default {r['point_label']}".strip() if r["is_default"] else r["point_label"]
            if not text:
                others.append(marker)
                continue
            labelled.append(marker)
            ax_texts.append(ax.text(r[x], r["quality"], text, fontsize=7.5, color="0.1", zorder=6, bbox=LABEL_BOX))
            important = front or not series.is_uniform(r["label"])
            priority.append(4 * r["is_default"] + 3 * bool(r["dominates_default"]) + 2 * important)
        hidden += len(place_labels(ax, ax_texts, labelled, priority, renderer, others).hidden)
        texts += ax_texts
    if hidden:
        note = f"{hidden} label(s) left out for space (every run is in summary.csv)"
        fig.text(0.995, 0.995, note, ha="right", va="top", fontsize=7, color="0.35")
    return texts
