"""Speed/quality trade-off figures: Pareto fronts, steps-per-canvas histograms, canvas evolution.

The front and its area (AUP) are computed in `harness.fronts` and marked in the run table by
`harness.aggregate`; this module only draws them (the one module here that imports matplotlib).
Points are labelled with the sampler knobs that vary between the plotted runs, spelled as in run names
(`samplers.knobs`).

CLI: `python -m harness.pareto PATH... --out outputs/plots` writes the run table (see harness.aggregate),
per eval `pareto_<eval>_tpf.{png,svg}`, `pareto_<eval>_tokens_per_second.{png,svg}` and
`diagnostics_<eval>.{png,svg}` (stutter rate, output length, step-cap rate vs TPF per sampler family), and per run
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

from harness.aggregate import SAMPLER_PREFIX, cli_parser, print_summary, summarize, tpf_range, varying_knobs
from harness.fronts import front_mask
from harness.store import read_samples
from samplers.knobs import label_part

MARKERS = {"diffusion": "o", "ar": "s", "ar+mtp": "^", "ar+draft": "D"}
LABEL_NAMES = {"diffusion": "diffusion", "ar": "AR", "ar+mtp": "AR+MTP", "ar+draft": "AR+draft"}
X_AXES = {"tpf": "tokens per forward (TPF)", "tokens_per_second": "tokens / s"}


# ---- figures ----------------------------------------------------------------------------------------------


def point_label(row: pd.Series, knobs: list[str]) -> str:
    if row["label"] != "diffusion":
        return LABEL_NAMES.get(row["label"], str(row["label"]))
    parts = []
    for c in knobs:
        v = row[c]
        if v is None or (isinstance(v, float) and np.isnan(v)):
            continue
        parts.append(label_part(c[len(SAMPLER_PREFIX) :], v))
    return " ".join(parts) or str(row.get("sampler") or "")


def pareto_figure(df: pd.DataFrame, x: str = "tpf", title: str | None = None) -> Figure:
    """Quality vs `x` for the runs of one eval: a point per run, a marker per label, a colour and a front per model."""
    fig = Figure(figsize=(10, 6.5), layout="constrained")
    ax = fig.subplots()
    knobs = varying_knobs(df)
    for ci, (model, dm) in enumerate(df.groupby("model", sort=True, dropna=False)):
        color = f"C{ci % 10}"
        for label, dl in dm.groupby("label", sort=True, dropna=False):
            ax.scatter(
                dl[x],
                dl["quality"],
                marker=MARKERS.get(label, "X"),
                s=60 if label == "diffusion" else 110,
                color=color,
                edgecolors="black",
                linewidths=0.6,
                zorder=3,
                label=f"{model} · {LABEL_NAMES.get(label, label)}",
            )
        mask = front_mask(dm[x], dm["quality"])
        f = dm[mask].sort_values(x)
        aup = ""
        if x == "tpf" and "aup" in dm and pd.notna(dm["aup"].iloc[0]):
            lo, hi = dm["aup_tpf_min"].iloc[0], dm["aup_tpf_max"].iloc[0]
            aup = f" (AUP {dm['aup'].iloc[0]:.3f} over TPF {lo:.3g}-{hi:.3g})"
        ax.plot(
            f[x],
            f["quality"],
            drawstyle="steps-pre",
            color=color,
            linestyle="--",
            linewidth=1.4,
            zorder=2,
            label=f"front: {model}{aup}",
        )
        labelled = dm[x].notna() & dm["quality"].notna() & (mask | (dm["label"] != "diffusion"))
        for _, r in dm[labelled].iterrows():  # knobs on front points and baselines only: the table has every run
            ax.annotate(
                point_label(r, knobs),
                (r[x], r["quality"]),
                xytext=(5, 4),
                textcoords="offset points",
                fontsize=7,
                color="0.25",
            )
    ev = df["eval"].iloc[0] if len(df) else ""
    ax.set_xlabel(X_AXES.get(x, x))
    ax.set_ylabel(f"quality ({ev})")
    ax.set_title(title or f"{ev}: quality vs {X_AXES.get(x, x)}")
    ax.margins(x=0.1, y=0.08)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig


DIAGNOSTIC_PANELS = {
    "stutter_rate": "stutter rate (samples with a repeat loop)",
    "mean_output_tokens": "mean output tokens",
    "step_cap_hit_rate": "step-cap hit rate (canvases)",
}


def sampler_family(row: pd.Series) -> str:
    """The series a run belongs to in the diagnostics figure: its sampler (diffusion) or its baseline kind."""
    if row["label"] != "diffusion":
        return LABEL_NAMES.get(row["label"], str(row["label"]))
    return str(row.get("sampler") or "diffusion")


def diagnostics_figure(df: pd.DataFrame, x: str = "tpf", title: str | None = None) -> Figure:
    """Small multiples for the runs of one eval: stutter rate, mean output length and step-cap hit rate vs `x`,
    one line per sampler family (per model when several), baselines as markers. AR runs have no canvases, so
    they are left out of the step-cap panel."""
    fig = Figure(figsize=(13, 4.2), layout="constrained")
    axes = fig.subplots(1, len(DIAGNOSTIC_PANELS), sharex=True)
    several_models = df["model"].nunique(dropna=False) > 1 if len(df) else False
    series = df.assign(_family=[sampler_family(r) for _, r in df.iterrows()]) if len(df) else df
    for ax, (col, name) in zip(axes, DIAGNOSTIC_PANELS.items(), strict=True):
        if col not in df or pd.to_numeric(df[col], errors="coerce").isna().all():
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", va="center", color="0.5")
        else:
            for si, ((model, family), g) in enumerate(series.groupby(["model", "_family"], sort=True, dropna=False)):
                if col == "step_cap_hit_rate" and "num_canvases" in g:
                    g = g[pd.to_numeric(g["num_canvases"], errors="coerce").fillna(0) > 0]
                g = g.assign(_y=pd.to_numeric(g[col], errors="coerce")).dropna(subset=[x, "_y"]).sort_values(x)
                if g.empty:
                    continue
                label = g["label"].iloc[0]
                ax.plot(
                    g[x],
                    g["_y"],
                    marker=MARKERS.get(label, "X"),
                    linestyle="-" if label == "diffusion" else "none",
                    markersize=6 if label == "diffusion" else 9,
                    markeredgecolor="black",
                    markeredgewidth=0.5,
                    color=f"C{si % 10}",
                    label=f"{model} · {family}" if several_models else family,
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
    table: pd.DataFrame  # one row per run, with on_front / aup columns
    fronts: pd.DataFrame  # one row per (model, eval)
    files: list[Path] = field(default_factory=list)

    @property
    def pareto_pngs(self) -> list[Path]:
        return [p for p in self.files if p.name.startswith("pareto_") and p.suffix == ".png"]


def make_report(
    paths: Iterable[str | Path],
    out_dir: str | Path,
    tpf_range: tuple[float, float] | None = None,
    max_trajectories: int = 1,
) -> Report:
    """Table + fronts + every figure for the runs under `paths`, written under `out_dir` (the sweep end calls this)."""
    out_dir = Path(out_dir)
    table, fronts, files = summarize(paths, out_dir, tpf_range)
    report = Report(table, fronts, list(files))
    for ev, g in table.groupby("eval", sort=True):
        report.files += save_figure(diagnostics_figure(g), out_dir, f"diagnostics_{safe_stem(ev)}")
        if g["quality"].isna().all():
            print(f"[pareto] eval {ev!r} has no quality scores: no Pareto plot")
            continue
        for x in X_AXES:
            if g[x].notna().any():
                report.files += save_figure(pareto_figure(g, x), out_dir, f"pareto_{safe_stem(ev)}_{x}")
    seen: set[str] = set()
    for _, r in table.iterrows():
        stem = safe_stem(r["run_name"])
        stem = stem if stem not in seen else f"{stem}_{len(seen)}"
        seen.add(stem)
        rows = read_samples(r["run_dir"])
        cap = r.get(f"{SAMPLER_PREFIX}max_steps")
        title = f"{r['run_name']} ({r['model']}, {r['eval']})"
        hist = steps_histogram_figure(rows, int(cap) if pd.notna(cap) else None, title)
        if hist is not None:
            report.files += save_figure(hist, out_dir / "runs", f"{stem}_steps")
        for row in [row for row in rows if row.get("trajectory")][:max_trajectories]:
            fig = canvas_evolution_figure(row, f"{title}: sample {row['sample_id']}")
            report.files += save_figure(fig, out_dir / "runs", f"{stem}_canvas_{safe_stem(row['sample_id'])}")
    return report


def main(argv: list[str] | None = None) -> None:
    ap = cli_parser("harness.pareto", __doc__, "outputs/plots", "where the table and the figures go")
    ap.add_argument("--max-trajectories", type=int, default=1, help="canvas-evolution figures per run")
    args = ap.parse_args(argv)
    report = make_report(args.paths, args.out, tpf_range(args), args.max_trajectories)
    print_summary(report.table, report.fronts)
    print(f"\nwrote {len(report.files)} files under {args.out}")


if __name__ == "__main__":
    main()
