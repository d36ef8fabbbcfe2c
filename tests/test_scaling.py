"""Throughput vs concurrency (harness/analysis/scaling.py): which runs form a series, and where AR catches up."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.scaling import crossovers, format_scaling, scaling_figure, scaling_series


def _table(dg: list[float], ar: list[float], sizes=(1, 2, 4, 8, 16, 32, 64), report: float | None = 32.0):
    rows = []
    for model, label, tps in (("dg", "diffusion", dg), ("ar", "ar", ar)):
        for b, t in zip(sizes, tps):
            rows.append(
                {
                    "eval": "prompts-n64-abc123",
                    "model": model,
                    "label": label,
                    "batch_size": b,
                    "tokens_per_second": t,
                    "mean_user_tokens_per_second": t / b,
                    "tpf": 10.0 if label == "diffusion" else 1.0,
                    "report_crossover_concurrency": report,
                }
            )
    rows.append({"eval": "other", "model": "dg", "label": "diffusion", "batch_size": 1, "tokens_per_second": 5.0})
    return pd.DataFrame(rows)


def test_crossover_is_interpolated_on_log2_concurrency():
    # AR's total reaches DG's between 8 (200 vs 400: -200) and 16 (800 vs 600: +200): halfway in log2 -> 8 * 2**0.5
    table = _table(dg=[100, 180, 300, 400, 600, 700, 750], ar=[20, 40, 90, 200, 800, 1600, 3000])
    series = scaling_series(table)
    assert set(series["eval"]) == {"prompts-n64-abc123"}  # a model at one batch size is no series
    [x] = crossovers(series)
    assert (x.leader, x.challenger, x.report) == ("dg", "ar", 32.0)
    assert x.concurrency == pytest.approx(8 * math.sqrt(2))
    text = format_scaling(series, [x])
    assert "ar reaches dg's total tokens/s at 11.3 concurrent requests (report: about 32)" in text
    fig = scaling_figure(series, [x])
    assert len(fig.axes) == 2 and all(len(ax.lines) == 3 for ax in fig.axes)  # two models + the crossover line


def test_no_crossover_in_range_and_ar_ahead_from_the_start():
    never = crossovers(scaling_series(_table(dg=[100] * 7, ar=[10] * 7, report=None)))
    assert [(x.concurrency, x.report) for x in never] == [(None, None)]
    assert "not reached in the measured range" in format_scaling(scaling_series(_table([100] * 7, [10] * 7)), never)
    ahead = crossovers(scaling_series(_table(dg=[10] * 7, ar=[100] * 7)))
    assert ahead[0].concurrency == 1.0


def test_tables_without_batch_sizes_have_no_series():
    assert scaling_series(pd.DataFrame({"eval": ["e"], "model": ["m"], "label": ["ar"]})).empty
    assert scaling_series(pd.DataFrame()).empty


def test_latency_table_and_latency_vs_throughput_figure():
    from harness.analysis.scaling import format_latency, latency_figure

    table = _table(dg=[100, 180, 300, 400, 600, 700, 750], ar=[20, 40, 90, 200, 800, 1600, 3000])
    series = scaling_series(table).assign(
        ttft_p50_s=lambda d: 0.1 * d["batch_size"],
        ttft_p95_s=lambda d: 0.2 * d["batch_size"],
        latency_p50_s=lambda d: 1.0 * d["batch_size"],
        latency_p95_s=lambda d: 2.0 * d["batch_size"],
    )
    fig = latency_figure(series)
    ttft, latency = fig.axes
    lines = {ln.get_label(): ln for ln in latency.lines}
    assert set(lines) == {"dg p50", "dg p95", "ar p50", "ar p95"}  # p99 not recorded here: not drawn
    assert list(lines["ar p95"].get_xdata()) == [20, 40, 90, 200, 800, 1600, 3000]  # x: total tokens/s
    assert list(lines["ar p95"].get_ydata()) == [2.0 * b for b in (1, 2, 4, 8, 16, 32, 64)]
    assert [t.get_text() for t in ttft.texts][:3] == ["1", "2", "4"]  # each p50 point names its concurrency
    text = format_latency(series.assign(run_name="r"))
    assert "ttft_p50_s" in text.splitlines()[0] and "latency_p95_s" in text.splitlines()[0]
    assert format_latency(table) == ""  # no latency recorded: no table
