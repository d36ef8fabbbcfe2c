r"""Ad-hoc prompts from a local JSONL file: generations and decode figures, no correctness score.

One JSON object per line: `{"id": ..., "prompt": "raw text"}` or `{"id": ..., "messages": [{"role": "user",
"content": "..."}, ...]}` (rendered with the checkpoint's chat template). Anything else (a line that is not
JSON, not an object, `"messages": "hello"`, a message without a string role and content, an empty prompt,
bytes that are not UTF-8) fails naming the file and the line.

Format success, optional: `format_regex` (the reply is ok when the regex matches it: `re.search`, so anchor with
`\A...\Z` to require the whole reply) and/or `format_schema` (a JSON schema, inline or a path to a .json file:
the reply must be one JSON value that validates, as in `eval=json_schema`). Each sample then records `format_ok`
and the run its `format_ok_rate`; without either, format success is not measured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contract.files import jsonl_objects
from contract.paths import resolve_path
from evals.base import Eval, EvalItem
from evals.json_schema.check import check_reply, schema_validator


class PromptsEval(Eval):
    name = "prompts"

    def __init__(
        self,
        path: str,
        name: str = "prompts",
        format_regex: str | None = None,
        format_schema: Mapping[str, Any] | str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.name, self.path = name, Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"eval.path: prompts file {self.path} not found")
        try:
            self.format_regex = re.compile(format_regex) if format_regex is not None else None
        except (re.error, TypeError) as e:
            raise ValueError(f"eval.format_regex: not a regular expression ({e}): {format_regex!r}") from None
        self.schema = _load_schema(format_schema)
        self._validator = schema_validator(self.schema, "eval.format_schema") if self.schema is not None else None
        self.format_rule = self.format_regex is not None or self.schema is not None
        self._items = self._load()

    def _load(self) -> list[EvalItem]:
        items = []
        pattern = self.format_regex.pattern if self.format_regex is not None else None
        for n, row in jsonl_objects(self.path, where="eval.path: "):
            prompt = _prompt(row, f"eval.path: {self.path}:{n}")
            # the format rule is what `score` reads: part of each item's hash, so a changed rule is not resumed into
            target = {"format_regex": pattern, "format_schema": self.schema} if self.format_rule else None
            items.append(EvalItem(sample_id=str(row.get("id", n)), prompt=prompt, target=target, meta={"line": n}))
        return items[: self.limit] if self.limit else items

    def items(self) -> list[EvalItem]:
        return self._items

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        """`format_ok` (and why not) where a format rule is configured; nothing else is scored."""
        out: dict[str, Any] = {}
        if self.format_regex is not None:
            out["format_regex_ok"] = self.format_regex.search(text) is not None
        if self._validator is not None:
            res = check_reply(text, self._validator)
            out["format_schema_ok"], out["json_error"] = res.valid, res.error
        if out:
            out["format_ok"] = all(v for k, v in out.items() if k.endswith("_ok"))
        return out

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        return {"quality": None}


def _prompt(row: dict[str, Any], where: str):
    """A row's prompt: a non-empty 'prompt' string, or a non-empty 'messages' list of {role, content} strings."""
    if "messages" in row and row["messages"] is not None:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError(
                f"{where}: 'messages' must be a non-empty list of {{'role': ..., 'content': ...}} objects, got "
                f"{messages!r:.80} (for raw text use 'prompt')"
            )
        for k, m in enumerate(messages):
            well_formed = isinstance(m, dict) and isinstance(m.get("role"), str)
            if not well_formed or not isinstance(m.get("content"), str | list):
                raise ValueError(f"{where}: messages[{k}] needs a string 'role' and a 'content', got {m!r:.80}")
        return messages
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list, got {row!r:.80}")
    return prompt


def _load_schema(schema: Mapping[str, Any] | str | None) -> Any:
    """`eval.format_schema`: an inline schema, or a path to a JSON file holding one (None: no schema)."""
    if schema is None or isinstance(schema, Mapping | bool):
        return dict(schema) if isinstance(schema, Mapping) else schema
    if not isinstance(schema, str):
        raise ValueError(f"eval.format_schema: a JSON schema (mapping) or a path to a .json file, got {schema!r:.80}")
    path = resolve_path(schema)
    if not path.is_file():
        raise FileNotFoundError(f"eval.format_schema: schema file {path} not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"eval.format_schema: {path} is not a JSON file ({e})") from None
