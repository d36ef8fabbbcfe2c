"""One reply against one JSON schema: does it parse (the form), and does the value validate (the content)?

The form the scorer needs is one JSON value: the whole reply, or the body of one fenced block that is the whole
reply (```json ... ```), surrounding whitespace ignored. Prose around the JSON is a format failure: a program that
consumes the reply could not read it either. Validation uses the `jsonschema` library with the validator the
schema's `$schema` names (Draft 2020-12 when it names none) and its format checker.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import SchemaError

FENCED = re.compile(r"\A```[\w+-]*[ \t]*\n(?P<body>.*?)\n?```\Z", re.S)
MAX_ERROR_CHARS = 200


@dataclass(frozen=True)
class JsonCheck:
    parsed: bool  # the reply is one JSON value (format_ok)
    valid: bool  # ... and it satisfies the schema (correct)
    error: str | None  # why not: the JSON error, or the first schema violation (its path and message)


def json_text(reply: str) -> str:
    """The JSON part of a reply: the body of a fence that spans the whole reply, else the stripped reply."""
    text = reply.strip()
    m = FENCED.match(text)
    return m.group("body") if m else text


def schema_validator(schema: Any, where: str):
    """A validator for `schema`, refused (naming `where`) when the schema is not a valid JSON schema."""
    if not isinstance(schema, dict | bool):
        raise ValueError(f"{where}: a JSON schema is an object (or true/false), got {type(schema).__name__}")
    cls = validators.validator_for(schema) if isinstance(schema, dict) else validators.Draft202012Validator
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        raise ValueError(f"{where}: not a valid JSON schema: {e.message}") from None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def check_reply(reply: str, validator) -> JsonCheck:
    """Parse `reply` (see `json_text`) and validate the value; the first error by path order says why not."""
    try:
        value = json.loads(json_text(reply))
    except (json.JSONDecodeError, RecursionError) as e:
        why = (
            f"not JSON: {e.msg} (line {e.lineno} column {e.colno})"
            if isinstance(e, json.JSONDecodeError)
            else "nested too deep"
        )
        return JsonCheck(False, False, why)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return JsonCheck(True, True, None)
    first = errors[0]
    path = "/" + "/".join(map(str, first.absolute_path))
    return JsonCheck(True, False, f"{path}: {first.message}"[:MAX_ERROR_CHARS])
