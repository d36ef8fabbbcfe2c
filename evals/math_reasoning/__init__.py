"""GSM8K (CoT) and MATH as d3LLM's AUP leaderboard runs them: data, prompts, answer extraction and equivalence."""

from evals.math_reasoning.eval import MathReasoningEval

__all__ = ["MathReasoningEval"]
