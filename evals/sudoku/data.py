"""Supervised Sudoku examples for fine-tuning: a `quizzes,solutions` file -> (prompt ids, response ids).

The prompt is exactly what the eval sends (`evals.sudoku.formats.build_prompt`, rendered by
`contract.text.encode_prompt` with the same chat template and thinking switch), so a fine-tuned model is
evaluated on the prompts it was trained on. The response is the answer the eval parses: the N*N digits
(compact) or N lines of N digits (chat, as the chat prompt asks), then one stop token (the model's
end-of-turn / EOS) so decoding ends there. Puzzles are read and checked by `evals.sudoku.io` (CSV in the
common Kaggle `quizzes,solutions` layout, or JSONL; every puzzle must have exactly one solution).
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from contract.paths import resolve_path
from contract.text import encode_prompt
from evals.sudoku.formats import FORMATS, build_prompt
from evals.sudoku.io import load_puzzles
from evals.sudoku.puzzles import Puzzle, generate_puzzles


@dataclass
class DataSpec:
    """Where fine-tuning examples come from and how they are rendered (mirrors the eval's `format`)."""

    path: str | None = None  # .csv (quizzes,solutions) or .jsonl; null = the generated curriculum stream
    format: str = "chat"  # compact | chat (evals.sudoku.formats)
    limit: int = 0  # read at most this many puzzles (0 = all)
    enable_thinking: bool | None = False  # the chat template's thinking switch, as the eval's model config sets it
    stop_token_id: int | None = None  # appended to every response; null = the tokenizer's EOS


@dataclass
class Example:
    prompt: list[int]
    response: list[int]
    length: int = 0  # the eval's generation length for it (0: the response's); the masked twin fills up to it


def answer_text(solution: str, fmt: str) -> str:
    """The reply the eval parses: the digits (compact) or one row of digits per line (chat)."""
    if fmt == "compact":
        return solution
    n = int(len(solution) ** 0.5)
    return "\n".join(solution[r * n : (r + 1) * n] for r in range(n))


def to_example(p: Puzzle, spec: DataSpec, tokenizer) -> Example:
    stop = spec.stop_token_id if spec.stop_token_id is not None else tokenizer.eos_token_id
    if stop is None:
        raise ValueError("data.stop_token_id: the tokenizer has no EOS; set the model's end-of-turn id")
    prompt = encode_prompt(tokenizer, build_prompt(p.puzzle, spec.format), spec.enable_thinking)
    response = tokenizer(answer_text(p.solution, spec.format), add_special_tokens=False)["input_ids"] + [stop]
    return Example(prompt, response)


def load_examples(spec: DataSpec, size: int, tokenizer) -> list[Example]:
    """Every example of `spec.path` (up to `limit`), checked: `size`, unique solution, no repeats."""
    if spec.format not in FORMATS:
        raise ValueError(f"data.format: must be one of {FORMATS}, got {spec.format!r}")
    if not spec.path:
        raise ValueError("data.path: a quizzes,solutions .csv (or .jsonl) file is needed for fine-tuning")
    puzzles = load_puzzles(resolve_path(spec.path), limit=spec.limit or None, size=size)
    if not puzzles:
        raise ValueError(f"data.path: {spec.path} holds no puzzles")
    return [to_example(p, spec, tokenizer) for p in puzzles]


class ExampleOrder:
    """Examples in a seeded random order, reshuffled every epoch; batch `i` is a pure function of (seed, i),
    so a resumed run sees the same batches."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed
        self._epoch, self._perm = -1, []

    def batch(self, step: int, size: int) -> list[int]:
        out = []
        for k in range(step * size, (step + 1) * size):
            epoch, i = divmod(k, self.n)
            if epoch != self._epoch:
                self._epoch, self._perm = epoch, list(range(self.n))
                random.Random(f"{self.seed}:{epoch}").shuffle(self._perm)
            out.append(self._perm[i])
        return out


def write_csv(puzzles: list[Puzzle], path: str | Path) -> Path:
    """Write puzzles as a `quizzes,solutions` CSV (the Kaggle layout the readers take)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["quizzes", "solutions"])
        w.writerows([p.puzzle, p.solution] for p in puzzles)
    return path


def make_training_csv(path: str | Path, size: int, count: int, blanks: tuple[int, int], seed: int = 0) -> Path:
    """A training CSV of generated puzzles from the *train* split (disjoint from every held-out eval grid)."""
    return write_csv(generate_puzzles(size, count, blanks, seed, split="train"), path)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="write a quizzes,solutions training CSV (train split)")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--blanks", type=int, nargs=2, default=[6, 11])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(make_training_csv(a.out, a.size, a.count, tuple(a.blanks), a.seed))
