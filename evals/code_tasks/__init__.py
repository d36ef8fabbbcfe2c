"""HumanEval and MBPP as d3LLM's AUP leaderboard runs them, graded in this project's sandbox (`evals.sandbox`)."""

from evals.code_tasks.eval import CodeTaskEval

__all__ = ["CodeTaskEval"]
