"""Speed/quality trade-off figures: Pareto fronts, steps-per-canvas histograms, canvas evolution.

The front, its area (`front_area`) and the leaderboard's AUP (`aup_d3llm`) are computed in
`harness.analysis.fronts` and marked in the run table by `harness.analysis.aggregate`; this module only draws them
(the one module here that imports matplotlib).
The Pareto figure itself (`pareto_figure`: a colour per sampler family, a marker per decoder kind, Wilson 95% bars,
the default sampler starred, labels that never overlap) lives in `harness.figures.front_figure`, its interactive twin in
`harness.figures.pareto_html`; what each point means (family, default, interval, label) in
`harness.figures.plot_points`.

CLI: `python -m harness.pareto PATH... --out outputs/plots` writes the run table (see harness.analysis.aggregate; with
the
point columns of harness.figures.plot_points), per eval `pareto_<eval>_tpf.{png,svg,html}`,
`pareto_<eval>_tokens_per_second.{png,svg,html}` (the pages load `plotly.min.js`, written once beside them) and
`diagnostics_<eval>.{png,svg}` (stutter rate, output length, step-cap rate, format success vs TPF per sampler
family), and per run
`runs/<run>_steps.{png,svg}` (steps per canvas, step cap marked) and `runs/<run>_canvas_<sample>.{png,svg}`
(canvas evolution, when trajectories were captured). `make_report` is the same, as a function.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib  # figures are drawn through Figure objects (no pyplot): no backend is selected globally
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from harness.analysis.aggregate import SAMPLER_PREFIX, cli_parser, print_summary, summarize, tpf_range, write_table
from harness.analysis.lengths import length_crossovers, length_figure, length_series
from harness.analysis.scaling import crossovers, latency_figure, scaling_figure, scaling_series
from harness.analysis.series import knob_labelled
from harness.analysis.series import name as kind_name
from harness.analysis.series import style as series_style
from harness.figures.families_plot import families_figure
from harness.figures.front_figure import X_AXES, pareto_figure
from harness.figures.leaderboard import leaderboard_figures
from harness.figures.parallelbench_plot import parallelbench_figures
from harness.figures.pareto_html import pareto_html
from harness.figures.plot_points import (
    POINT_COLUMNS,
    plot_points,
    series_colors,
    series_order,
)
from harness.figures.strategies_plot import strategies_figures
from harness.runner.store import read_samples

# ---- figures ----------------------------------------------------------------------------------------------


DIAGNOSTIC_PANELS = {
    "stutter_rate": "stutter rate (samples with a repeat loop)",
    "mean_output_tokens": "mean output tokens",
    "step_cap_hit_rate": "step-cap hit rate (canvases)",
    "format_ok_rate": "format success (outputs the scorer can read)",
}


def diagnostics_figure(df: pd.DataFrame, x: str = "tpf", title: str | None = None) -> Figure:
    """Small multiples for the runs of one eval: stutter rate, mean output length, step-cap hit rate and format
    success vs `x`, one line per sampler family (per model when several), baselines as markers. AR runs have no
    canvases, so they are left out of the step-cap panel."""
    fig = Figure(figsize=(17, 4.2), layout="constrained")
    axes = fig.subplots(1, len(DIAGNOSTIC_PANELS), sharex=True)
    pts = df if set(POINT_COLUMNS) <= set(df) else plot_points(df)
    colors = series_colors(pts) if len(pts) else {}
    several = pts["model"].nunique(dropna=False) > 1 if len(pts) else False
    for ax, (col, name) in zip(axes, DIAGNOSTIC_PANELS.items(), strict=True):
        if col not in pts or pd.to_numeric(pts[col], errors="coerce").isna().all():
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", va="center", color="0.5")
        else:
            for model, fam in series_order(pts):
                g = pts[(pts["model"] == model) & (pts["family"] == fam)]
                if col == "step_cap_hit_rate" and "num_canvases" in g:
                    g = g[pd.to_numeric(g["num_canvases"], errors="coerce").fillna(0) > 0]
                g = g.assign(_y=pd.to_numeric(g[col], errors="coerce")).dropna(subset=[x, "_y"]).sort_values(x)
                if g.empty:
                    continue
                label = g["label"].iloc[0]
                ax.plot(
                    g[x],
                    g["_y"],
                    marker=series_style(label).marker,
                    linestyle="-" if knob_labelled(label) else "none",
                    markersize=6 if knob_labelled(label) else 9,
                    markeredgecolor="black",
                    markeredgewidth=0.5,
                    color=colors[(model, fam)],
                    label=f"{model} · {fam}" if several else kind_name(fam),  # keys, as in the table
                )
        ax.set_xlabel(X_AXES.get(x, x))
        ax.set_title(name, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.08, y=0.1)
        if col.endswith("_rate"):  # shares: from 0, and a flat 0 line stays readable
            ax.set_ylim(-0.02, max(0.1, ax.get_ylim()[1]))
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:  # one legend for the figure: every family that appears in any panel
        for h, lbl in zip(*ax.get_legend_handles_labels(), strict=True):
            if lbl not in labels:
                handles.append(h)
                labels.append(lbl)
    if handles:
        axes[-1].legend(handles, labels, fontsize=7, loc="best")
    ev = df["eval"].iloc[0] if len(df) else ""
    fig.suptitle(title or f"{ev}: failure modes vs {X_AXES.get(x, x)}", fontsize=10)
    return fig


def steps_histogram_figure(rows: list[dict[str, Any]], cap: int | None, title: str) -> Figure | None:
    """Denoising steps per canvas over every canvas of a run, the step cap marked; None for AR runs."""
    steps = [s for r in rows for s in r.get("steps_per_canvas") or []]
    if not steps:
        return None
    hits = sum(r.get("step_cap_hits", 0) for r in rows)
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    top = max(max(steps), cap or 0)
    below = [s for s in steps if not cap or s < cap]
    at_cap = [s for s in steps if cap and s >= cap]
    ax.hist(
        [below, at_cap],
        bins=np.arange(0.5, top + 1.5),
        stacked=True,
        color=["C0", "C3"],
        edgecolor="white",
        label=["under the cap" if cap else "canvases", "at the cap"],
    )
    if cap:
        ax.axvline(
            cap + 0.5,
            color="C3",
            linestyle="--",
            label=f"step cap {cap}: {hits} of {len(steps)} canvases hit it ({hits / len(steps):.1%})",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("denoising steps per canvas")
    ax.set_ylabel("canvases")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig


def canvas_evolution_figure(row: dict[str, Any], title: str) -> Figure | None:
    """Step (rows, all canvases in order) vs position: red where the argmax token changed, mean entropy beside."""
    traj = row.get("trajectory") or []
    if not traj:
        return None
    width = max(len(t["argmax"]) for t in traj)
    changed = np.full((len(traj), width), np.nan)
    prev, prev_canvas, starts = None, None, []
    for i, t in enumerate(traj):
        a = np.asarray(t["argmax"])
        new = t["canvas"] != prev_canvas or prev is None or len(prev) != len(a)
        changed[i, : len(a)] = 1.0 if new else (a != prev).astype(float)
        if new:
            starts.append(i)
        prev, prev_canvas = a, t["canvas"]
    entropy = [t.get("mean_entropy", np.nan) for t in traj]
    fig = Figure(figsize=(9, max(3.0, 0.12 * len(traj) + 1.5)), layout="constrained")
    ax, ax_h = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [4, 1]})
    ax.imshow(
        changed, aspect="auto", interpolation="nearest", cmap=ListedColormap(["#eeeeee", "#d62728"]), vmin=0, vmax=1
    )
    for a, b in zip(starts, starts[1:] + [len(traj)]):  # one entropy segment per canvas
        ax_h.plot(entropy[a:b], np.arange(a, b), color="C0", marker=".", label="mean entropy" if a == 0 else None)
    for s in starts[1:]:
        for a in (ax, ax_h):
            a.axhline(s - 0.5, color="black", linewidth=0.8)
    ax.set_xlabel("position in canvas")
    ax.set_ylabel("step (canvases stacked)")
    ax.legend(
        handles=[Patch(color="#d62728", label="argmax token changed"), Patch(color="#eeeeee", label="unchanged")],
        fontsize=7,
        loc="lower right",
    )
    ax_h.set_xlabel("mean entropy")
    ax_h.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return fig


def save_figure(fig: Figure, out_dir: str | Path, stem: str) -> list[Path]:
    """PNG and SVG (SVG keeps text as text, so it stays searchable)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        for p in paths:
            fig.savefig(p, dpi=150)
    return paths


def safe_stem(s: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", str(s)).strip("_") or "run"


# ---- report ------------------------------------------------------------------------------------------------


@dataclass
class Report:
    # one row per run: on_front / front_area / aup_d3llm columns and the point columns of harness.figures.plot_points
    table: pd.DataFrame
    fronts: pd.DataFrame  # one row per (model, eval)
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEPS_COLUMNS))  # canvases per run
    files: list[Path] = field(default_factory=list)

    @property
    def pareto_pngs(self) -> list[Path]:
        return [p for p in self.files if p.name.startswith("pareto_") and p.suffix == ".png"]


STEPS_COLUMNS = ["run_name", "eval", "family", "steps", "canvases"]


def steps_table(run: pd.Series, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """How many canvases of a run took each number of denoising steps (no rows for AR runs)."""
    counts = pd.Series([s for r in rows for s in r.get("steps_per_canvas") or []], dtype=int).value_counts()
    return pd.DataFrame(
        {
            "run_name": run["run_name"],
            "eval": run["eval"],
            "family": run.get("family"),
            "steps": counts.index.astype(int),
            "canvases": counts.to_numpy(dtype=int),
        },
        columns=STEPS_COLUMNS,
    ).sort_values("steps", ignore_index=True)


def make_report(
    paths: Iterable[str | Path],
    out_dir: str | Path,
    tpf_range: tuple[float, float] | None = None,
    max_trajectories: int = 1,
    html: bool = True,
) -> Report:
    """Table + fronts + every figure for the runs under `paths`, written under `out_dir` (the sweep end calls this).
    The table gains the point columns the figures are drawn from (`harness.figures.plot_points`: family, default,
    Wilson interval, label) and is written again with them; `html`: the interactive Pareto pages beside the PNGs."""
    out_dir = Path(out_dir)
    table, fronts, files = summarize(paths, out_dir, tpf_range)
    if not table.empty:
        broken = table.attrs.get("broken", [])
        table = plot_points(table)
        table.attrs["broken"] = broken
        write_table(table, out_dir, "summary")
    report = Report(table, fronts, files=list(files))
    for ev, g in table.groupby("eval", sort=True):
        report.files += save_figure(diagnostics_figure(g), out_dir, f"diagnostics_{safe_stem(ev)}")
        if (fam := families_figure(g)) is not None:  # masked / uniform-state / AR runs side by side
            report.files += save_figure(fam, out_dir, f"families_{safe_stem(ev)}")
        if g["quality"].isna().all():
            print(f"[pareto] eval {ev!r} has no quality scores: no Pareto plot")
            continue
        for x in X_AXES:
            if g[x].notna().any():
                stem = f"pareto_{safe_stem(ev)}_{x}"
                report.files += save_figure(pareto_figure(g, x), out_dir, stem)
                if html:
                    report.files.append(pareto_html(g, x, out_dir / f"{stem}.html"))
    # d3LLM leaderboard tasks: ours beside the published rows; ParallelBench: score vs TPF per task and family;
    # the field's strategies: one front per sampler rule beside ours
    figures = {**leaderboard_figures(table), **parallelbench_figures(table), **strategies_figures(table)}
    for stem, fig in figures.items():
        report.files += save_figure(fig, out_dir, safe_stem(stem))
    series = scaling_series(table)  # one model at several batch sizes: throughput vs concurrency
    found = crossovers(series)
    for ev, g in series.groupby("eval", sort=True):
        fig = scaling_figure(g, [x for x in found if x.eval == ev], f"throughput vs concurrency: {ev}")
        report.files += save_figure(fig, out_dir, f"scaling_{safe_stem(ev)}")
        fig = latency_figure(g, f"latency vs throughput over concurrency: {ev}")
        report.files += save_figure(fig, out_dir, f"latency_{safe_stem(ev)}")
    lengths = length_series(table)  # batch-1 runs at several output lengths: where diffusion overtakes AR
    found_lengths = length_crossovers(lengths)
    for ev, g in lengths.groupby("eval", sort=True):
        fig = length_figure(g, [x for x in found_lengths if x.eval == ev], f"single-user speed vs output length: {ev}")
        report.files += save_figure(fig, out_dir, f"length_crossover_{safe_stem(ev)}")
    seen: set[str] = set()
    steps = []
    for _, r in table.iterrows():
        stem = safe_stem(r["run_name"])
        stem = stem if stem not in seen else f"{stem}_{len(seen)}"
        seen.add(stem)
        rows = read_samples(r["run_dir"])
        steps.append(steps_table(r, rows))
        cap = r.get(f"{SAMPLER_PREFIX}max_steps")
        title = f"{r['run_name']} ({r['model']}, {r['eval']})"
        hist = steps_histogram_figure(rows, int(cap) if pd.notna(cap) else None, title)
        if hist is not None:
            report.files += save_figure(hist, out_dir / "runs", f"{stem}_steps")
        for row in [row for row in rows if row.get("trajectory")][:max_trajectories]:
            fig = canvas_evolution_figure(row, f"{title}: sample {row['sample_id']}")
            report.files += save_figure(fig, out_dir / "runs", f"{stem}_canvas_{safe_stem(row['sample_id'])}")
    if steps:
        report.steps = pd.concat(steps, ignore_index=True)
    if (out_dir / "plotly.min.js").exists() and html:
        report.files.append(out_dir / "plotly.min.js")
    return report


def main(argv: list[str] | None = None) -> None:
    ap = cli_parser("harness.pareto", __doc__, "outputs/plots", "where the table and the figures go")
    ap.add_argument("--max-trajectories", type=int, default=1, help="canvas-evolution figures per run")
    ap.add_argument("--no-html", action="store_true", help="skip the interactive (plotly) Pareto pages")
    args = ap.parse_args(argv)
    report = make_report(args.paths, args.out, tpf_range(args), args.max_trajectories, html=not args.no_html)
    print_summary(report.table, report.fronts)
    print(f"\nwrote {len(report.files)} files under {args.out}")


if __name__ == "__main__":
    main()
