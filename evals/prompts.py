"""Ad-hoc prompts from a local JSONL file: generations and decode figures, no correctness score."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            prompt = row.get("messages") or row.get("prompt")
            if not prompt:
                raise ValueError(f"eval.path: {self.path}:{n} needs a 'prompt' string or a 'messages' list")
            items.append(EvalItem(sample_id=str(row.get("id", n)), prompt=prompt, meta={"line": n}))
        return items[: self.limit] if self.limit else items

    def items(self) -> list[EvalItem]:
        return self._items

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        return {}

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        return {"quality": None}
