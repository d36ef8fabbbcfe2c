"""Training examples for the CPU twin's models: the Waiting Line and Puzzle tasks made by the eval's own generators
(`evals.parallelbench.instances`), rendered exactly as the eval renders them, never from ParallelBench's test files.

Disjoint from the evaluated instances by construction and by check:
- its own random streams (`parallelbench-train:<seed>`, never the eval's `parallelbench:<task>:<seed>`);
- a line of people (or a Latin square's symbol list) that occurs in any eval instance or in-context example of
  `generate(task, HELD_OUT_SAMPLES, seed)` for a seed in `HELD_OUT_SEEDS` (the twin runs seed 0) is never trained
  on, whatever the task: the stream draws again;
- Sudoku puzzles come from the train split of `evals.sudoku.puzzles` (solution grids outside the held-out hash
  range), the eval's from the test split, so no eval solution grid is ever trained on.
An example is the eval's prompt (in-context example included) and one right answer plus the stop token; tasks with
many right answers (shuffle, the random insert / remove / replace, Latin square) train on the generator's `example`.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterable

from contract.text import encode_prompt
from evals.parallelbench.eval import messages_for
from evals.parallelbench.instances import generate, latin_case, line_case
from evals.parallelbench.tasks import GENERATED, TASKS
from evals.sudoku.data import Example

HELD_OUT_SEEDS = range(10)
HELD_OUT_SAMPLES = 100
LENGTHS = (3, 6)


def case_key(case: dict) -> tuple[str, ...]:
    """What makes two cases the same instance: the line of people, or the Latin square's symbols."""
    inp = case["input"]
    if "context" in inp:
        return tuple(json.loads(inp["context"]))
    if "symbols" in inp:
        return ("latin", inp["symbols"])
    return ("sudoku", inp["sudoku"])


@functools.cache
def held_out_keys() -> frozenset[tuple[str, ...]]:
    """Every line / symbol list of the eval instances (and their in-context examples) the twin could run."""
    keys: set[tuple[str, ...]] = set()
    for name in GENERATED:
        if name.startswith("puzzle/sudoku"):
            continue  # disjoint by the Sudoku split (module docstring)
        for seed in HELD_OUT_SEEDS:
            for sample in generate(name, HELD_OUT_SAMPLES, seed):
                keys.add(case_key(sample))
                keys.update(case_key(ex) for ex in sample["input"]["icl_examples"])
    return frozenset(keys)


def answer_text(answer) -> str:
    """The reply trained on: the answer, or the generator's right `example` where there are many."""
    return answer if isinstance(answer, str) else answer["example"]


class TwinStream:
    """`batch(n)` -> n training Examples (prompt ids, response ids + stop), tasks drawn uniformly from `tasks`;
    deterministic in `seed` (a resumed run passes `seed + step`, as the Sudoku stream does)."""

    def __init__(self, tokenizer, tasks: Iterable[str] = GENERATED, seed: int = 0, enable_thinking: bool | None = None):
        self.tasks = list(tasks)
        unknown = [t for t in self.tasks if t not in GENERATED]
        if unknown or not self.tasks:
            raise ValueError(f"pb_tasks: must be a non-empty subset of {list(GENERATED)}, got {unknown or self.tasks}")
        self.tokenizer, self.enable_thinking = tokenizer, enable_thinking
        self.rng = random.Random(f"parallelbench-train:{seed}")
        self.held_out = held_out_keys()
        self._sudoku: list[dict] = []

    def case(self, name: str, n: int) -> dict:
        """One fresh training case of task `name` (a line of `n` people), never a held-out one."""
        op = name.split("/")[1]
        if op.startswith("sudoku"):
            return self._sudoku_case()
        while True:
            case = latin_case(self.rng) if op.startswith("latin") else line_case(op, self.rng, n)
            if case_key(case) not in self.held_out:
                return case

    def _sudoku_case(self) -> dict:
        from evals.sudoku.puzzles import generate_puzzles

        if not self._sudoku:
            grid = lambda s: "\n".join(s[i : i + 4] for i in range(0, 16, 4))  # noqa: E731
            seed = self.rng.randrange(2**31)
            puzzles = generate_puzzles(4, 256, (4, 4), seed, split="train")
            self._sudoku = [{"input": {"sudoku": grid(p.puzzle)}, "answer": grid(p.solution)} for p in puzzles]
            self.rng.shuffle(self._sudoku)
        return self._sudoku.pop()

    def sample(self, name: str) -> dict:
        """A case with one in-context example of the same task (another length), as the eval's samples are."""
        lo, hi = LENGTHS
        n = self.rng.randint(lo, hi)
        case = self.case(name, n)
        example = self.case(name, self.rng.choice([m for m in range(lo, hi + 1) if m != n]))
        icl = {k: v for k, v in example.items() if k != "metadata"}
        return {**case, "input": {**case["input"], "icl_examples": [icl]}}

    def example(self, name: str) -> Example:
        sample = self.sample(name)
        prompt = encode_prompt(self.tokenizer, messages_for(TASKS[name].prompt, sample), self.enable_thinking)
        reply = self.tokenizer(answer_text(sample["answer"]), add_special_tokens=False)["input_ids"]
        return Example(prompt, reply + [self.tokenizer.eos_token_id], TASKS[name].max_tokens)

    def batch(self, n: int) -> list[Example]:
        return [self.example(self.rng.choice(self.tasks)) for _ in range(n)]
