"""GPQA(-Diamond) via lm-eval's built-in tasks, online (gated hub set) or on a local file."""

from evals.gpqa.eval import GPQAEval
from evals.gpqa.extract import extract_answers

__all__ = ["GPQAEval", "extract_answers"]
