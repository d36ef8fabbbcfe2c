"""What an eval is: items with prompts, a per-item scorer, and a summary; the harness's loop
(`harness.runner.evaluate.run_items`) decodes and scores them and the eval never calls the harness.

Evals that drive generation themselves (lm-eval) implement `contract.decoding.SelfDrivingEval` instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from contract.text import Prompt


@dataclass
class EvalItem:
    sample_id: str  # unique and stable within the eval: the resume key
    prompt: Prompt
    target: Any = None  # whatever `score` needs (answer, tests, solution grid...)
    meta: dict[str, Any] = field(default_factory=dict)  # recorded with the sample (bucket, difficulty...)


class Eval(ABC):
    """Base class. Subclasses are instantiated from `conf/eval/*.yaml` via Hydra `_target_`."""

    name: str = "eval"

    def __init__(self, max_new_tokens: int = 256, stop_strings: list[str] | None = None, limit: int | None = None):
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"eval.max_new_tokens: must be an integer >= 1, got {max_new_tokens!r}")
        stops = list(stop_strings or [])
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"eval.stop_strings: every stop string must be a non-empty string, got {stops!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"eval.limit: must be null (all items) or an integer >= 1, got {limit!r}")
        self.max_new_tokens, self.stop_strings, self.limit = max_new_tokens, stops, limit

    @abstractmethod
    def items(self) -> list[EvalItem]:
        """All items, in a fixed order (respect `self.limit` by slicing)."""

    @abstractmethod
    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        """Per-sample scores; must include `correct` (float in [0, 1]), the default quality."""

    def check_runtime(self) -> None:
        """What scoring needs beyond the items (a sandbox to grade programs in): the run's preflight calls this before
        any model loads, and it raises when that is missing. Building an eval needs none of it, so its prompts can be
        formatted (and tested) on any machine. Default: nothing to check."""
        return None

    def position_target(self, item: EvalItem) -> str | None:
        """The right output text whose i-th token is the right i-th output token, where the eval knows it per position
        (self-correction counts, `evals.corrections`); None (the default) where it does not."""
        return None

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        """Eval-level quality figures from stored sample rows. Default: quality = mean of `correct`."""
        n = len(scored)
        return {"quality": sum(r["correct"] for r in scored) / n if n else 0.0}

    def scored_rows(self, store) -> list[dict[str, Any]]:
        """The per-sample rows with their scores (what loggers record). Evals that score after decoding,
        such as lm-eval's, keep them in a file of their own and override this."""
        return list(store.load().values())
