"""PBx: our rule (harness.analysis.parallelbench) on hand-made sweeps, and against every published PBx of
parallelbench.github.io, recomputed from the site's own per-setting data (a copy OUTSIDE the repo at
PARALLELBENCH_SITE, default /work/refs/parallelbench/site; skipped where absent)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.parallelbench import pbx, pbx_table

SITE = Path(os.environ.get("PARALLELBENCH_SITE", "/work/refs/parallelbench/site"))


def test_pbx_interpolates_adaptive_and_steps_fixed_settings():
    tps, score = [1.5, 3.0, 4.5], [90.0, 82.0, 70.0]
    assert pbx(tps, score, 80) == pytest.approx(3.0 + 2 / 12 * 1.5)
    assert pbx(tps, score, 95) == 0.0  # the slowest point is already below
    assert pbx(tps, score, 60) == 4.5  # never below: the fastest point, no extrapolation
    assert pbx([1, 2, 4], [86.0, 74.0, 60.0], 80) == 1.0  # whole tokens-per-step: top-k, no interpolation
    assert pbx([1, 2, 2, 3.5], [80.0, 50.0, 70.0, 10.0], 75) == pytest.approx(1.5)  # the best score at a tie counts


def test_pbx_table_groups_strategies_and_reports_both_axes():
    rows = []
    for k, (q, nfe_tps, tpf) in enumerate([(0.9, 2.0, 1.0), (0.7, 4.5, 2.5)]):
        for task in ("waiting_line/copy", "puzzle/sudoku_n4_12"):
            rows.append(
                {
                    "model": "m",
                    "label": "diffusion",
                    "sampler": "t",
                    "sampler.threshold": k,
                    "pb_task": task,
                    "quality": q,
                    "pb_tokens_per_step": nfe_tps,
                    "tpf": tpf,
                }
            )
    rows.append({**rows[0], "pb_task": "waiting_line/sort"})  # one setting only: does not enter
    out = pbx_table(pd.DataFrame(rows)).iloc[0]
    assert out["sampler"] == "t" and out["tasks"] == 2 and out["settings"] == 2
    assert out["PB80"] == pytest.approx(3.25) and out["PB80_tpf"] == pytest.approx(1.75)


@pytest.mark.skipif(not (SITE / "data/leaderboard").is_dir(), reason=f"no copy of the site's data at {SITE}")
def test_pbx_reproduces_every_published_leaderboard_value():
    checked = 0
    for board in sorted((SITE / "data/leaderboard").glob("*.json")):
        published = json.loads(board.read_text())
        for strategy, values in published["results"].items():
            with open(SITE / "data/figures" / board.stem / f"{strategy}.csv") as f:
                avg = [r for r in csv.DictReader(f) if r["task"] == "avg"]
            for x in published["thresholds"]:
                ours = pbx([float(r["tps"]) for r in avg], [float(r["accuracy"]) for r in avg], x)
                assert ours == pytest.approx(values[str(x)], abs=1e-9), (board.stem, strategy, x)
                checked += 1
    assert checked == 99  # 33 model x strategy rows x 3 thresholds


def test_pbx_of_each_task_alone_where_the_mean_over_tasks_is_zero():
    """Copy at 100% up to 12.5 tokens/step, sort failed: PB80 on the mean is 0, on copy past 12.5 (interpolated)."""
    from harness.analysis.parallelbench import pbx_table, task_pbx_table

    rows = [
        {"model": "m", "label": "masked", "sampler": "s", "sampler.threshold": thr, "pb_task": task,
         "quality": q, "pb_tokens_per_step": tps, "tpf": tps / 2}
        for thr, tps, copy_q, sort_q in ((0.9, 3.5, 1.0, 0.25), (0.5, 12.5, 1.0, 0.0), (0.1, 20.5, 0.5, 0.0))
        for task, q in (("waiting_line/copy", copy_q), ("waiting_line/sort", sort_q))
    ]  # fmt: skip
    table = pd.DataFrame(rows)
    assert pbx_table(table)["PB80"].tolist() == [0.0]
    per_task = task_pbx_table(table).iloc[0]
    assert per_task["sort"] == 0.0
    assert per_task["copy"] == pytest.approx(12.5 + (100 - 80) / (100 - 50) * (20.5 - 12.5))  # interpolated
