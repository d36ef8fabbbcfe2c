"""The official LiveCodeBench generation prompt (generic chat style) and code extraction.

System message + "### Question / ### Format / ### Answer" user turn; with starter code the model is asked
to complete it, without it to read stdin and write stdout. The program is the last fenced block.
"""

from __future__ import annotations

from typing import Any

from evals.livecodebench.data import Problem

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will NOT "
    "return anything except for the program."
)
FORMAT_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters."
)
FORMAT_WITHOUT_STARTER = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows."
)


def question_prompt(problem: Problem) -> str:
    text = f"### Question:\n{problem.question_content}\n\n"
    if problem.starter_code:
        text += f"### Format: {FORMAT_WITH_STARTER}\n```python\n{problem.starter_code}\n```\n\n"
    else:
        text += f"### Format: {FORMAT_WITHOUT_STARTER}\n```python\n# YOUR CODE HERE\n```\n\n"
    return text + "### Answer: (use the provided format with backticks)\n\n"


def build_prompt(problem: Problem, chat: bool = True) -> str | list[dict[str, Any]]:
    """Chat messages (system + user) or, for raw-text decoding, the system message then the question."""
    if chat:
        return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": question_prompt(problem)}]
    return f"{SYSTEM_MESSAGE}\n\n{question_prompt(problem)}"


def extract_code(reply: str) -> str:
    """The body of the last fenced block: the lines between the last two lines containing ```.

    Returns "" when the reply has fewer than two fence lines (graded as a failure, as officially).
    """
    lines = reply.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


def compiles(code: str) -> bool:
    """The format LiveCodeBench's grader needs: a non-empty program that Python compiles (`compile()`; nothing runs)."""
    if not code.strip():
        return False
    try:
        compile(code, "<solution>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True
