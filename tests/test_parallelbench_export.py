"""Export to ParallelBench's leaderboard files (harness/analysis/parallelbench_export.py): the schema of the site's
`data/` files, checked against the published files where a copy of the site's data is outside the repo
(PARALLELBENCH_SITE)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from evals.parallelbench.tasks import TASKS
from harness.analysis.parallelbench_export import figure_rows, to_leaderboard_json, write_leaderboard

SITE = Path(os.environ.get("PARALLELBENCH_SITE", "/work/refs/parallelbench/site"))
BY_SITE_ID = {t.site_id: t.name for t in TASKS.values()}


def runs(points: list[tuple[int, str, float, float]], model="m", rule="entropy_bound") -> pd.DataFrame:
    """Summary-table rows: (setting, site task id, tokens-per-step, accuracy %)."""
    return pd.DataFrame(
        [
            {
                "model": model,
                "label": "diffusion",
                "sampler": rule,
                "sampler.entropy_bound": s,
                "pb_task": BY_SITE_ID[task],
                "pb_site_id": task,
                "pb_tokens_per_step": tps,
                "quality": acc / 100,
                "tpf": tps / 2,
            }
            for s, task, tps, acc in points
        ]
    )


def test_export_writes_the_sites_files(tmp_path):
    table = runs(
        [
            (0, "waitingline-copy", 1.5, 90),
            (0, "puzzles-sudoku", 1.5, 80),
            (1, "waitingline-copy", 3.0, 60),
            (1, "puzzles-sudoku", 3.0, 40),
        ]
    )
    board = to_leaderboard_json(table)
    assert board == {
        "m": {
            "thresholds": [80, 75, 70],
            "results": {
                "entropy_bound": {
                    "80": pytest.approx(1.5 + 5 / 35 * 1.5),
                    "75": pytest.approx(1.5 + 10 / 35 * 1.5),
                    "70": pytest.approx(1.5 + 15 / 35 * 1.5),
                }
            },
        }
    }
    files = write_leaderboard(table, tmp_path)
    names = sorted(str(p.relative_to(tmp_path)) for p in files)
    assert names == ["data/figures/m/entropy_bound.csv", "data/leaderboard/m.json", "metadata_entry.json"]
    rows = list(csv.DictReader(open(tmp_path / "data/figures/m/entropy_bound.csv")))
    assert [r["task"] for r in rows] == ["waitingline-copy", "puzzles-sudoku", "avg"] * 2
    assert json.loads((tmp_path / "metadata_entry.json").read_text())["models"][0]["strategies"] == ["entropy_bound"]


@pytest.mark.skipif(not (SITE / "data/leaderboard").is_dir(), reason=f"no copy of the site's data at {SITE}")
def test_exported_files_have_the_published_files_shape(tmp_path):
    table = runs([(0, "waitingline-copy", 1.0, 90), (1, "waitingline-copy", 2.0, 70)])
    ours = to_leaderboard_json(table)["m"]
    theirs = json.loads((SITE / "data/leaderboard/llada15.json").read_text())
    assert ours.keys() == theirs.keys() and ours["thresholds"] == theirs["thresholds"]
    their_entry = next(iter(theirs["results"].values()))
    assert all(v.keys() == their_entry.keys() for v in ours["results"].values())
    with open(SITE / "data/figures/llada15/wino.csv") as f:
        header = next(csv.reader(f))
    assert list(figure_rows(table).columns) == header
    meta = json.loads((SITE / "data/metadata.json").read_text())
    write_leaderboard(table, tmp_path)
    entry = json.loads((tmp_path / "metadata_entry.json").read_text())
    assert set(entry["models"][0]) <= set(meta["models"][0]) and set(entry["strategies"][0]) <= set(
        meta["strategies"][0]
    )
