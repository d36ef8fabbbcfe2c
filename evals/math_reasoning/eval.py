"""GSM8K (CoT, 0-shot) and MATH (Minerva prompt) as d3LLM's leaderboard runs them (`evals.d3llm_protocol`).

Prompts are lm-eval's `gsm8k_cot_zeroshot` ("Q: ...\\nA: Let's think step by step.", stop at "Q:") and
`minerva_math` ("Problem:\\n...\\n\\nSolution:", 4 shots under the llada protocol, stop at "Problem:"); 256 new tokens,
as d3LLM's `gen_length`. `correct` is the flexible GSM8K extraction (the strict one is recorded beside it) or the
MATH answer's equivalence (`evals.math_reasoning.answers`). Accuracy is the mean of `correct`, in [0, 1].
"""

from __future__ import annotations

from typing import Any

from contract.text import Prompt
from evals.base import Eval, EvalItem
from evals.d3llm_protocol import lm_eval_fewshot, resolve_protocol
from evals.math_reasoning.answers import (
    INVALID,
    gsm8k_answers,
    gsm8k_correct,
    math_answer,
    math_equivalent,
    math_reference,
)
from evals.math_reasoning.data import HUB, TASKS, MathProblem, read_hub, read_local

STOPS = {"gsm8k_cot": ["Q:", "</s>", "<|im_end|>"], "math": ["Problem:"]}
MATH_SHOTS = {"llada": 4, "dream": 0}  # d3LLM's --num_fewshot per protocol (eval_scripts/*_math.sh)


def gsm8k_text(question: str) -> str:
    return f"Q: {question}\nA: Let's think step by step."


def math_text(problem: str, shots: int) -> str:
    """Minerva's prompt; each shot is "Problem:\\n...\\n\\nSolution: <solution>" and shots are joined by blank lines."""
    parts = [f"Problem:\n{s['problem']}\n\nSolution: {s['solution']}" for s in lm_eval_fewshot("minerva_math")[:shots]]
    return "\n\n".join([*parts, f"Problem:\n{problem}\n\nSolution:"])


class MathReasoningEval(Eval):
    """`task`: gsm8k_cot | math; `data_file`: a local .jsonl in the hub's schema (null = `hub_repo`)."""

    name = "d3llm_math"

    def __init__(
        self,
        task: str = "gsm8k_cot",
        data_file: str | None = None,
        hub_repo: str | None = None,
        protocol: str = "auto",
        model_name: str | None = None,
        limit: int | None = None,
        max_new_tokens: int = 256,
        stop_strings: list[str] | None = None,
        name: str | None = None,
    ):
        if task not in TASKS:
            raise ValueError(f"eval.task: {task!r} is not one of {TASKS}")
        stops = STOPS[task] if stop_strings is None else stop_strings
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stops, limit=limit)
        self.task, self.data_file, self.hub_repo = task, data_file, hub_repo or HUB[task]
        self.protocol = resolve_protocol(protocol, model_name)
        self.name = name or f"d3llm_{task}"
        self._problems: list[MathProblem] | None = None
        if data_file:
            self.problems()  # a missing or malformed file fails before any model loads

    def hub_datasets(self) -> list[str]:
        return [] if self.data_file else [self.hub_repo]

    def problems(self) -> list[MathProblem]:
        if self._problems is None:
            rows = read_local(self.task, self.data_file) if self.data_file else read_hub(self.task, self.hub_repo)
            self._problems = rows[: self.limit] if self.limit is not None else rows
        return self._problems

    def prompt(self, problem: MathProblem) -> Prompt:
        """Raw text under the llada protocol (d3LLM's eval_llada.py templates only code tasks), a chat turn else."""
        if self.task == "gsm8k_cot":
            text = gsm8k_text(problem.question)
        else:
            text = math_text(problem.question, MATH_SHOTS[self.protocol])
        return text if self.protocol == "llada" else [{"role": "user", "content": text}]

    def items(self) -> list[EvalItem]:
        return [
            EvalItem(
                sample_id=p.problem_id,
                prompt=self.prompt(p),
                target=p.reference,
                meta={"subject": p.subject, "level": p.level, "protocol": self.protocol},
            )
            for p in self.problems()
        ]

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        if self.task == "gsm8k_cot":
            found = gsm8k_answers(text)
            return {
                "correct": float(gsm8k_correct(found["flexible"], item.target)),
                "correct_strict": float(gsm8k_correct(found["strict"], item.target)),
                "answer": found["flexible"],
                "answer_strict": found["strict"],
                "format_ok": found["flexible"] != INVALID,
            }
        answer = math_answer(text)
        right = math_equivalent(answer, item.target)
        return {"correct": float(right), "answer": answer, "format_ok": answer != INVALID}

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().summarize(scored)
        out.update(accuracy=out["quality"], protocol=self.protocol, leaderboard_task=self.task)
        if self.task == "gsm8k_cot" and scored:
            out["accuracy_strict"] = sum(r.get("correct_strict", 0.0) for r in scored) / len(scored)
        return out


__all__ = ["MathReasoningEval", "gsm8k_text", "math_reference", "math_text"]
