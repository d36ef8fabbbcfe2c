"""GPQA answer extraction exactly as lm-eval scores it, after thought blocks are removed.

Uses the built-in task's own `filter_list` (strict-match: "The answer is (X)"; flexible-extract: the last
"(X)", else a choice's text, else ": X"), so re-scoring stored replies offline agrees with a live run.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lm_eval.filters import build_filter_ensemble
from lm_eval.tasks._yaml_loader import load_yaml

from evals.gpqa.tasks import builtin_yaml
from evals.lmeval.thoughts import split_thoughts


@cache
def task_filters(task: str = "gpqa_diamond_cot_zeroshot") -> tuple[tuple[str, list], ...]:
    """(filter name, [(function, kwargs), ...]) from the built-in task YAML."""
    cfg = load_yaml(builtin_yaml(task), resolve_func=False)
    out = []
    for f in cfg.get("filter_list") or []:
        steps = [(step["function"], {k: v for k, v in step.items() if k != "function"}) for step in f["filter"]]
        out.append((f["name"], steps))
    return tuple(out)


def extract_answers(
    reply: str, doc: dict[str, Any], task: str = "gpqa_diamond_cot_zeroshot", starts_in_thought: bool = False
) -> dict[str, str]:
    """Per filter, the letter lm-eval would extract from `reply` ("[invalid]" when none)."""
    answer = split_thoughts(reply, starts_in_thought).answer
    out = {}
    for name, steps in task_filters(task):
        ensemble = build_filter_ensemble(name, steps)
        resps: Any = [[answer]]
        for f in ensemble.filters:
            resps = f().apply(resps, [doc])
        out[name] = list(resps)[0]
    return out
