"""Ad-hoc prompts from a local JSONL file: generations and decode figures, no correctness score.

One JSON object per line: `{"id": ..., "prompt": "raw text"}` or `{"id": ..., "messages": [{"role": "user",
"content": "..."}, ...]}` (rendered with the checkpoint's chat template). Anything else (a line that is not
JSON, not an object, `"messages": "hello"`, a message without a string role and content, an empty prompt,
bytes that are not UTF-8) fails naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.files import jsonl_objects
from evals.base import Eval, EvalItem


class PromptsEval(Eval):
    name = "prompts"

    def __init__(self, path: str, name: str = "prompts", **kwargs):
        super().__init__(**kwargs)
        self.name, self.path = name, Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"eval.path: prompts file {self.path} not found")
        self._items = self._load()

    def _load(self) -> list[EvalItem]:
        items = []
        for n, row in jsonl_objects(self.path, where="eval.path: "):
            prompt = _prompt(row, f"eval.path: {self.path}:{n}")
            items.append(EvalItem(sample_id=str(row.get("id", n)), prompt=prompt, meta={"line": n}))
        return items[: self.limit] if self.limit else items

    def items(self) -> list[EvalItem]:
        return self._items

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        return {}

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
