"""GSM8K and MATH problems from the hub (the sets d3LLM's lm-eval tasks read) or a local .jsonl in the hub's schema.

GSM8K: `openai/gsm8k`, config `main`, split `test` (1,319), rows {question, answer ("... #### N")}.
MATH: `EleutherAI/hendrycks_math` (what lm-eval's `minerva_math` reads), its seven subject configs, split `test`
(5,000), rows {problem, solution (answer boxed), level, type}; `HuggingFaceH4/MATH-500` has the same fields.
A local file's rows may carry an `id`; otherwise the id is the task and the row number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.files import jsonl_rows_as
from evals.math_reasoning.answers import gsm8k_reference, math_reference

TASKS = ("gsm8k_cot", "math")
HUB = {"gsm8k_cot": "openai/gsm8k", "math": "EleutherAI/hendrycks_math"}
MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
FIELDS = {"gsm8k_cot": ("question", "answer"), "math": ("problem", "solution")}


@dataclass(frozen=True)
class MathProblem:
    problem_id: str
    question: str
    reference: str  # the final answer the reply must match
    subject: str = ""
    level: str = ""


def to_problem(task: str, row: dict, fallback_id: str) -> MathProblem:
    q_key, a_key = FIELDS[task]
    missing = [k for k in (q_key, a_key) if not isinstance(row.get(k), str)]
    if missing:
        raise ValueError(f"lacks string field(s) {missing}")
    ref = gsm8k_reference(row[a_key]) if task == "gsm8k_cot" else math_reference(row[a_key])
    return MathProblem(
        str(row.get("id", row.get("unique_id", fallback_id))),
        row[q_key],
        ref,
        str(row.get("type", row.get("subject", ""))),
        str(row.get("level", "")),
    )


def read_local(task: str, path: str | Path) -> list[MathProblem]:
    """Problems of a local .jsonl (hub schema); a bad row fails naming its file and line."""
    return jsonl_rows_as(path, lambda n, row: to_problem(task, row, f"{task}/{n}"), "eval.data_file")


def read_hub(task: str, repo: str) -> list[MathProblem]:
    """The test split from the hub (or this machine's datasets cache)."""
    from datasets import load_dataset

    if task == "gsm8k_cot":
        parts = [("main", load_dataset(repo, "main", split="test"))]
    elif repo == HUB["math"]:
        parts = [(s, load_dataset(repo, s, split="test")) for s in MATH_SUBJECTS]
    else:  # a single-config MATH subset (MATH-500)
        parts = [("", load_dataset(repo, split="test"))]
    return [to_problem(task, dict(row), f"{task}/{cfg}/{n}") for cfg, rows in parts for n, row in enumerate(rows)]
