"""Output comparison, as the official grader does it (the grader outside the sandbox runs these).

stdin tests: both texts are stripped and split into lines, each line stripped; line counts must agree;
a line matches exactly or, failing that, when both lines parse as numbers token by token and the
numbers are equal (Decimal, so "1.50" == "1.5" and 10**17 != 10**17 + 1). `float_tolerance` > 0 relaxes
the numeric comparison to math.isclose (a documented deviation, off by default).
functional tests, `official` grading: the returned value, sent out of the sandbox in a typed form
(`driver.typed`) and rebuilt here, equals the expected JSON value under Python equality, as officially:
a list of tuples is not a list of lists, dict keys keep their types, a set is not a list, a returned
top-level tuple counts as a list (the driver converts it), numbers compare as numbers (2.0 == 2,
True == 1), an object of any other type never equals; a numpy array of more than one element is a runtime
error (its truth value is ambiguous there).
functional tests, `strict` grading: the returned value as plain JSON (tuples become lists) equals the
expected JSON value.
Integers of any length parse (Python's 4,300-digit limit on int(str) does not apply here).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any


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


def _parse_int(text: str) -> int:
    return int(text) if len(text) <= 4000 else int(Decimal(text))  # Decimal -> int has no digit limit


def loads(text: str) -> Any:
    return json.loads(text, parse_int=_parse_int)


def functional_matches(got_json: str, want_json: str) -> bool:
    """strict: `got_json` is untrusted text from the sandbox: anything unparsable (or absurdly nested) is wrong."""
    try:
        got = loads(got_json)
    except (ValueError, RecursionError):
        return False
    try:
        return bool(got == loads(want_json))
    except RecursionError:
        return False


class _Opaque:
    """A returned object of a type the official comparison cannot equal to JSON data."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other):
        return False

    def __hash__(self):
        return hash(self.type_name)

    def __repr__(self):
        return f"<{self.type_name} object>"


class _Array:
    """A returned numpy array: official equality is elementwise, and only a single element has a truth value."""

    def __init__(self, size: int, values: Any):
        self.size, self.values = size, values


def _single(value: Any) -> tuple[bool, Any]:
    """(True, x) when `value` is x or x wrapped in singleton lists."""
    while isinstance(value, list):
        if len(value) != 1:
            return False, None
        value = value[0]
    return True, value


def decode_typed(obj: Any) -> Any:
    """Rebuild a value from the driver's typed JSON form (see `driver.typed`)."""
    if isinstance(obj, list):
        return [decode_typed(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    kind, v = obj.get("~"), obj.get("v")
    if kind == "tuple":
        return tuple(decode_typed(x) for x in v)
    if kind == "dict":
        return {decode_typed(k): decode_typed(x) for k, x in v}
    if kind == "set":
        return {decode_typed(x) for x in v}
    if kind == "frozenset":
        return frozenset(decode_typed(x) for x in v)
    if kind == "hexint":
        return int(v, 16)
    if kind == "Fraction":
        return Fraction(v)
    if kind == "Decimal":
        return Decimal(v)
    if kind == "ndarray":
        return _Array(int(obj["size"]), decode_typed(v))
    return _Opaque(str(obj.get("type", "object")))


def functional_verdict(got_typed_json: str, want_json: str) -> str:
    """official: "passed", "wrong_answer" or "runtime_error" (the comparison itself raised there)."""
    try:
        got = decode_typed(loads(got_typed_json))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, ArithmeticError):
        return "wrong_answer"  # untrusted text that is not a value the driver could have sent
    try:
        want = loads(want_json)
        if isinstance(got, _Array):
            ok_got, x = _single(got.values)
            ok_want, y = _single(want)
            if got.size != 1 or not ok_got:
                return "runtime_error"
            return "passed" if ok_want and x == y else "wrong_answer"
        return "passed" if bool(got == want) else "wrong_answer"
    except RecursionError:
        return "wrong_answer"
