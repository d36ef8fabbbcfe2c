"""HumanEval and MBPP as d3LLM's leaderboard runs them (`evals.d3llm_protocol`), graded in our sandbox.

Prompts, per protocol (d3LLM's `eval_llada.py` and its lm-eval copy's `humaneval_instruct` / `mbpp` / `mbpp_instruct`):

- HumanEval, llada: one chat turn "Write a solution to the following problem and make sure that it passes the
  tests:\\n```python\\n<prompt>\\n```\\n ", no stop string; dream: the same request with "```<prompt>", and an assistant
  prefix "Here is the completed function:\\n```python\\n<prompt>\\n" the reply continues, stopping at a new top-level
  line ("\\ndef", "\\nclass", "\\nif", "\\nprint", "\\n#").
  Program: `sanitize(prompt + "\\n" + fenced code, entry point)`.
- MBPP, 3 shots from lm-eval's list (d3LLM's Dream script asks for 4 of a 3-item list): llada: lm-eval's `mbpp` text
  in one chat turn, stops at "\\nclass", "\\n#", "\\nif", "\\nprint"; program `sanitize(fenced code)`. dream:
  `mbpp_instruct` with the prefix "Here is the completed function:\\n```python\\n", stop at "```"; the program is the
  reply as it is.

`correct` = the program and the task's check exit 0 in the sandbox (pass@1, greedy); 256 new tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from contract.text import Prompt
from evals.base import Eval, EvalItem
from evals.code_tasks.data import HUB, TASKS, CodeProblem, read_hub, read_local
from evals.code_tasks.extract import fenced_code, parses, sanitize
from evals.code_tasks.grade import CodeGrader, SandboxSettings
from evals.d3llm_protocol import lm_eval_fewshot, resolve_protocol

ASK = "Write a solution to the following problem and make sure that it passes the tests:\n"
PREFIX = "Here is the completed function:\n```python\n"
EXPERT = "You are an expert Python programmer, and here is your task: "
MBPP_SHOTS = 3
STOPS = {
    ("humaneval", "llada"): [],
    ("humaneval", "dream"): ["\nclass", "\ndef", "\n#", "\nif", "\nprint"],
    ("mbpp", "llada"): ["\nclass", "\n#", "\nif", "\nprint"],
    ("mbpp", "dream"): ["```"],
}


def mbpp_text(text: str, tests: list[str], protocol: str) -> str:
    """One MBPP question as lm-eval's `mbpp` (llada) or `mbpp_instruct` (dream) writes it."""
    asserts = "\n".join(tests[:3])
    if protocol == "llada":
        return f"{text} Your code should pass these tests:\n\n{asserts}```python\n"
    return f"{EXPERT}{text} Your code should pass these tests:\n\n{asserts}"


def mbpp_prompt(problem: CodeProblem, protocol: str) -> str:
    shots = [mbpp_text(s["text"], s["test_list"], protocol) + f"{s['code']}\n[DONE]" for s in lm_eval_fewshot("mbpp")][
        :MBPP_SHOTS
    ]
    return "\n\n".join([*shots, mbpp_text(problem.prompt, problem.test_list, protocol)])


def build_prompt(task: str, problem: CodeProblem, protocol: str) -> Prompt:
    if task == "humaneval":
        if protocol == "llada":
            return [{"role": "user", "content": f"{ASK}```python\n{problem.prompt}\n```\n "}]
        return [
            {"role": "user", "content": f"{ASK}```{problem.prompt}"},
            {"role": "assistant", "content": f"{PREFIX}{problem.prompt}\n"},
        ]
    turn = [{"role": "user", "content": mbpp_prompt(problem, protocol)}]
    return turn if protocol == "llada" else [*turn, {"role": "assistant", "content": PREFIX}]


def program_of(task: str, problem: CodeProblem, reply: str, protocol: str) -> str:
    """The program graded for `reply` (see the module docstring); "" when nothing usable was written."""
    if task == "mbpp" and protocol == "dream":
        return reply
    code = f"{problem.prompt}\n{fenced_code(reply)}" if task == "humaneval" else fenced_code(reply)
    return sanitize(code, problem.entry_point)


class CodeTaskEval(Eval):
    """`task`: humaneval | mbpp; `data_file`: a local .jsonl in the hub's schema (null = `hub_repo`)."""

    name = "d3llm_code"

    def __init__(
        self,
        task: str = "humaneval",
        data_file: str | None = None,
        hub_repo: str | None = None,
        protocol: str = "auto",
        model_name: str | None = None,
        limit: int | None = None,
        max_new_tokens: int = 256,
        stop_strings: list[str] | None = None,
        timeout_s: float = 3.0,
        memory_mb: int = 1024,
        sandbox: Mapping[str, Any] | None = None,
        name: str | None = None,
    ):
        if task not in TASKS:
            raise ValueError(f"eval.task: {task!r} is not one of {TASKS}")
        self.protocol = resolve_protocol(protocol, model_name)
        stops = STOPS[(task, self.protocol)] if stop_strings is None else stop_strings
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stops, limit=limit)
        self.task, self.data_file, self.hub_repo = task, data_file, hub_repo or HUB[task][0]
        self.name = name or f"d3llm_{task}"
        self._problems: dict[str, CodeProblem] | None = None
        if data_file:
            self.problems()  # a missing or malformed file fails before any model loads
        self.grader = CodeGrader(SandboxSettings.from_config(sandbox), timeout_s, memory_mb)

    def check_runtime(self) -> None:
        self.grader.environment()  # SandboxUnavailable where the isolation cannot be provided

    def hub_datasets(self) -> list[str]:
        return [] if self.data_file else [self.hub_repo]

    def problems(self) -> dict[str, CodeProblem]:
        if self._problems is None:
            rows = read_local(self.task, self.data_file) if self.data_file else read_hub(self.task, self.hub_repo)
            rows = rows[: self.limit] if self.limit is not None else rows
            self._problems = {p.problem_id: p for p in rows}
        return self._problems

    def items(self) -> list[EvalItem]:
        return [
            EvalItem(p.problem_id, build_prompt(self.task, p, self.protocol), p.problem_id, {"protocol": self.protocol})
            for p in self.problems().values()
        ]

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        problem = self.problems()[item.target]
        try:
            program = program_of(self.task, problem, text, self.protocol)
        except SyntaxError:  # nothing in the reply parses
            program = ""
        verdict = self.grader.grade(program, problem.check)
        return {
            "correct": float(verdict.passed),
            "format_ok": bool(program.strip()) and parses(program),
            "status": verdict.status,
            "sandbox": verdict.sandbox,
            "grade_wall_s": verdict.wall_s,
            "program": program,
        }

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().summarize(scored)
        out.update({"pass@1": out["quality"], "accuracy": out["quality"], "protocol": self.protocol})
        out["leaderboard_task"] = self.task
        out["status_counts"] = dict(Counter(r.get("status", "") for r in scored))
        levels = sorted({r.get("sandbox", "") for r in scored} - {"", "none"})
        out["sandbox"] = ",".join(levels) or "none"
        if any(level != "bwrap" for level in levels):
            out["sandbox_warning"] = f"programs ran below bubblewrap ({out['sandbox']}), explicitly allowed"
        return out
