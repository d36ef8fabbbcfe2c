"""Output comparison, as the official grader does it (the grader outside the sandbox runs these).

stdin tests: both texts are stripped and split into lines, each line stripped; line counts must agree;
a line matches exactly or, failing that, when both lines parse as numbers token by token and the
numbers are equal (Decimal, so "1.50" == "1.5" and 10**17 != 10**17 + 1). `float_tolerance` > 0 relaxes
the numeric comparison to math.isclose (a documented deviation, off by default).
functional tests: the returned JSON value equals the expected JSON value (Python equality).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, InvalidOperation


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _numbers(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _numeric_line_equal(got: str, want: str, float_tolerance: float) -> bool:
    a, b = _numbers(got), _numbers(want)
    if a is None or b is None or len(a) != len(b):
        return False
    try:
        if float_tolerance > 0:
            return all(
                math.isclose(float(x), float(y), rel_tol=float_tolerance, abs_tol=float_tolerance) for x, y in zip(a, b)
            )
        return a == b
    except (InvalidOperation, ValueError, OverflowError):  # e.g. "sNaN" refuses to compare
        return False


def stdout_matches(got: str, want: str, float_tolerance: float = 0.0) -> bool:
    got_lines, want_lines = _lines(got), _lines(want)
    if len(got_lines) != len(want_lines):
        return False
    return all(g == w or _numeric_line_equal(g, w, float_tolerance) for g, w in zip(got_lines, want_lines))


def functional_matches(got_json: str, want_json: str) -> bool:
    """`got_json` is untrusted text from the sandbox: anything unparsable (or absurdly nested) is wrong."""
    try:
        got = json.loads(got_json)
    except (ValueError, RecursionError):
        return False
    try:
        return bool(got == json.loads(want_json))
    except RecursionError:
        return False
