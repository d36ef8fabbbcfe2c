"""SudokuEval: solved rate, blank-cell accuracy and parse failures, overall and per difficulty bucket.

Puzzles come from a file (`path`, CSV/JSONL: the first `num_puzzles` rows, read as a stream that stops
there; null = every row) or are generated from the held-out split (`size`, `num_puzzles`, `blanks`, `seed`);
either way each has exactly one solution, and a file whose rows repeat a puzzle is refused (file and lines
named) rather than scoring it twice. Difficulty buckets: blank count ranges (`bucket_edges`) and solver
effort (whether the MRV solver had to backtrack).
"""

from __future__ import annotations

from typing import Any

from contract.paths import resolve_path
from evals.base import Eval, EvalItem
from evals.sudoku.formats import FORMATS, build_prompt, parse_answer
from evals.sudoku.grid import from_string, is_valid_solution, keeps_givens
from evals.sudoku.io import load_puzzles
from evals.sudoku.puzzles import Puzzle, generate_puzzles


def blank_bucket(blanks: int, edges: list[int]) -> str:
    """Label of the [edges[i], edges[i+1]) range holding `blanks`, e.g. 'blanks_18-20'."""
    for lo, hi in zip(edges, edges[1:]):
        if lo <= blanks < hi:
            return f"blanks_{lo}-{hi - 1}"
    return f"blanks_{blanks}" if not edges or blanks < edges[0] else f"blanks_{edges[-1]}+"


def effort_bucket(p: Puzzle) -> str:
    """'propagation' when the MRV solver never went down a wrong branch (nodes == blanks + 1), else 'search'."""
    return "propagation" if p.nodes <= p.blanks + 1 else "search"


def score_answer(puzzle: str, solution: str, answer: str | None) -> dict[str, Any]:
    """Scores for one parsed answer (None = unparseable). Solved = a valid grid keeping every given; `format_ok`:
    the reply holds a complete grid of the right size (digits 1..N), right or wrong."""
    n = int(len(puzzle) ** 0.5)
    blanks = [i for i, ch in enumerate(puzzle) if ch == "0"]
    if answer is None:
        return {"correct": 0.0, "solved": 0.0, "blank_accuracy": 0.0, "parse_failed": 1.0, "format_ok": False}
    grid = from_string(answer, n)
    solved = is_valid_solution(grid, n) and keeps_givens(from_string(puzzle, n), grid)
    acc = sum(answer[i] == solution[i] for i in blanks) / len(blanks) if blanks else 1.0
    return {
        "correct": float(solved),
        "solved": float(solved),
        "blank_accuracy": acc,
        "parse_failed": 0.0,
        "format_ok": True,
    }


class SudokuEval(Eval):
    name = "sudoku"

    def __init__(
        self,
        size: int = 6,
        num_puzzles: int | None = 200,
        blanks: tuple[int, int] | list[int] = (18, 26),
        seed: int = 0,
        format: str = "compact",
        path: str | None = None,
        bucket_edges: list[int] | None = None,
        max_new_tokens: int | None = None,
        stop_strings: list[str] | None = None,
        limit: int | None = None,
        name: str | None = None,
    ):
        if format not in FORMATS:
            raise ValueError(f"eval.format: must be one of {FORMATS}, got {format!r}")
        if size not in (4, 6, 9):
            raise ValueError(f"eval.size: must be 4, 6 or 9, got {size!r}")
        cells = size * size
        if path and not resolve_path(path).exists():  # here, with the key named, not when the items are read
            raise FileNotFoundError(f"eval.path: sudoku puzzle file {path} not found (nor under the repo root)")
        if num_puzzles is None and not path:
            raise ValueError("eval.num_puzzles: null (every puzzle of the file) needs an eval.path")
        if num_puzzles is not None and (
            isinstance(num_puzzles, bool) or not isinstance(num_puzzles, int) or num_puzzles < 1
        ):
            raise ValueError(f"eval.num_puzzles: must be an integer >= 1, got {num_puzzles!r}")
        if len(blanks) != 2 or not all(isinstance(b, int) for b in blanks) or not 1 <= blanks[0] <= blanks[1] < cells:
            raise ValueError(f"eval.blanks: must be [low, high] with 1 <= low <= high < {cells}, got {list(blanks)!r}")
        if max_new_tokens is None:
            max_new_tokens = cells if format == "compact" else 8 * cells + 256
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stop_strings, limit=limit)
        self.size, self.num_puzzles, self.blanks = size, num_puzzles, (int(blanks[0]), int(blanks[1]))
        self.seed, self.format, self.path = seed, format, path
        self.bucket_edges = list(bucket_edges) if bucket_edges else self._default_edges()
        self.name = name or f"sudoku{size}_{format}"
        self._puzzles: list[Puzzle] | None = None

    def _default_edges(self) -> list[int]:
        lo, hi = self.blanks
        step = max(1, (hi - lo + 1 + 2) // 3)
        return list(range(lo, hi + 1, step)) + [hi + 1]

    def puzzles(self) -> list[Puzzle]:
        if self._puzzles is None:
            if self.path:  # streamed: stops after num_puzzles rows; errors name the file and line
                self._puzzles = load_puzzles(resolve_path(self.path), limit=self.num_puzzles, size=self.size)
            else:
                self._puzzles = generate_puzzles(self.size, self.num_puzzles, self.blanks, self.seed, split="test")
        return self._puzzles

    def items(self) -> list[EvalItem]:
        out = []
        for i, p in enumerate(self.puzzles()):
            meta = {
                "puzzle": p.puzzle,
                "blanks": p.blanks,
                "nodes": p.nodes,
                "blank_bucket": blank_bucket(p.blanks, self.bucket_edges),
                "effort_bucket": effort_bucket(p),
            }
            out.append(
                EvalItem(
                    f"{self.name}-{i:05d}-{p.puzzle}", build_prompt(p.puzzle, self.format), target=p.solution, meta=meta
                )
            )
        return out[: self.limit] if self.limit else out

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        return score_answer(item.meta["puzzle"], item.target, parse_answer(text, self.size, self.format))

    def position_target(self, item: EvalItem) -> str | None:
        """Compact format: the solution digits, one token per cell (chat replies have no fixed positions)."""
        return item.target if self.format == "compact" else None

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        out = _figures(scored, "")
        out["quality"] = out["solved_rate"]
        for key in ("blank_bucket", "effort_bucket"):
            labels = sorted({r["meta"][key] for r in scored})
            for label in labels:
                out.update(_figures([r for r in scored if r["meta"][key] == label], f"{label}/"))
        return out


def _figures(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    n = len(rows)

    def mean(key: str) -> float:
        return sum(r[key] for r in rows) / n if n else 0.0

    return {
        f"{prefix}n": n,
        f"{prefix}solved_rate": mean("solved"),
        f"{prefix}blank_accuracy": mean("blank_accuracy"),
        f"{prefix}parse_failures": int(sum(r["parse_failed"] for r in rows)),
        f"{prefix}parse_failure_rate": mean("parse_failed"),
    }
