"""ParallelBench (furiosa-ai/ParallelBench, ICLR 2026): its 17 tasks as evals, scored as ParallelBench scores them."""

from evals.parallelbench.eval import ParallelBenchEval

__all__ = ["ParallelBenchEval"]
