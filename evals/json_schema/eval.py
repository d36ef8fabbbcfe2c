"""JsonSchemaEval: prompts that give a JSON schema to fill, scored by parse + validation (`jsonschema`).

One JSON object per line of `path`: `{"id": ..., "task": "what to describe", "schema": {...}}`. The prompt asks
for one JSON value satisfying the schema, shown in the prompt. Scores per sample: `format_ok` (the reply is one
JSON value: the form a consumer needs, whatever its content), `correct` (it also validates), `json_error` (why
not). Quality = the valid rate. Bad rows (no id / task, an invalid schema, a repeated id) fail naming the file
and the line, before any model loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.files import jsonl_objects
from contract.paths import resolve_path
from evals.base import Eval, EvalItem
from evals.json_schema.check import check_reply, schema_validator

INSTRUCTION = (
    "Fill in the JSON schema below for the task. Reply with one JSON value that satisfies the schema and nothing else."
)


def build_prompt(task: str, schema: Any, chat: bool) -> str | list[dict[str, Any]]:
    text = f"{INSTRUCTION}\n\nSchema:\n{json.dumps(schema, indent=1, ensure_ascii=False)}\n\nTask: {task}\n"
    return [{"role": "user", "content": text}] if chat else text + "\nJSON:\n"


class JsonSchemaEval(Eval):
    name = "json_schema"

    def __init__(self, path: str, chat: bool = True, name: str = "json_schema", **kwargs):
        super().__init__(**kwargs)
        self.name, self.path, self.chat = name, Path(resolve_path(path)), chat
        if not self.path.is_file():
            raise FileNotFoundError(f"eval.path: JSON-schema tasks file {self.path} not found")
        self._items, self._validators = self._load()

    def _load(self) -> tuple[list[EvalItem], dict[str, Any]]:
        items, checks, lines = [], {}, {}
        for n, row in jsonl_objects(self.path, where="eval.path: "):
            where = f"eval.path: {self.path}:{n}"
            sid, task = row.get("id"), row.get("task")
            if not isinstance(sid, str) or not sid or not isinstance(task, str) or not task:
                raise ValueError(f"{where}: needs a non-empty string 'id' and 'task', got {row!r:.80}")
            if sid in lines:
                raise ValueError(f"{where}: id {sid!r} repeats line {lines[sid]}")
            lines[sid] = n
            checks[sid] = schema_validator(row.get("schema"), f"{where} 'schema'")
            prompt = build_prompt(task, row["schema"], self.chat)
            items.append(EvalItem(sid, prompt, target=row["schema"], meta={"line": n}))
        return (items[: self.limit] if self.limit else items), checks

    def items(self) -> list[EvalItem]:
        return self._items

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        res = check_reply(text, self._validators[item.sample_id])
        return {"correct": float(res.valid), "format_ok": res.parsed, "json_error": res.error}

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(scored)
        valid = sum(r["correct"] for r in scored)
        parsed = sum(bool(r["format_ok"]) for r in scored)
        return {
            "quality": valid / n if n else 0.0,
            "valid_rate": valid / n if n else 0.0,
            "parsed_but_invalid": parsed - int(valid),
            "parse_failures": n - parsed,
        }
