"""Read and write puzzle files: CSV in the common `quizzes,solutions` layout, or JSONL.

CSV: a header row; the puzzle column is the first of quizzes/quiz/puzzle/puzzles, the solution column the
first of solutions/solution (optional); header names are matched without case or surrounding spaces, and a
UTF-8 byte-order mark (Excel's "CSV UTF-8") is dropped. JSONL: one object per line with `puzzle` (or
`quizzes`) and optionally `solution`. Cells are N*N digits with '0' or '.' for a blank. A missing solution is
computed; every puzzle must have exactly one solution, and a given solution must be that one.

Files are read as a stream, row by row, and reading stops as soon as `limit` puzzles are in hand (a 1M-row
file with `limit=20` reads 20 rows). Every error names the file and the line (`path:line: ...`). A puzzle
that repeats an earlier row is an error naming both lines (it would be scored twice): remove the repeats.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from contract.files import jsonl_objects, text_lines
from evals.sudoku.grid import from_string, solve, to_string
from evals.sudoku.puzzles import Puzzle

PUZZLE_KEYS = ("quizzes", "quiz", "puzzle", "puzzles")
SOLUTION_KEYS = ("solutions", "solution")


def _first(row: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if row.get(k) not in (None, ""):
            return str(row[k]).strip()
    return None


def to_puzzle(puzzle: str, solution: str | None = None, where: str = "", size: int | None = None) -> Puzzle:
    """A checked Puzzle (exactly one solution, `solution` that one when given); errors start with `where`."""
    try:
        grid = from_string(puzzle, size)
        given = from_string(solution, size) if solution is not None else None
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    res = solve(grid, limit=2)
    if res.count != 1:
        raise ValueError(f"{where}: puzzle has {'no' if res.count == 0 else 'more than one'} solution: {puzzle}")
    if given is not None and given != res.solution:
        raise ValueError(f"{where}: the given solution does not solve the puzzle: {puzzle}")
    n = int(len(grid) ** 0.5)
    return Puzzle(to_string(grid), to_string(res.solution), n, grid.count(0), res.nodes)


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    line_of = {}

    def texts():
        for n, text in text_lines(path):
            line_of["last"] = n
            yield text

    reader = csv.reader(texts())
    try:
        header = next(reader, None)
        if header is None:
            return
        names = [h.strip().lower() for h in header]
        start = line_of.get("last", 0) + 1  # the line the next record starts on
        for fields in reader:
            end = line_of["last"]
            if any(f.strip() for f in fields):  # blank lines are skipped
                if len(fields) != len(names):
                    raise ValueError(
                        f"{path}:{start}: {len(fields)} fields, but the header ({','.join(header)}) has {len(names)}"
                    )
                yield start, dict(zip(names, fields))
            start = end + 1
    except csv.Error as e:
        raise ValueError(f"{path}:{line_of.get('last', 1)}: not valid CSV ({e})") from None


def iter_rows(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, row dict) of a puzzle file, one row at a time."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"sudoku puzzle file not found: {path}")
    if path.suffix == ".csv":
        yield from _csv_rows(path)
    elif path.suffix in (".jsonl", ".json"):
        yield from jsonl_objects(path, expected="a JSON object with a 'puzzle'")
    else:
        raise ValueError(f"unsupported puzzle file type {path.suffix!r} (use .csv or .jsonl): {path}")


def iter_puzzles(path: str | Path, size: int | None = None) -> Iterator[Puzzle]:
    """Checked puzzles of a file, in file order, read and solved one row at a time. With `size`, a puzzle of
    another size is an error naming its line; a puzzle repeating an earlier row is an error naming both."""
    path = Path(path)
    seen: dict[str, int] = {}
    for n, row in iter_rows(path):
        where = f"{path}:{n}"
        puzzle = _first(row, PUZZLE_KEYS)
        if puzzle is None:
            raise ValueError(f"{where}: no puzzle column (expected one of {PUZZLE_KEYS}; the row has {sorted(row)})")
        if size is not None and len(puzzle) != size * size:
            raise ValueError(
                f"{where}: {len(puzzle)} cells, not a {size}x{size} sudoku ({size * size} cells, eval.size={size}): "
                f"{puzzle!r}"
            )
        p = to_puzzle(puzzle, _first(row, SOLUTION_KEYS), where=where, size=size)
        if p.puzzle in seen:
            raise ValueError(
                f"{where}: the same puzzle as line {seen[p.puzzle]} ({p.puzzle}); it would be scored twice, "
                f"remove the repeated rows"
            )
        seen[p.puzzle] = n
        yield p


def load_puzzles(path: str | Path, limit: int | None = None, size: int | None = None) -> list[Puzzle]:
    """The first `limit` puzzles (all when None or 0) of a .csv or .jsonl file (see module docstring), in file
    order; the file is read only as far as needed."""
    out: list[Puzzle] = []
    for p in iter_puzzles(path, size):
        out.append(p)
        if limit and len(out) >= limit:
            break
    return out


def write_jsonl(puzzles: list[Puzzle], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in puzzles))
    return path
