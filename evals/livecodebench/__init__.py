"""LiveCodeBench code generation: data loading, official prompts, sandboxed grading, pass@k."""

from evals.livecodebench.eval import LiveCodeBenchEval

__all__ = ["LiveCodeBenchEval"]
