"""Crash-safe result store for one run directory.

`samples.jsonl` gets one line per finished sample, flushed and fsynced as it finishes, so a run killed
at any moment loses at most the sample in flight; unreadable lines (a torn last line) are ignored on reload.
`metrics.json` is written atomically (temp file + rename) once the run completes. Re-running a config
into the same directory skips the samples already present (resume).

A sharded run (`shards=N`, harness.launch.shards) keeps the one-writer rule per file: shard i appends only to
`samples.shard-<i>.jsonl` (its own lock), the run's coordinator holds the run dir's lock and writes `metrics.json`.
Every reader merges `samples.jsonl` and the shard files (first row per sample id wins), so a run can be resumed
with another shard count, or none.

This module is the one reader of both files: `read_samples` / `read_metrics` (read-only, for aggregation
and plots) and `ResultStore.load` (the resume path, which also drops the bad lines from the file).
A bad line is one that is not a JSON object with a string `sample_id` and numeric `num_tokens`, `nfe` and
`wall_time_s` (a torn last line, `{}`, `null`, bytes that are not UTF-8, ...). Nothing is dropped silently:
`load` logs a warning naming the file and the line numbers and, before rewriting the file, keeps a copy of
the original bytes beside it as `samples.jsonl.bad-<timestamp>`. A `metrics.json` that cannot be read raises
`UnreadableFile`, which names the file (aggregation lists such runs as broken and goes on).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.files import atomic_write

SAMPLES = "samples.jsonl"
SHARD_SAMPLES = "samples.shard-{}.jsonl"  # shard i's own samples file (harness.launch.shards)
METRICS = "metrics.json"
IDENTITY = "identity.json"
# `harness.runner.batch_check`'s batch-1 re-decodes: their own file, so samples.jsonl only ever holds the run's samples
BATCH_CHECK = "batch_check.jsonl"
LOCK = ".lock"
# the numbers every stored sample carries (`GenerationResult.to_dict`) and resume and the metrics sum over
ROW_NUMBERS = ("num_tokens", "nfe", "wall_time_s")

log = logging.getLogger(__name__)


class UnreadableFile(ValueError):
    """A result file that exists but cannot be read (truncated, not UTF-8, not the expected JSON); names the file."""


class RunDirBusy(RuntimeError):
    """Another process holds this run dir: two writers would decode every sample twice."""


def sample_files(run_dir: str | Path) -> list[Path]:
    """The run dir's samples files, in merge order: `samples.jsonl`, then the shard files by shard number."""
    run_dir = Path(run_dir)
    shards = sorted(run_dir.glob(SHARD_SAMPLES.format("*")), key=lambda p: (len(p.name), p.name))
    return [p for p in (run_dir / SAMPLES, *shards) if p.is_file()]


class ResultStore:
    """One run dir, held exclusively by one process (an `flock` on `.lock`, released at exit or `close()`).

    `shard=i`: the store of shard i of a sharded run: it appends to `samples.shard-<i>.jsonl` under its own lock
    (the coordinator holds `.lock`), and reads every samples file of the run dir like any store."""

    def __init__(self, run_dir: str | Path, lock: bool = True, shard: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.samples_path = self.run_dir / (SAMPLES if shard is None else SHARD_SAMPLES.format(shard))
        self.metrics_path = self.run_dir / METRICS
        self._lock = None
        if lock:
            self._acquire(LOCK if shard is None else f"{LOCK}.shard-{shard}")

    def _acquire(self, name: str) -> None:
        import fcntl

        f = open(self.run_dir / name, "a+")  # held open for the store's lifetime
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise RunDirBusy(
                f"{self.run_dir} is being written by another process (pid {holder}: same config running twice, or "
                f"a parallel launcher with duplicate jobs); wait for it to finish, then re-run to resume"
            ) from None
        f.truncate(0)  # the holder's pid, for the message above and for tests that kill the writer
        f.write(f"{os.getpid()}\n")
        f.flush()
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
        """Finished samples by id from every samples file of the run dir (first row per id wins). Drops every bad
        line of this store's own file (see the module docstring), not only a torn last one left by a crash, and
        says so: a warning names the file and the line numbers, and the original file is kept as
        `<file>.bad-<timestamp>` before it is rewritten without them. Other files are only read (their writers
        repair them), their bad lines skipped."""
        scan = scan_samples(self.samples_path)
        rows = dict(scan.rows)
        for path in sample_files(self.run_dir):
            if path != self.samples_path:
                for sid, row in scan_samples(path).rows.items():
                    rows.setdefault(sid, row)
        if scan.bad:
            backup = _backup_path(self.samples_path)
            shutil.copy2(self.samples_path, backup)
            log.warning(
                "%s: dropped %d unreadable line(s) (%s); they will be decoded again. The original file is kept as %s",
                self.samples_path,
                len(scan.bad),
                scan.describe_bad(),
                backup,
            )
            atomic_write(self.samples_path, b"".join(scan.good_lines).decode("utf-8"))
        return rows

    def append(self, row: dict[str, Any]) -> None:
        append_line(self.samples_path, row)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        atomic_write(self.metrics_path, json.dumps(metrics, indent=2, sort_keys=True, default=str))

    def reset(self) -> None:
        """Forget earlier results (a fresh, non-resumed run into the same directory)."""
        for p in (*sample_files(self.run_dir), self.metrics_path, self.run_dir / IDENTITY, self.run_dir / BATCH_CHECK):
            p.unlink(missing_ok=True)


def append_line(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line, flushed and fsynced: a crash loses at most the line being written."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


@dataclass
class SamplesScan:
    """A samples.jsonl read line by line: rows by sample id (first wins), the good lines' bytes, and the bad
    lines as (line number, why)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    good_lines: list[bytes] = field(default_factory=list)
    bad: list[tuple[int | str, str]] = field(default_factory=list)  # (line number, or `<file>:<line>`, why)

    def describe_bad(self, at_most: int = 10) -> str:
        shown = "; ".join(f"line {n}: {why}" for n, why in self.bad[:at_most])
        return shown + (f"; and {len(self.bad) - at_most} more" if len(self.bad) > at_most else "")


def _row_problem(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """The row a samples.jsonl line holds, or None and why it is bad."""
    if not line.endswith(b"\n"):
        return None, "torn last line (no newline: a crash mid-write)"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 ({e.reason} at byte {e.start})"
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON: {e.msg} (column {e.colno})"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not an object"
    if not isinstance(row.get("sample_id"), str) or not row["sample_id"]:
        return None, "no sample_id string"
    missing = [k for k in ROW_NUMBERS if isinstance(row.get(k), bool) or not isinstance(row.get(k), int | float)]
    if missing:
        return None, f"no number for {', '.join(missing)}"
    return row, ""


def scan_samples(path: str | Path) -> SamplesScan:
    """Read one samples file (see `SamplesScan`); an empty scan when there is no file."""
    scan = SamplesScan()
    path = Path(path)
    if not path.exists():
        return scan
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            row, why = _row_problem(line)
            if row is None:
                scan.bad.append((n, why))
                continue
            scan.rows.setdefault(row["sample_id"], row)
            scan.good_lines.append(line)
    return scan


def scan_run(run_dir: str | Path) -> SamplesScan:
    """Every samples file of a run dir merged (`sample_files` order, first row per id wins); bad lines are named
    `<file>:<line>` when the run has more than one file."""
    files = sample_files(run_dir)
    merged = SamplesScan()
    for path in files:
        scan = scan_samples(path)
        for sid, row in scan.rows.items():
            merged.rows.setdefault(sid, row)
        merged.good_lines += scan.good_lines
        merged.bad += [(n if len(files) == 1 else f"{path.name}:{n}", why) for n, why in scan.bad]
    return merged


def _backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    backup, k = path.with_name(f"{path.name}.bad-{stamp}"), 1
    while backup.exists():
        backup, k = path.with_name(f"{path.name}.bad-{stamp}-{k}"), k + 1
    return backup


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run dir's sample rows from all its samples files, read-only (never rewritten): first row per sample id
    wins, bad lines are skipped (see `ResultStore.load`; `scan_run` lists them); [] when there is no file."""
    return list(scan_run(run_dir).rows.values())


def read_metrics(run_dir: str | Path) -> dict[str, Any]:
    """A finished run dir's metrics.json; `UnreadableFile` (naming the file) when it is truncated or garbled."""
    path = Path(run_dir) / METRICS
    try:
        metrics = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UnreadableFile(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UnreadableFile(f"{path}:{e.lineno}: not valid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(metrics, dict):
        raise UnreadableFile(f"{path}: a JSON {type(metrics).__name__}, not an object")
    return metrics
