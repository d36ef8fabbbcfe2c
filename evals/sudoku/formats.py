"""Prompt formats and the answer parser.

- compact: the prompt is the N*N puzzle digits ('0' = blank), the answer the N*N solution digits, nothing
  else. This is what the small models in models/checkpoints/ are trained on (one char token per cell).
- chat: a messages list for instruction models with the grid drawn row by row; the reply is parsed
  leniently (code fences, spaces, separators, box lines), taking the last complete grid in the reply.
"""

from __future__ import annotations

import re

from evals.sudoku.grid import BOX_SHAPES, size_of

FORMATS = ("compact", "chat")


def compact_prompt(puzzle: str) -> str:
    return puzzle


def render_grid(puzzle: str, blank: str = ".") -> str:
    """Rows of space-separated digits, '|' between box columns and a dashed line between box rows."""
    n = size_of(puzzle)
    br, bc = BOX_SHAPES[n]
    lines = []
    for r in range(n):
        if r and r % br == 0:
            lines.append("-" * (2 * n + 2 * (n // bc - 1) - 1))
        cells = [puzzle[r * n + c] if puzzle[r * n + c] != "0" else blank for c in range(n)]
        groups = [" ".join(cells[s : s + bc]) for s in range(0, n, bc)]
        lines.append(" | ".join(groups))
    return "\n".join(lines)


def chat_prompt(puzzle: str) -> list[dict[str, str]]:
    n = size_of(puzzle)
    br, bc = BOX_SHAPES[n]
    text = (
        f"Solve this {n}x{n} Sudoku. Every row, every column and every {br}x{bc} box must contain each digit "
        f"1-{n} exactly once. Blanks are shown as '.'.\n\n{render_grid(puzzle)}\n\n"
        f"Reply with the completed grid only: {n} lines of {n} digits."
    )
    return [{"role": "user", "content": text}]


def build_prompt(puzzle: str, fmt: str):
    if fmt == "compact":
        return compact_prompt(puzzle)
    if fmt == "chat":
        return chat_prompt(puzzle)
    raise ValueError(f"unknown sudoku prompt format {fmt!r}; choose one of {FORMATS}")


_FENCE = re.compile(r"```[a-zA-Z]*")


def parse_answer(text: str, size: int) -> str | None:
    """The solved grid as N*N digits, or None when the reply holds no complete grid.

    Compact replies: the first N*N characters that are digits 1..N (the canvas is exactly the grid).
    Chat replies: per line, the digits 1..N (any spaces, '|', ',', '-' or fences ignored); the last run of
    N consecutive digit-bearing lines with exactly N digits each is
    the grid (lines without digits, such as box separators, are skipped). Failing that, a line with exactly N*N
    digits (a flattened grid) is accepted.
    """
    cells = size * size
    text = _FENCE.sub("\n", text)
    valid = set(str(d) for d in range(1, size + 1))
    rows = []
    for line in text.splitlines():
        digits = [ch for ch in line if ch.isdigit()]
        if not digits:
            continue  # blank lines and box separators neither count nor break a grid
        rows.append("".join(digits) if len(digits) == size and all(d in valid for d in digits) else None)
    best = None
    run: list[str] = []
    for row in rows:
        if row is None:
            run = []
            continue
        run.append(row)
        if len(run) >= size:
            best = "".join(run[-size:])
    if best is not None:
        return best
    flat = [line for line in (re.sub(r"[^0-9]", "", ln) for ln in text.splitlines()) if len(line) == cells]
    if flat and all(ch in valid for ch in flat[-1]):
        return flat[-1]
    stripped = re.sub(r"\s", "", text)
    if (
        len(stripped) >= cells
        and all(ch in valid for ch in stripped[:cells])
        and not stripped[cells : cells + 1].isdigit()
    ):
        return stripped[:cells]
    return None
