"""Prompt formats and the answer parser.

- compact: the prompt is the N*N puzzle digits ('0' = blank), the answer the N*N solution digits, nothing
  else. This is what the small models in models/checkpoints/ are trained on (one char token per cell).
- chat: a messages list for instruction models with the grid drawn row by row; the reply is parsed
  leniently (code fences, spaces, separators, box lines), taking the last complete grid in the reply.
- report: the DiffusionGemma report's Sudoku prompt ("Solve the following Sudoku puzzle. Empty cells are
  represented by 0. Output ONLY the solved puzzle"), the grid as N lines of N digits with 0 for blanks, which
  its LoRA fine-tune was trained on; replies are parsed as chat replies.
"""

from __future__ import annotations

import re

from evals.sudoku.grid import BOX_SHAPES, size_of

FORMATS = ("compact", "chat", "report")
REPORT_INSTRUCTION = (
    "Solve the following Sudoku puzzle. Empty cells are represented by 0. Output ONLY the solved puzzle."
)


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


def report_prompt(puzzle: str) -> list[dict[str, str]]:
    n = size_of(puzzle)
    rows = "\n".join(puzzle[r * n : (r + 1) * n] for r in range(n))
    return [{"role": "user", "content": f"{REPORT_INSTRUCTION}\n\n{rows}"}]


def build_prompt(puzzle: str, fmt: str):
    if fmt == "compact":
        return compact_prompt(puzzle)
    if fmt == "chat":
        return chat_prompt(puzzle)
    if fmt == "report":
        return report_prompt(puzzle)
    raise ValueError(f"unknown sudoku prompt format {fmt!r}; choose one of {FORMATS}")


_FENCE = re.compile(r"```[a-zA-Z]*")
# A label in front of a grid row: "Row 1:", "**Row 1**:", "R1 |", "Line 3 -", "1. ", "(2) ", "3) ", "- 4: ".
# The label's number is never a cell: on a labelled line only the digits after the label count.
_ROW_LABEL = re.compile(
    r"""^[\s*_#>|\-•]*(?:
        (?:row|line|r)\s*\#?\s*\d+\s*[*_]*\s*[:.)\]|=\-]?   # Row 1:  R1  Line 2 -
      | \(?\d+\s*[.):\]](?=\s)                            # 1.  1)  (1)  1:  followed by a space
    )""",
    re.IGNORECASE | re.VERBOSE,
)


def _row_digits(line: str, valid: set[str], size: int) -> str | None:
    """The N digits of a grid row on this line (separators ignored, a row label dropped), or None."""
    label = _ROW_LABEL.match(line)
    digits = "".join(ch for ch in line[label.end() if label else 0 :] if ch.isdigit())
    return digits if len(digits) == size and set(digits) <= valid else None


def parse_answer(text: str, size: int, fmt: str = "chat") -> str | None:
    """The solved grid as N*N digits, or None when the reply holds no complete grid.

    Compact replies (`fmt="compact"`): the first N*N non-space characters, when they are all digits 1..N
    (the canvas is the grid; whatever the model writes after it, more digits included, does not count).
    Otherwise (chat replies, or a compact reply that does not start with a grid), per line, the digits 1..N
    (any spaces, '|', ',', '-' or fences ignored, and a row label such as `Row 1:` or a list number such as
    `1.` dropped when the rest is a row); the last run of N consecutive digit-bearing lines with exactly N
    digits each is the grid (lines without digits, such as box separators, are skipped). Failing that, a line
    with exactly N*N digits (a flattened grid) is accepted, or a reply that is only digits and spaces
    beginning with N*N of them and followed by no other digit.
    """
    cells = size * size
    valid = set(str(d) for d in range(1, size + 1))
    if fmt == "compact":
        head = re.sub(r"\s", "", text)[:cells]
        if len(head) == cells and set(head) <= valid:
            return head
    text = _FENCE.sub("\n", text)
    rows = []
    for line in text.splitlines():
        if not any(ch.isdigit() for ch in line):
            continue  # blank lines and box separators neither count nor break a grid
        rows.append(_row_digits(line, valid, size))
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
