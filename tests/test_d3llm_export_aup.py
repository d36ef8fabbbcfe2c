"""The d3LLM export on the two edges of d3LLM's `get_aup` (hao-ai-lab/d3LLM@e5bfcac, AUP_leaderboard/aup_utils.py):
a task where every accuracy is 0 scores AUP 0.0 (theirs returns 0.0; it was `nan`), and front points more than 5
accuracy points below the slowest, which the AUP leaves out, are said: a warning and `d3llm_dropped.yaml`."""

from __future__ import annotations

import csv

import pytest
import yaml

from harness.export.__main__ import export
from tests.helpers.runs import make_run_dir


def _row(path, method: str) -> list[str]:
    rows = list(csv.reader(path.open(encoding="utf-8")))
    return next(r for r in rows if len(r) > 1 and r[1] == method)


def test_all_zero_accuracy_scores_zero_and_writes_no_dropped_file(tmp_path):
    make_run_dir(tmp_path / "runs", "zero", [(16, 8, 0, [4])] * 10, model="nothing_right")
    files = export(["d3llm", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert [p.name for p in files] == ["d3llm_leaderboard.csv", "d3llm_points.yaml"]
    _, _, tpf, acc, aup, slowest = _row(files[0], "nothing_right")
    assert (tpf, acc, aup, slowest) == ("2.00", "0.00", "0.0000", "0.00")


def test_points_the_aup_leaves_out_are_warned_about_and_written(tmp_path):
    runs = tmp_path / "runs"
    make_run_dir(runs, "slow", [(16, 8, i != 0, [4]) for i in range(20)])  # 95% at TPF 2
    make_run_dir(runs, "fast", [(16, 4, i % 2, [2]) for i in range(20)])  # 50% at TPF 4: 45 points below
    with pytest.warns(UserWarning, match=r"tiny on prompts: 1 front point\(s\) more than 5 .*get_aup refuses"):
        files = export(["d3llm", str(runs), "--out", str(tmp_path / "out")])
    assert [p.name for p in files] == ["d3llm_leaderboard.csv", "d3llm_points.yaml", "d3llm_dropped.yaml"]
    assert yaml.safe_load(files[2].read_text()) == {
        "prompts": {"tiny": {"dropped": [[4.0, 50.0]], "d3llm_refuses": True}}
    }
    assert yaml.safe_load(files[1].read_text()) == {"prompts": {"tiny": [[2.0, 95.0]]}}  # what the AUP integrates
    assert _row(files[0], "tiny")[2:] == ["2.00", "95.00", "190.0000", "95.00"]  # one kept point: 2 x 95
