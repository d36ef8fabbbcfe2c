"""Read and write puzzle files: CSV in the common `quizzes,solutions` layout, or JSONL.

CSV: a header row; the puzzle column is the first of quizzes/quiz/puzzle/puzzles, the solution column the
first of solutions/solution (optional). JSONL: one object per line with `puzzle` (or `quizzes`) and
optionally `solution`. Cells are N*N digits with '0' or '.' for a blank. A missing solution is computed;
every puzzle must have exactly one solution, and a given solution must be that one.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from evals.sudoku.grid import from_string, solve, to_string
from evals.sudoku.puzzles import Puzzle

PUZZLE_KEYS = ("quizzes", "quiz", "puzzle", "puzzles")
SOLUTION_KEYS = ("solutions", "solution")


def _first(row: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if row.get(k) not in (None, ""):
            return str(row[k])
    return None


def to_puzzle(puzzle: str, solution: str | None = None, where: str = "") -> Puzzle:
    grid = from_string(puzzle)
    res = solve(grid, limit=2)
    if res.count != 1:
        raise ValueError(f"{where}: puzzle has {'no' if res.count == 0 else 'more than one'} solution: {puzzle}")
    if solution is not None and from_string(solution) != res.solution:
        raise ValueError(f"{where}: the given solution does not solve the puzzle: {puzzle}")
    n = int(len(grid) ** 0.5)
    return Puzzle(to_string(grid), to_string(res.solution), n, grid.count(0), res.nodes)


def load_puzzles(path: str | Path, limit: int | None = None) -> list[Puzzle]:
    """Puzzles from a .csv or .jsonl file (see module docstring), in file order."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"sudoku puzzle file not found: {path}")
    rows: list[dict] = []
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    elif path.suffix in (".jsonl", ".json"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        raise ValueError(f"unsupported puzzle file type {path.suffix!r} (use .csv or .jsonl): {path}")
    out = []
    for i, row in enumerate(rows[:limit] if limit else rows):
        puzzle = _first(row, PUZZLE_KEYS)
        if puzzle is None:
            raise ValueError(f"{path}:{i + 2}: no puzzle column (expected one of {PUZZLE_KEYS})")
        out.append(to_puzzle(puzzle, _first(row, SOLUTION_KEYS), where=f"{path}:{i + 2}"))
    return out


def write_jsonl(puzzles: list[Puzzle], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in puzzles))
    return path
