"""Sudoku: unique-solution puzzle generation, prompt formats, the eval, and the training data stream."""

from evals.sudoku.eval import SudokuEval

__all__ = ["SudokuEval"]
