"""ParallelBench's official test files, read from a checkout the user points at (`eval.data_dir`), refused unless
their sha256 is the one ParallelBench published (`tasks.TaskSpec.sha256`): scores on other files are not theirs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from evals.parallelbench.tasks import TaskSpec

TEST_DIR = Path("dataset/parallel_bench/data/output/test")


def task_file(data_dir: str | Path, spec: TaskSpec) -> Path:
    """The task's file under a ParallelBench checkout (its root, or its `data/output/test` folder)."""
    root = Path(data_dir)
    for candidate in (root / TEST_DIR / f"{spec.name}.jsonl", root / f"{spec.name}.jsonl"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"eval.data_dir: {spec.name}.jsonl not found under {root} (nor under {root / TEST_DIR}); point it at a "
        "checkout of github.com/furiosa-ai/ParallelBench"
    )


def checked_file(data_dir: str | Path, spec: TaskSpec) -> Path:
    """The task's file, its checksum checked (called at config time, before any model loads)."""
    path = task_file(data_dir, spec)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != spec.sha256:
        raise ValueError(
            f"eval.data_dir: {path} has sha256 {digest[:16]}..., not ParallelBench's {spec.sha256[:16]}... "
            "(furiosa-ai/ParallelBench 72de8f7): not the official test set"
        )
    return path


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Every sample of a task file, in order (ParallelBench scores all lines: 100 a task, 108 for Sudoku)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
