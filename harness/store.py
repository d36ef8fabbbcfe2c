"""Crash-safe result store for one run directory.

`samples.jsonl` gets one line per finished sample, flushed and fsynced as it finishes, so a run killed
at any moment loses at most the sample in flight; a truncated last line is ignored on reload.
`metrics.json` is written atomically (temp file + rename) once the run completes. Re-running a config
into the same directory skips the samples already present (resume).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SAMPLES = "samples.jsonl"
METRICS = "metrics.json"


class ResultStore:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.samples_path = self.run_dir / SAMPLES
        self.metrics_path = self.run_dir / METRICS

    def load(self) -> dict[str, dict[str, Any]]:
        """Finished samples by id; drops a torn last line left by a crash (and rewrites the file without it)."""
        rows: dict[str, dict[str, Any]] = {}
        if not self.samples_path.exists():
            return rows
        good_lines = []
        torn = False
        with open(self.samples_path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    torn = True
                    continue
                if not line.endswith("\n"):
                    torn = True
                    continue
                rows.setdefault(row["sample_id"], row)
                good_lines.append(line)
        if torn:
            atomic_write(self.samples_path, "".join(good_lines))
        return rows

    def append(self, row: dict[str, Any]) -> None:
        with open(self.samples_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        atomic_write(self.metrics_path, json.dumps(metrics, indent=2, sort_keys=True, default=str))

    def reset(self) -> None:
        """Forget earlier results (a fresh, non-resumed run into the same directory)."""
        for p in (self.samples_path, self.metrics_path):
            p.unlink(missing_ok=True)


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file so readers see the old or the new content, never a torn one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
