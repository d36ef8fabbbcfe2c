"""An endless, seeded stream of unique-solution training puzzles with a blank-count curriculum.

Chains (see puzzles.py) come from a pool that grows by `fresh_per_batch` brand-new grids per batch;
each sampled chain is re-shuffled by a random symmetry (`relabel`), so the model rarely sees the same
puzzle twice. Any chain whose (relabelled) solution grid falls in the held-out hash range is dropped,
which keeps every training puzzle disjoint from the test sets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evals.sudoku.grid import to_string
from evals.sudoku.puzzles import Chain, is_test_grid, random_chain, relabel


@dataclass
class Curriculum:
    """Blank counts drawn uniformly from [lo, hi], both moving linearly from `start` to `end` over
    the first `ramp` fraction of training and staying at `end` afterwards."""

    start: tuple[int, int]
    end: tuple[int, int]
    ramp: float

    def range_at(self, frac: float) -> tuple[int, int]:
        f = min(1.0, frac / self.ramp) if self.ramp > 0 else 1.0
        lo = round(self.start[0] + f * (self.end[0] - self.start[0]))
        hi = round(self.start[1] + f * (self.end[1] - self.start[1]))
        return lo, max(lo, hi)


class PuzzleStream:
    """`batch(frac, n)` -> (puzzle strings, solution strings) at training progress `frac`, never touching
    held-out grids."""

    def __init__(
        self,
        size: int,
        curriculum: Curriculum,
        seed: int,
        initial_pool: int = 256,
        fresh_per_batch: int = 8,
        max_pool: int = 200_000,
    ):
        self.size = size
        self.curriculum = curriculum
        self.rng = random.Random(f"sudoku-train:{size}:{seed}")
        self.fresh_per_batch = fresh_per_batch
        self.max_pool = max_pool
        self.pool: list[Chain] = [random_chain(size, self.rng, "train") for _ in range(initial_pool)]

    def batch(self, frac: float, n: int) -> tuple[list[str], list[str]]:
        for _ in range(self.fresh_per_batch):
            if len(self.pool) < self.max_pool:
                self.pool.append(random_chain(self.size, self.rng, "train"))
        lo, hi = self.curriculum.range_at(frac)
        puzzles, solutions = [], []
        while len(puzzles) < n:
            chain = relabel(self.rng.choice(self.pool), self.rng)
            if is_test_grid(chain.solution):
                continue
            blanks = min(self.rng.randint(lo, hi), len(chain.order))
            puzzles.append(to_string(chain.puzzle(blanks)))
            solutions.append(to_string(chain.solution))
        return puzzles, solutions
