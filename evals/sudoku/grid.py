"""Sudoku grids of any box shape: a bitmask solver that counts solutions (up to a limit) and reports effort.

Grids are flat tuples of N*N ints, row-major, 0 = blank. Box shapes: 4x4 -> 2x2, 6x6 -> 2x3 (2 rows,
3 columns), 9x9 -> 3x3. The solver uses most-constrained-cell-first backtracking; its node count is
the "solver effort" used for difficulty buckets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

BOX_SHAPES: dict[int, tuple[int, int]] = {4: (2, 2), 6: (2, 3), 9: (3, 3)}


@dataclass(frozen=True)
class Geometry:
    """Cell -> unit lookups for one grid size; cached, so building it costs nothing after the first time."""

    size: int
    box_rows: int
    box_cols: int
    units: tuple[tuple[int, int, int], ...]  # per cell: (row, col, box) index
    peers: tuple[tuple[int, ...], ...]  # per cell: every other cell sharing a row, column or box

    @property
    def cells(self) -> int:
        return self.size * self.size


@cache
def geometry(size: int) -> Geometry:
    if size not in BOX_SHAPES:
        raise ValueError(f"unsupported sudoku size {size}; choose one of {sorted(BOX_SHAPES)}")
    br, bc = BOX_SHAPES[size]
    units = []
    for i in range(size * size):
        r, c = divmod(i, size)
        units.append((r, c, (r // br) * (size // bc) + c // bc))
    peers = tuple(
        tuple(j for j in range(size * size) if j != i and any(a == b for a, b in zip(units[i], units[j])))
        for i in range(size * size)
    )
    return Geometry(size, br, bc, tuple(units), peers)


def size_of(grid) -> int:
    n = int(round(len(grid) ** 0.5))
    if n * n != len(grid) or n not in BOX_SHAPES:
        raise ValueError(f"a grid of {len(grid)} cells is not a supported sudoku (16, 36 or 81 cells)")
    return n


@dataclass
class SolveResult:
    count: int  # solutions found, capped at `limit`
    solution: tuple[int, ...] | None  # the first solution found
    nodes: int  # search nodes visited (solver effort)


def solve(grid, limit: int = 2) -> SolveResult:
    """Count solutions up to `limit` (2 decides uniqueness) with MRV backtracking over bitmasks."""
    n = size_of(grid)
    geo = geometry(n)
    full = (1 << n) - 1
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    cells = list(grid)
    blanks = []
    for i, v in enumerate(cells):
        r, c, b = geo.units[i]
        if v == 0:
            blanks.append(i)
            continue
        if not 1 <= v <= n:
            raise ValueError(f"cell {i} holds {v}, outside 1..{n}")
        bit = 1 << (v - 1)
        if rows[r] & bit or cols[c] & bit or boxes[b] & bit:
            return SolveResult(0, None, 0)  # the givens already clash
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
    state = {"count": 0, "solution": None, "nodes": 0}

    def search() -> bool:
        state["nodes"] += 1
        best, best_opts, best_n = -1, 0, n + 1
        for i in blanks:
            if cells[i]:
                continue
            r, c, b = geo.units[i]
            opts = full & ~(rows[r] | cols[c] | boxes[b])
            k = opts.bit_count()
            if k < best_n:
                best, best_opts, best_n = i, opts, k
                if k <= 1:
                    break
        if best < 0:
            state["count"] += 1
            if state["solution"] is None:
                state["solution"] = tuple(cells)
            return state["count"] >= limit
        r, c, b = geo.units[best]
        opts = best_opts
        while opts:
            bit = opts & -opts
            opts ^= bit
            cells[best] = bit.bit_length()
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            stop = search()
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[b] ^= bit
            cells[best] = 0
            if stop:
                return True
        return False

    search()
    return SolveResult(state["count"], state["solution"], state["nodes"])


def random_solution(size: int, rng: random.Random) -> tuple[int, ...]:
    """A uniformly shuffled complete grid: random-order backtracking fill from an empty board."""
    geo = geometry(size)
    cells = [0] * geo.cells

    def fill(i: int) -> bool:
        if i == geo.cells:
            return True
        used = {cells[j] for j in geo.peers[i]}
        digits = [d for d in range(1, size + 1) if d not in used]
        rng.shuffle(digits)
        for d in digits:
            cells[i] = d
            if fill(i + 1):
                return True
        cells[i] = 0
        return False

    fill(0)
    return tuple(cells)


def is_valid_solution(grid, size: int | None = None) -> bool:
    """Every row, column and box holds each digit exactly once."""
    n = size or size_of(grid)
    geo = geometry(n)
    if len(grid) != geo.cells:
        return False
    want = set(range(1, n + 1))
    for k in range(3):
        groups: dict[int, set[int]] = {}
        for i, v in enumerate(grid):
            groups.setdefault(geo.units[i][k], set()).add(v)
        if any(g != want for g in groups.values()):
            return False
    return True


def keeps_givens(puzzle, answer) -> bool:
    return all(p == 0 or p == a for p, a in zip(puzzle, answer))


def to_string(grid) -> str:
    return "".join(str(v) for v in grid)


def from_string(s: str, size: int | None = None) -> tuple[int, ...]:
    """Parse 'N*N' digits with '0' or '.' for blanks."""
    s = s.strip()
    n = size or size_of(s)
    if len(s) != n * n:
        raise ValueError(f"expected {n * n} cells, got {len(s)}: {s!r}")
    out = []
    for ch in s:
        if ch in "0.":
            out.append(0)
        elif ch.isdigit() and 1 <= int(ch) <= n:
            out.append(int(ch))
        else:
            raise ValueError(f"bad cell {ch!r} for a {n}x{n} sudoku in {s!r}")
    return tuple(out)
