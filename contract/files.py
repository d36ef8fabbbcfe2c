"""Result files that a crash never leaves torn (used by the store and by self-driving evals), and the one way input
files are read line by line with errors that name the file and the line (used by the evals' readers)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file so readers see the old or the new content, never a torn one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def text_lines(path: Path, where: str = "") -> Iterator[tuple[int, str]]:
    """(line number, text with its line end) of a UTF-8 text file, read lazily; a leading BOM is dropped. Bytes
    that are not UTF-8 fail naming `<where><path>:<line>`."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{where}{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start} of the line); save the file as "
                    "UTF-8"
                ) from None


def jsonl_objects(
    path: Path, where: str = "", expected: str = "a JSON object", torn_tail_ok: bool = False
) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON Lines file: a line that is not JSON, or not an object
    (`expected` says what it should be), fails naming `<where><path>:<line>`. `torn_tail_ok`: a last line without
    its newline that is not JSON is skipped (a crash mid-append to a file that only ever loses its last line)."""
    for n, text in text_lines(path, where):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            if torn_tail_ok and not text.endswith("\n"):
                return
            raise ValueError(f"{where}{path}:{n}: not valid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(row, dict):
            raise ValueError(
                f"{where}{path}:{n}: expected {expected}, got a JSON {type(row).__name__} (JSON Lines: one object per "
                "line)"
            )
        yield n, row


T = TypeVar("T")


def jsonl_rows_as(path: str | Path, convert: Callable[[int, dict], T], where: str) -> list[T]:
    """`convert(line, row)` of every row of an existing, non-empty JSON Lines file; a missing file, an empty one
    or a row `convert` refuses (ValueError) fails naming `<where> <path>[:<line>]`."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise FileNotFoundError(f"{where}: {p} not found")
    out = []
    for n, row in jsonl_objects(p, where=f"{where}: "):
        try:
            out.append(convert(n, row))
        except ValueError as exc:
            raise ValueError(f"{where}: {p}:{n}: {exc}") from exc
    if not out:
        raise ValueError(f"{where}: {p} holds no rows")
    return out
