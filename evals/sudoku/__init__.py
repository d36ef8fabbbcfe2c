"""Sudoku: unique-solution puzzle generation, prompt formats, the eval, the training data stream and recipe."""

from evals.sudoku.eval import SudokuEval

__all__ = ["SudokuEval"]
