"""GPQA(-Diamond) via lm-eval's built-in tasks, online (gated hub set) or on a local file.

Names are resolved on first use (PEP 562): Hydra imports this package to build `evals.gpqa.GPQAEval`, whose config
checks need only `evals.gpqa.eval`; `extract_answers` pulls in lm-eval's task loader (about 1.5 s), which a bad
config must not wait for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evals.gpqa.eval import GPQAEval
    from evals.gpqa.extract import extract_answers

_WHERE = {"GPQAEval": "evals.gpqa.eval", "extract_answers": "evals.gpqa.extract"}
__all__ = ["GPQAEval", "extract_answers"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
