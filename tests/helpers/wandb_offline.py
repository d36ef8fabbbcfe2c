"""Reading an offline W&B run back: what `WandbLogger` recorded, for the tests. Offline runs write no
`wandb-summary.json`, so `read_offline_run` replays the `.wandb` record log (LevelDB-style blocks of wandb's own
`Record` protobufs) and the run's `files/` folder.

A test helper, not part of the harness (it was `harness.tracking.wandb_offline`, which no product code imported):
the harness only writes runs; W&B itself reads them (`wandb sync`), and parsing wandb's private record format is
worth its upkeep only to check what our logger wrote.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class OfflineRun:
    """What an offline run recorded, replayed from its `.wandb` log and its `files/` folder."""

    path: Path
    run_id: str
    name: str
    group: str
    job_type: str
    project: str
    tags: list[str]
    config: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    def table(self, key: str) -> pd.DataFrame:
        """A logged wandb.Table as a DataFrame (read from the JSON file the summary points at)."""
        import pandas as pd

        ref = self.summary[key]
        data = json.loads((self.path / "files" / ref["path"]).read_text(encoding="utf-8"))
        return pd.DataFrame(data["data"], columns=data["columns"])

    def media(self, key: str) -> Path:
        return self.path / "files" / self.summary[key]["path"]


def _records(path: Path):
    """Payloads of a LevelDB-style log: 7-byte file header, 32 KiB blocks, records (crc32, len16, type8)."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B record log")
    block, pos, buf = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:  # FULL
            yield payload
        elif kind == 2:  # FIRST
            buf = payload
        elif kind == 3:  # MIDDLE
            buf += payload
        elif kind == 4:  # LAST
            yield buf + payload
            buf = b""


def _apply(target: dict[str, Any], item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    node = target
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = json.loads(item.value_json)


def find_offline_runs(root: str | Path) -> list[Path]:
    """Offline run folders under `root` (e.g. a run dir, whose `wandb/` holds them), oldest first."""
    return sorted(Path(root).rglob("offline-run-*"), key=lambda p: p.name)


def _kinds(log: Path) -> set[str]:
    """The record types in a run log (`exit` is written last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    kinds = set()
    for payload in _records(log):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kinds.add(rec.WhichOneof("record_type"))
    return kinds


def read_offline_run(path: str | Path, wait_s: float = 0.0) -> OfflineRun:
    """Replay an `offline-run-*` folder: run identity, config, summary and history. `wait_s`: first wait up to
    that long for the log to be complete (hold its exit record): wandb's service process may still be writing
    it for a moment after `finish()` returned in this process (seen under load)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    path = Path(path)
    deadline = time.monotonic() + wait_s
    while wait_s and time.monotonic() < deadline:
        logs = list(path.glob("run-*.wandb"))
        try:
            if len(logs) == 1 and "exit" in _kinds(logs[0]):
                break
        except (ValueError, OSError, DecodeError):  # caught mid-write: a header or a record not there yet
            pass
        time.sleep(0.2)
    (log,) = path.glob("run-*.wandb")
    out = OfflineRun(path, "", "", "", "", "", [], {}, {})
    for payload in _records(log):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            out.run_id, out.name, out.group, out.job_type, out.project = (
                r.run_id,
                r.display_name,
                r.run_group,
                r.job_type,
                r.project,
            )
            out.tags = list(r.tags)
            for item in r.config.update:
                _apply(out.config, item)
        elif kind == "config":
            for item in rec.config.update:
                _apply(out.config, item)
        elif kind == "summary":
            for item in rec.summary.update:
                _apply(out.summary, item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in rec.history.item:
                _apply(row, item)
            out.history.append(row)
    return out
