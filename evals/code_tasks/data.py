"""HumanEval and MBPP problems from the hub (the sets d3LLM's lm-eval tasks read) or a local .jsonl in the hub's schema.

HumanEval: `openai/openai_humaneval`, split `test` (164), rows {task_id, prompt, test, entry_point}; the check is the
row's `test` then `check(<entry_point>)`. MBPP: `google-research-datasets/mbpp`, config `full`, split `test` (500),
rows {task_id, text, test_list, test_setup_code}; the check is the setup code then the three asserts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contract.files import jsonl_rows_as

TASKS = ("humaneval", "mbpp")
HUB = {"humaneval": ("openai/openai_humaneval", None), "mbpp": ("google-research-datasets/mbpp", "full")}


@dataclass(frozen=True)
class CodeProblem:
    problem_id: str
    prompt: str  # HumanEval: the signature and docstring; MBPP: the task's sentence
    check: str  # appended to the program: the program passes when the whole file exits 0
    entry_point: str | None = None
    test_list: list[str] = field(default_factory=list)  # MBPP: shown in the prompt


def to_problem(task: str, row: dict) -> CodeProblem:
    if task == "humaneval":
        missing = [k for k in ("task_id", "prompt", "test", "entry_point") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"lacks string field(s) {missing}")
        check = f"{row['test']}\n\ncheck({row['entry_point']})\n"
        return CodeProblem(row["task_id"], row["prompt"], check, row["entry_point"])
    tests = row.get("test_list")
    if not isinstance(row.get("text"), str) or not isinstance(tests, list) or len(tests) < 3:
        raise ValueError("needs a string `text` and a `test_list` of at least 3 asserts")
    setup = row.get("test_setup_code") or ""
    return CodeProblem(f"mbpp/{row.get('task_id')}", row["text"], f"{setup}\n" + "\n".join(tests) + "\n", None, tests)


def read_local(task: str, path: str | Path) -> list[CodeProblem]:
    return jsonl_rows_as(path, lambda n, row: to_problem(task, row), "eval.data_file")


def read_hub(task: str, repo: str) -> list[CodeProblem]:
    from datasets import load_dataset

    config = HUB[task][1] if repo == HUB[task][0] else None
    return [to_problem(task, dict(row)) for row in load_dataset(repo, config, split="test")]
