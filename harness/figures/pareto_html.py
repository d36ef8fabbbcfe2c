"""The Pareto figure as an interactive page (plotly): the same points, colours, markers, bars, default star and
fronts as the PNG (`harness.figures.pareto.pareto_figure`, columns from `harness.figures.plot_points`), with every
run's knobs on
hover instead of printed labels, so a sweep with many points stays readable; zoom and per-series toggles come
with plotly. The page loads `plotly.min.js` from its own folder (written once beside it): it opens offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import series
from harness.analysis.aggregate import SAMPLER_PREFIX
from harness.analysis.fronts import front_mask
from harness.figures.front_figure import front_legend, x_errors
from harness.figures.plot_points import HIGHLIGHT_COLOR, POINT_COLUMNS, plot_points, series_colors, series_order

X_TITLES = {"tpf": "tokens per forward (TPF)", "tokens_per_second": "tokens / s"}


def _hover(r: pd.Series, knobs: list[str]) -> str:
    lines = [f"<b>{r['run_name']}</b>", f"{r['model']} · {r['family_name']}"]
    set_knobs = [f"{c[len(SAMPLER_PREFIX) :]}={r[c]}" for c in knobs if pd.notna(r[c])]
    if set_knobs:
        lines.append(", ".join(set_knobs))
    q = f"quality {r['quality']:.4g}"
    if pd.notna(r["quality_lo"]):
        q += f" [{r['quality_lo']:.3f}, {r['quality_hi']:.3f}] (Wilson 95%, n={int(r['num_samples'])})"
    lines.append(q)
    lines.append(f"TPF {r['tpf']:.4g}{_interval(r, 'tpf')} · {r['tokens_per_second']:.4g} tokens/s")
    if pd.notna(r.get("tokens_per_second_lo")):
        lines[-1] += _interval(r, "tokens_per_second")
    if pd.notna(r.get("step_cap_hit_rate")) and r.get("num_canvases", 1):
        lines.append(f"step-cap share {r['step_cap_hit_rate']:.3g} of canvases")
    marks = (
        ("default", r["is_default"]),
        ("dominates default", r["dominates_default"]),
        ("faster, not worse", r.get("faster_not_worse", False)),
    )
    flags = [name for name, on in marks if on]
    if flags:
        lines.append(" · ".join(flags))
    return "<br>".join(lines)


def _interval(r: pd.Series, col: str) -> str:
    """` [lo, hi] (bootstrap 95%)` for a column with `<col>_lo` / `<col>_hi`; empty where the run has none."""
    if pd.isna(r.get(f"{col}_lo")):
        return ""
    return f" [{r[f'{col}_lo']:.4g}, {r[f'{col}_hi']:.4g}] (bootstrap 95%)"


def _error_x(g: pd.DataFrame, x: str, color: str) -> dict[str, Any]:
    """plotly's horizontal bars: the bootstrap interval of `x` (`harness.figures.front_figure.x_errors`)."""
    err = x_errors(g, x)
    if err is None:
        return {"visible": False}
    return {
        "type": "data",
        "symmetric": False,
        "array": err[1].tolist(),
        "arrayminus": err[0].tolist(),
        "color": color,
        "thickness": 1,
    }


def pareto_html(df: pd.DataFrame, x: str, path: str | Path, title: str | None = None) -> Path:
    """Write the interactive figure of quality vs `x` for one eval's runs to `path` (.html); return it."""
    import plotly.graph_objects as go

    pts = df if set(POINT_COLUMNS) <= set(df) else plot_points(df)
    pts = pts[pd.to_numeric(pts[x], errors="coerce").notna() & pd.to_numeric(pts["quality"], errors="coerce").notna()]
    knobs = [c for c in pts if c.startswith(SAMPLER_PREFIX) and pts[c].dropna().astype(str).nunique() > 1]
    colors = series_colors(pts)
    fig = go.Figure()
    for model, fam in series_order(pts):
        g = pts[(pts["model"] == model) & (pts["family"] == fam)]
        kind, color = str(g["label"].iloc[0]), colors[(model, fam)]
        several = pts.loc[pts["family"] == fam, "model"].nunique() > 1
        name = f"{model} · {g['family_name'].iloc[0]}" if several else g["family_name"].iloc[0]
        marker: dict[str, Any] = {
            "symbol": ["star" if d else series.style(kind).symbol for d in g["is_default"]],
            "size": [20 if d else (10 if series.is_uniform(kind) else 13) for d in g["is_default"]],
            "color": color,
            "line": {
                "color": [HIGHLIGHT_COLOR if d else "black" for d in g["dominates_default"]],
                "width": [3 if d else 0.7 for d in g["dominates_default"]],
            },
        }
        fig.add_trace(
            go.Scatter(
                x=g[x],
                y=g["quality"],
                mode="markers",
                name=name,
                marker=marker,
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (g["quality_hi"] - g["quality"]).tolist(),
                    "arrayminus": (g["quality"] - g["quality_lo"]).tolist(),
                    "color": color,
                    "thickness": 1,
                },
                error_x=_error_x(g, x, color),
                hovertext=[_hover(r, knobs) for _, r in g.iterrows()],
                hoverinfo="text",
            )
        )
    for model, g in pts.groupby("model", sort=True, dropna=False):
        if len(g) < 2:
            continue
        f = g[front_mask(g[x], g["quality"])].sort_values(x)
        aup = front_legend(g) if x == "tpf" else ""
        fig.add_trace(
            go.Scatter(
                x=f[x],
                y=f["quality"],
                mode="lines",
                line={"shape": "vh", "color": "#4d4d4d", "dash": "dot", "width": 1.2},
                name=f"front: {model}{aup}",
                hoverinfo="skip",
            )
        )
    for _, r in pts[pts["is_default"]].iterrows():
        fig.add_hline(
            y=r["quality"],
            line={"dash": "dash", "color": colors[(r["model"], r["family"])], "width": 1},
            annotation_text=f"default quality {r['quality']:.3f}",
            annotation_position="top left",
        )
    ev = pts["eval"].iloc[0] if len(pts) else ""
    fig.update_layout(
        title=title or f"{ev}: quality vs {X_TITLES.get(x, x)} (bars: Wilson 95% | bootstrap 95%; hover for knobs)",
        xaxis_title=X_TITLES.get(x, x),
        yaxis_title=f"quality ({ev})",
        template="plotly_white",
        hoverlabel={"align": "left"},
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs="directory", full_html=True)
    return path
