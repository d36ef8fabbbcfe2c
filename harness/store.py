"""Crash-safe result store for one run directory.

`samples.jsonl` gets one line per finished sample, flushed and fsynced as it finishes, so a run killed
at any moment loses at most the sample in flight; unreadable lines (a torn last line) are ignored on reload.
`metrics.json` is written atomically (temp file + rename) once the run completes. Re-running a config
into the same directory skips the samples already present (resume).

This module is the one reader of both files: `read_samples` / `read_metrics` (read-only, for aggregation
and plots) and `ResultStore.load` (the resume path, which also drops the bad lines from the file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from contract.files import atomic_write

SAMPLES = "samples.jsonl"
METRICS = "metrics.json"
IDENTITY = "identity.json"
LOCK = ".lock"


class RunDirBusy(RuntimeError):
    """Another process holds this run dir: two writers would decode every sample twice."""


class ResultStore:
    """One run dir, held exclusively by one process (an `flock` on `.lock`, released at exit or `close()`)."""

    def __init__(self, run_dir: str | Path, lock: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.samples_path = self.run_dir / SAMPLES
        self.metrics_path = self.run_dir / METRICS
        self._lock = None
        if lock:
            self._acquire()

    def _acquire(self) -> None:
        import fcntl

        f = open(self.run_dir / LOCK, "a+")  # held open for the store's lifetime
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RunDirBusy(
                f"{self.run_dir} is being written by another process (same config running twice, or a parallel "
                f"launcher with duplicate jobs); wait for it to finish, then re-run to resume"
            ) from None
        self._lock = f

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def check_identity(self, identity: dict[str, Any]) -> None:
        """Refuse to add samples made from other inputs than the stored ones (weights retrained at the same
        path, ...): `identity` is what determines the samples besides the config; it is stored with the run."""
        path = self.run_dir / IDENTITY
        old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        if self.samples_path.exists() and self.samples_path.stat().st_size:
            changed = sorted(k for k in identity if k in old and old[k] != identity[k])
            if changed:
                detail = "; ".join(f"{k}: {old.get(k)!r} -> {identity.get(k)!r}" for k in changed)
                raise RuntimeError(
                    f"{self.run_dir} holds samples made from other inputs ({detail}). Resuming would mix them: "
                    f"re-run with resume=false to start this run afresh (or move the run dir away)"
                )
        atomic_write(path, json.dumps({**old, **identity}, indent=2, sort_keys=True, default=str))

    def load(self) -> dict[str, dict[str, Any]]:
        """Finished samples by id (first row per id wins). Drops every bad line, not only a torn last one
        left by a crash: a line that is not valid JSON or lacks its newline; the file is rewritten without them."""
        rows, good_lines, bad = _scan(self.samples_path)
        if bad:
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
        for p in (self.samples_path, self.metrics_path, self.run_dir / IDENTITY):
            p.unlink(missing_ok=True)


def _scan(path: Path) -> tuple[dict[str, dict[str, Any]], list[str], int]:
    """Rows of a samples.jsonl by sample id (first wins), the good lines, and how many lines were bad
    (not valid JSON, or missing the newline that `append` writes last)."""
    rows: dict[str, dict[str, Any]] = {}
    good_lines: list[str] = []
    bad = 0
    if not path.exists():
        return rows, good_lines, bad
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                bad += 1
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            rows.setdefault(row["sample_id"], row)
            good_lines.append(line)
    return rows, good_lines, bad


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run dir's samples.jsonl rows, read-only (the file is never rewritten): first row per sample id
    wins, bad lines are skipped (see `ResultStore.load`); [] when there is no file."""
    return list(_scan(Path(run_dir) / SAMPLES)[0].values())


def read_metrics(run_dir: str | Path) -> dict[str, Any]:
    """A finished run dir's metrics.json."""
    return json.loads((Path(run_dir) / METRICS).read_text(encoding="utf-8"))
