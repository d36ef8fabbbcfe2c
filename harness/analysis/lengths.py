"""Single-user speed against output length: from which length parallel denoising beats AR decoding.

Why: a block-diffusion model pays for whole canvases, so a 32-token answer still costs a 256-token canvas's
denoising, while AR pays per token; past some output length diffusion's tokens/s should win. Runs at batch 1 of
one decoder on one eval at two or more `max_new_tokens` (`experiment=output_lengths`) form a length series; a
diffusion model at a fixed canvas is one series (`<model> (canvas 256)`), with its canvas matched to each output
length (`sampler.canvas_length` = `max_new_tokens`) another (`<model> (canvas = output)`). The crossover is the
output length from which the diffusion series' tokens/s stays at or above a baseline's at every longer measured
length, interpolated on log2(length) between the last measured length where it lost and the next; None when it
still loses at the longest measured length (a win at some middle length only is no crossover).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.analysis.scaling import TOTAL
from harness.analysis.series import is_uniform
from harness.analysis.series import style as series_style

LENGTH = "max_new_tokens"
CANVAS = "decoder.canvas_length"  # the canvas the run decoded with
SET_CANVAS = "sampler.canvas_length"  # the knob: null = the model's own
SHOWN = [LENGTH, "mean_output_tokens", TOTAL, "tpf", "ttft_p50_s", "latency_p50_s", "latency_p95_s"]


@dataclass(frozen=True)
class LengthCrossover:
    eval: str
    diffusion: str  # the diffusion series (model and canvas)
    baseline: str  # an AR / AR + draft / AR + MTP model
    length: float | None  # output length from which diffusion's tokens/s beats the baseline's; None: not in range
    measured: tuple[int, int]  # the output lengths both were measured at: shortest, longest


def length_series(table: pd.DataFrame) -> pd.DataFrame:
    """Batch-1 runs of a decoder (`series`: model, plus the canvas for diffusion) at >= 2 output lengths."""
    if table.empty or not {"eval", "model", "label", "batch_size", LENGTH, TOTAL} <= set(table):
        return table.iloc[0:0]
    df = table[pd.to_numeric(table["batch_size"], errors="coerce") == 1].dropna(subset=[LENGTH, TOTAL]).copy()
    if df.empty:
        return df
    df[LENGTH] = pd.to_numeric(df[LENGTH])
    nan = pd.Series(float("nan"), index=df.index)
    canvas = pd.to_numeric(df[CANVAS], errors="coerce") if CANVAS in df else nan
    matched = (pd.to_numeric(df[SET_CANVAS], errors="coerce") if SET_CANVAS in df else nan) == df[LENGTH]
    df["series"] = [
        str(m) if not is_uniform(lbl) else f"{m} (canvas = output)" if same else f"{m} (canvas {c:g})"
        for m, lbl, c, same in zip(df["model"], df["label"], canvas, matched, strict=True)
    ]
    lengths = df.groupby(["eval", "series"])[LENGTH].transform("nunique")
    return df[lengths >= 2].sort_values(["eval", "label", "series", LENGTH]).reset_index(drop=True)


def wins_from(base: pd.Series, dg: pd.Series) -> float | None:
    """Smallest length from which dg >= base at every longer measured length (both indexed by length)."""
    common = sorted(set(base.index) & set(dg.index))
    diff = [(x, float(dg[x]) - float(base[x])) for x in common]
    losses = [i for i, (_, d) in enumerate(diff) if d < 0]
    if not losses:
        return float(common[0]) if common else None
    last = losses[-1]
    if last == len(diff) - 1:
        return None
    (x0, d0), (x1, d1) = diff[last], diff[last + 1]
    t = -d0 / (d1 - d0)  # where the straight line between the two measured points crosses zero
    return float(2 ** (math.log2(x0) + (math.log2(x1) - math.log2(x0)) * t))


def length_crossovers(series: pd.DataFrame) -> list[LengthCrossover]:
    """Per eval: each diffusion series against each baseline, on single-user tokens/s."""
    out: list[LengthCrossover] = []
    for ev, g in series.groupby("eval", sort=True):
        curves = {s: x.set_index(LENGTH)[TOTAL] for s, x in g.groupby("series")}
        labels = g.groupby("series")["label"].first()
        for dg in sorted(s for s in curves if is_uniform(labels[s])):
            for base in sorted(s for s in curves if not is_uniform(labels[s])):
                common = sorted(set(curves[base].index) & set(curves[dg].index))
                if common:
                    at = wins_from(curves[base], curves[dg])
                    out.append(LengthCrossover(str(ev), dg, base, at, (int(common[0]), int(common[-1]))))
    return out


def format_lengths(series: pd.DataFrame, found: list[LengthCrossover]) -> str:
    """Per decoder: tokens/s, TPF and latency per output length; one line per crossover (or its absence)."""
    if series.empty:
        return ""
    cols = ["eval", "series", "label"] + [c for c in SHOWN if c in series]
    lines = [series[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    for x in found:
        lo, hi = x.measured
        where = (
            f"from an output length of {x.length:.3g} tokens"
            if x.length is not None
            else f"at no output length in the measured range ({lo}-{hi} tokens)"
        )
        lines.append(f"length crossover on {x.eval}: {x.diffusion} beats {x.baseline}'s single-user tokens/s {where}")
    return "\n".join(lines)


def length_figure(series: pd.DataFrame, found: list[LengthCrossover], title: str | None = None):
    """Three panels against output length (log2 axis): single-user tokens/s, end-to-end latency (p50) and TPF,
    one line per decoder series, each crossover as a dashed vertical line."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    fig = Figure(figsize=(15, 4.5), layout="constrained")
    axes = fig.subplots(1, 3)
    panels = ((TOTAL, "single-user tokens/s"), ("latency_p50_s", "latency p50 (s)"), ("tpf", "tokens per forward"))
    for ax, (col, name) in zip(axes, panels, strict=True):
        for (name_, label), g in series.groupby(["series", "label"], sort=True):
            if col in g and g[col].notna().any():
                ax.plot(g[LENGTH], g[col], marker=series_style(label).marker, label=name_)
        for x in found:
            if x.length is not None:
                ax.axvline(x.length, ls="--", c="grey", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(series[LENGTH].unique()))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("output length (max_new_tokens)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    notes = [f"{x.diffusion} > {x.baseline} from {x.length:.3g}" for x in found if x.length is not None]
    fig.suptitle((title or "single-user speed vs output length") + (f"  ({'; '.join(notes)})" if notes else ""))
    return fig
