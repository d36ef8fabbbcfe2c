"""JSON-schema filling: replies parsed and validated with `jsonschema` (format success vs correctness)."""

from evals.json_schema.check import JsonCheck, check_reply, schema_validator
from evals.json_schema.eval import JsonSchemaEval

__all__ = ["JsonCheck", "JsonSchemaEval", "check_reply", "schema_validator"]
