"""Comparing sweeps run through different launchers: the same run dirs, samples and metrics, timings aside."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from harness.runner.store import sample_files

# metrics that measure time (or count what one process did: forwards seen by the expert hooks)
PROCESS_LOCAL = re.compile(r"second|latency|ttft|ttfv|wall_time|experts_per_forward")


def run_dirs(sweep_dir: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in sweep_dir.glob("*/metrics.json")}


def comparable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "run" and not PROCESS_LOCAL.search(k)}


def outputs(row: dict) -> tuple:
    """What a sample decoded (not when or how fast)."""
    return row["token_ids"], row["text"], row["nfe"], row["steps_per_canvas"], row["correct"]


def exactly_once(run_dir: Path, expected_ids: set[str]) -> None:
    """Every line of every samples file a complete sample, each sample once, no sample missing."""
    lines = [line for f in sample_files(run_dir) for line in f.read_bytes().splitlines(keepends=True)]
    counts = Counter(json.loads(line)["sample_id"] for line in lines)
    assert set(counts) == expected_ids and set(counts.values()) == {1}, counts.most_common(3)
    assert not list(run_dir.glob("*.bad-*")), "a line was dropped and decoded again"
