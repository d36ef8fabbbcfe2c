"""Throughput against concurrency: per-user and total tokens/s per model, and where AR catches up.

Why: a block-diffusion model wins at batch 1 (many tokens per forward) but a batched AR model fills the GPU
with more users; the report locates the crossover at about 32 concurrent users. Runs of one model on one eval
at two or more batch sizes (`experiment=report_batch_scaling`) form a scaling series; the crossover is the
concurrency where a challenger's total tokens/s first reaches the block-diffusion model's, interpolated
linearly on log2(concurrency) between the two measured batch sizes around it (None when it never does in the
measured range). Batch size = concurrency: the engine keeps that many requests in flight while the queue lasts.

What a user waits is the other side of throughput: per run the p50 / p95 / p99 time to first token and end-to-end
latency and per-user tokens/s, and for a run that streams its stable prefix the time to first visible token and the
share of samples with a revised shown token (`format_latency`), and over concurrency latency against total tokens/s
(`latency_figure`: more users buy throughput with waiting).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.analysis.series import is_uniform
from harness.analysis.series import style as series_style

TOTAL, PER_USER = "tokens_per_second", "mean_user_tokens_per_second"
SERIES = ["eval", "model", "label"]
LATENCY_COLUMNS = [
    *(f"ttft_p{q}_s" for q in (50, 95, 99)),
    *(f"latency_p{q}_s" for q in (50, 95, 99)),
    *(f"user_tokens_per_second_p{q}" for q in (50, 5, 1)),
    # sampler.stream_after_stable runs (harness.engine.stable_stream): first visible token, and how often shown ones
    # change
    *(f"ttfv_p{q}_s" for q in (50, 95, 99)),
    "revision_rate",
    "mean_revised_tokens",
]


@dataclass(frozen=True)
class Crossover:
    eval: str
    leader: str  # the block-diffusion model (faster at low concurrency)
    challenger: str
    concurrency: float | None  # None: the challenger never reaches the leader in the measured range
    report: float | None  # what the report says (`report_crossover_concurrency`), where a preset gave it


def scaling_series(table: pd.DataFrame) -> pd.DataFrame:
    """The runs that belong to a scaling series (a model measured at >= 2 batch sizes on one eval), sorted."""
    need = {*SERIES, "batch_size", TOTAL}
    if table.empty or not need <= set(table):
        return table.iloc[0:0]
    df = table.dropna(subset=["batch_size", TOTAL]).copy()
    df["batch_size"] = pd.to_numeric(df["batch_size"], errors="coerce")
    sizes = df.groupby(SERIES, dropna=False)["batch_size"].transform("nunique")
    return df[sizes >= 2].sort_values([*SERIES, "batch_size"]).reset_index(drop=True)


def _first_crossing(lead: pd.Series, chal: pd.Series) -> float | None:
    """Smallest concurrency where chal >= lead (both indexed by batch size), log2-interpolated."""
    common = sorted(set(lead.index) & set(chal.index))
    diff = [(c, float(chal[c]) - float(lead[c])) for c in common]
    for i, (c, d) in enumerate(diff):
        if d >= 0:
            if i == 0:
                return float(c)
            c0, d0 = diff[i - 1]
            x0, x1 = math.log2(c0), math.log2(c)
            return float(2 ** (x0 + (x1 - x0) * (-d0) / (d - d0)))
    return None


def crossovers(series: pd.DataFrame) -> list[Crossover]:
    """Per eval: each non-diffusion model's crossover with each diffusion model, on total tokens/s."""
    out: list[Crossover] = []
    for ev, g in series.groupby("eval", sort=True):
        curves = {m: s.set_index("batch_size")[TOTAL] for m, s in g.groupby("model")}
        labels = g.groupby("model")["label"].first()
        report = g.get("report_crossover_concurrency", pd.Series(dtype=float)).dropna()
        expected = float(report.iloc[0]) if len(report) else None
        for leader in sorted(m for m in curves if is_uniform(labels[m])):
            for challenger in sorted(m for m in curves if not is_uniform(labels[m])):
                at = _first_crossing(curves[leader], curves[challenger])
                out.append(Crossover(str(ev), leader, challenger, at, expected))
    return out


def format_scaling(series: pd.DataFrame, found: list[Crossover]) -> str:
    """The scaling table (per-user and total tokens/s by concurrency) and one line per crossover."""
    if series.empty:
        return ""
    cols = [c for c in [*SERIES, "batch_size", PER_USER, TOTAL, "tpf", "ttft_p50_s", "latency_p95_s"] if c in series]
    lines = [series[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    for x in found:
        at = f"{x.concurrency:.3g} concurrent requests" if x.concurrency else "not reached in the measured range"
        rep = f" (report: about {x.report:g})" if x.report is not None else ""
        lines.append(f"crossover on {x.eval}: {x.challenger} reaches {x.leader}'s total tokens/s at {at}{rep}")
    return "\n".join(lines)


def scaling_figure(series: pd.DataFrame, found: list[Crossover], title: str | None = None):
    """Two panels against concurrency (log2 axis): per-user and total tokens/s, one line per model, the
    crossover(s) as dashed vertical lines. (matplotlib is imported here: the tables need none.)"""
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    fig = Figure(figsize=(11, 4.5))
    axes = fig.subplots(1, 2)
    for ax, metric, name in ((axes[0], PER_USER, "per-user tokens/s"), (axes[1], TOTAL, "total tokens/s")):
        for (_, model, label), g in series.groupby(SERIES, sort=True):
            if metric in g:
                ax.plot(g["batch_size"], g[metric], marker=series_style(label).marker, label=f"{model}")
        for x in found:
            if x.concurrency:
                ax.axvline(x.concurrency, ls="--", c="grey", lw=1)
                ax.annotate(
                    f"{x.challenger} overtakes\n@ {x.concurrency:.3g}",
                    (x.concurrency, 0.95),
                    xycoords=("data", "axes fraction"),
                    ha="left",
                    va="top",
                    fontsize=8,
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(series["batch_size"].unique()))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("concurrent requests (batch size)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "throughput vs concurrency")
    fig.tight_layout()
    return fig


def format_latency(table: pd.DataFrame) -> str:
    """Per run: the time-to-first-token, latency and per-user tokens/s percentiles, and the streaming figures where a
    run streamed ("" when none were recorded; a column no run recorded is left out)."""
    cols = [c for c in LATENCY_COLUMNS if c in table and table[c].notna().any()]
    if table.empty or not cols or table[cols].isna().all().all():
        return ""
    ids = [c for c in ["run_name", "label", "batch_size"] if c in table]
    return table[ids + cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")


def latency_figure(series: pd.DataFrame, title: str | None = None):
    """Latency against throughput over concurrency: time to first token and end-to-end latency (p50 solid, p95
    dashed) vs total tokens/s, one line per model through its batch sizes, each point labelled with its
    concurrency."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    axes = fig.subplots(1, 2)
    panels = ((axes[0], "ttft", "time to first token (s)"), (axes[1], "latency", "end-to-end latency (s)"))
    for ax, key, name in panels:
        for i, ((_, model, label), g) in enumerate(series.groupby(SERIES, sort=True)):
            for q, style in ((50, "-"), (95, "--")):
                col = f"{key}_p{q}_s"
                if col not in g or g[col].isna().all():
                    continue
                marker = series_style(label).marker
                ax.plot(g[TOTAL], g[col], style, marker=marker, color=f"C{i}", label=f"{model} p{q}")
                if q == 50:
                    for x, y, c in zip(g[TOTAL], g[col], g["batch_size"], strict=True):
                        ax.annotate(f"{c:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel("total tokens/s (all users)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or "latency vs throughput over concurrency (points: concurrent requests)")
    return fig
