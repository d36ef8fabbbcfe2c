"""Single-user speed vs output length (harness/analysis/lengths.py) and the output_lengths twin, end to end."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from harness.analysis.lengths import format_lengths, length_crossovers, length_figure, length_series, wins_from
from tests.helpers.app import REPO, run_app


def _table(dg: list[float], ar: list[float], lengths=(32, 128, 256, 512, 1024)) -> pd.DataFrame:
    rows = []
    for model, label, tps, canvas in (("dg", "diffusion", dg, 256), ("ar", "ar", ar, None)):
        for n, t in zip(lengths, tps, strict=True):
            rows.append(
                {
                    "eval": "prompts-n16-abc",
                    "model": model,
                    "label": label,
                    "batch_size": 1,
                    "max_new_tokens": n,
                    "tokens_per_second": t,
                    "decoder.canvas_length": canvas,
                    "tpf": 10.0 if label == "diffusion" else 1.0,
                }
            )
    rows.append({**rows[0], "batch_size": 8, "tokens_per_second": 1.0})  # not single-user: left out
    return pd.DataFrame(rows)


def test_crossover_holds_from_a_length_on():
    # diffusion loses at 32 and 128 (-100 and -50), wins from 256 (+50): halfway in log2 between 128 and 256
    series = length_series(_table(dg=[100, 150, 250, 400, 700], ar=[200, 200, 200, 200, 200]))
    assert set(series["series"]) == {"dg (canvas 256)", "ar"} and (series["batch_size"] == 1).all()
    [x] = length_crossovers(series)
    assert (x.diffusion, x.baseline, x.measured) == ("dg (canvas 256)", "ar", (32, 1024))
    assert x.length == pytest.approx(2 ** (math.log2(128) + 0.5))
    text = format_lengths(series, [x])
    assert "dg (canvas 256) beats ar's single-user tokens/s from an output length of 181 tokens" in text
    fig = length_figure(series, [x])
    assert len(fig.axes) == 3 and "dg (canvas 256) > ar from 181" in fig._suptitle.get_text()


def test_no_crossover_when_diffusion_still_loses_at_the_longest_length():
    base = pd.Series([200.0] * 4, index=[32, 128, 256, 512])
    assert wins_from(base, pd.Series([100.0, 300.0, 300.0, 150.0], index=base.index)) is None  # a middle win only
    assert wins_from(base, pd.Series([300.0] * 4, index=base.index)) == 32.0  # ahead from the start
    series = length_series(_table(dg=[10] * 5, ar=[200] * 5))
    text = format_lengths(series, length_crossovers(series))
    assert "at no output length in the measured range (32-1024 tokens)" in text


@pytest.mark.slow
def test_output_lengths_twin_end_to_end(tmp_path):
    """Both twins into one sweep folder: the summary names a crossover length (or none) per diffusion series and
    baseline, every output runs to its cap, and the figure is drawn."""
    sweep = tmp_path / "sweep"
    run_app("experiment=twin/output_lengths", f"hydra.sweep.dir={sweep}", timeout=900)
    proc = run_app("experiment=twin/output_lengths_matched", f"hydra.sweep.dir={sweep}", timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("length crossover on")]
    pairs = {
        (d, b)
        for d in ("tiny_diffusion (canvas 16)", "tiny_diffusion (canvas = output)")
        for b in ("tiny_ar", "tiny_ar_draft")
    }
    assert len(lines) == 4 and all(any(f"{d} beats {b}'s" in line for line in lines) for d, b in pairs)
    assert all(("from an output length of" in line) != ("at no output length" in line) for line in lines)
    metrics = [json.loads(p.read_text()) for p in sweep.glob("*/metrics.json")]
    assert len(metrics) == 3 * 4 + 2
    for m in metrics:  # the twin's EOS id is out of every model's reach: outputs run to their cap
        assert m["mean_output_tokens"] == m["max_new_tokens"] and m["batch_size"] == 1
        assert m["ttft_p50_s"] <= m["latency_p50_s"]
    assert list((sweep / "summary").glob("length_crossover_prompts-*.png"))
    assert (REPO / "conf/experiment/output_lengths.yaml").is_file()
