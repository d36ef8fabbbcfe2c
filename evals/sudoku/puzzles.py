"""Seeded puzzle generation with a unique solution, difficulty buckets, and a train/test split by hash.

Uniqueness is built in: cells are blanked one at a time in random order, and a blank is kept only if the
puzzle still has exactly one solution. The resulting *removal chain* has a useful property: every prefix
of it is itself a unique puzzle (adding givens never adds solutions), so one chain yields unique puzzles
at every blank count up to its length. Training samples blank counts from chains; the eval takes exact
prefixes.

Held-out split: a solution grid belongs to the test split iff blake2b(grid) falls in the reserved hash
range (`is_test_grid`). Test puzzles are only drawn from test grids and training data only from the
rest, so no test solution grid (and hence no test puzzle) can ever appear in training, whatever the seeds.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass

from evals.sudoku.grid import geometry, random_solution, solve, to_string

TEST_FRACTION_PER_MILLE = 100  # 10% of all solution grids are reserved for held-out tests


def is_test_grid(solution) -> bool:
    """True iff this solution grid is reserved for held-out evaluation (never used in training)."""
    h = hashlib.blake2b(to_string(solution).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % 1000 < TEST_FRACTION_PER_MILLE


@dataclass
class Chain:
    """A solution grid and the order in which its cells can be blanked while staying unique."""

    solution: tuple[int, ...]
    order: tuple[int, ...]  # cell indices; any prefix, blanked, is a unique puzzle

    def puzzle(self, blanks: int) -> tuple[int, ...]:
        if blanks > len(self.order):
            raise ValueError(f"chain allows at most {len(self.order)} blanks, asked for {blanks}")
        cells = list(self.solution)
        for i in self.order[:blanks]:
            cells[i] = 0
        return tuple(cells)


def removal_chain(solution, rng: random.Random, max_blanks: int | None = None) -> Chain:
    """Greedy random blanking of `solution`, skipping cells whose blanking would allow a second solution."""
    cells = list(solution)
    idx = list(range(len(cells)))
    rng.shuffle(idx)
    order: list[int] = []
    for i in idx:
        if max_blanks is not None and len(order) >= max_blanks:
            break
        keep = cells[i]
        cells[i] = 0
        if solve(cells, limit=2).count == 1:
            order.append(i)
        else:
            cells[i] = keep
    return Chain(tuple(solution), tuple(order))


def random_chain(size: int, rng: random.Random, split: str = "train", max_blanks: int | None = None) -> Chain:
    """A chain on a fresh random solution grid from the requested split ("train" | "test")."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    while True:
        sol = random_solution(size, rng)
        if is_test_grid(sol) == (split == "test"):
            return removal_chain(sol, rng, max_blanks)


def relabel(chain: Chain, rng: random.Random) -> Chain:
    """A random validity- and uniqueness-preserving transform: digit relabelling, row/column swaps inside
    bands/stacks, band and stack permutations. Cheap data augmentation for training."""
    n = geometry(size := int(len(chain.solution) ** 0.5)).size
    geo = geometry(size)
    br, bc = geo.box_rows, geo.box_cols
    digits = list(range(1, n + 1))
    rng.shuffle(digits)
    bands = list(range(n // br))
    rng.shuffle(bands)
    rows = [b * br + r for b in bands for r in rng.sample(range(br), br)]
    stacks = list(range(n // bc))
    rng.shuffle(stacks)
    cols = [s * bc + c for s in stacks for c in rng.sample(range(bc), bc)]
    # new cell (r, c) takes old cell (rows[r], cols[c])
    new_of_old = {}
    for r in range(n):
        for c in range(n):
            new_of_old[rows[r] * n + cols[c]] = r * n + c
    sol = [0] * (n * n)
    for old, new in new_of_old.items():
        sol[new] = digits[chain.solution[old] - 1]
    return Chain(tuple(sol), tuple(new_of_old[i] for i in chain.order))


@dataclass
class Puzzle:
    """One puzzle with its unique solution and difficulty facts."""

    puzzle: str  # N*N digits, '0' = blank
    solution: str
    size: int
    blanks: int
    nodes: int  # backtracking nodes the MRV solver needed (solver effort)

    def to_dict(self) -> dict:
        return asdict(self)


def make_puzzle(chain: Chain, blanks: int) -> Puzzle:
    grid = chain.puzzle(blanks)
    res = solve(grid, limit=2)
    if res.count != 1 or res.solution != chain.solution:
        raise AssertionError("removal chain produced a non-unique puzzle")  # a solver bug, never expected
    n = int(len(grid) ** 0.5)
    return Puzzle(to_string(grid), to_string(chain.solution), n, blanks, res.nodes)


def generate_puzzles(size: int, count: int, blanks: tuple[int, int], seed: int, split: str = "test") -> list[Puzzle]:
    """`count` unique-solution puzzles with a blank count drawn uniformly from the inclusive range.

    Deterministic in (size, count, blanks, seed, split). Chains too short for the drawn blank count
    (a minimal puzzle reached early) are discarded and redrawn.
    """
    lo, hi = blanks
    cells = size * size
    if not 0 <= lo <= hi < cells:
        raise ValueError(f"blanks range {blanks} must satisfy 0 <= lo <= hi < {cells}")
    rng = random.Random(f"sudoku:{size}:{seed}:{split}:{lo}-{hi}")
    out: list[Puzzle] = []
    seen: set[str] = set()
    while len(out) < count:
        want = rng.randint(lo, hi)
        chain = random_chain(size, rng, split, max_blanks=want)
        if len(chain.order) < want:
            continue
        p = make_puzzle(chain, want)
        if p.puzzle in seen:
            continue
        seen.add(p.puzzle)
        out.append(p)
    return out
