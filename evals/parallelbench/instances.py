"""Instances of the Waiting Line and Puzzle tasks, made here from ParallelBench's published task definitions (lines of
3-6 people, one in-context example of the same task, 4x4 Latin squares, 4x4 Sudoku with 12 givens), with our own
name lists and seeds: for tests and the CPU twin. Never a copy of ParallelBench's files (their test set is loaded
from a checkout: `evals.parallelbench.data`). Samples have the official files' schema, so one loader reads both.
"""

from __future__ import annotations

import json
import random
from typing import Any

from evals.parallelbench.tasks import GENERATED

FIRST = (
    "Ada Bram Cora Dov Edda Finn Gus Hana Ivo Juno Kai Lena Milo Nia Otto Pia Quin Rosa Sven Tara Ugo Vera Wes Xena "
    "Yuri Zita"
).split()
LAST = (
    "Abbot Bianchi Castell Dorsey Ekman Falk Gruber Holt Ishii Jansen Kowal Lund Moreau Novak Okafor Petrov Quist "
    "Rahm Sato Thorn Ueda Varga Weller Yoon Zeller"
).split()
SYMBOLS = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [str(d) for d in range(10)]
LINE_OPS = ("copy", "reverse", "sort", "shuffle", "insert_index", "insert_random")
LINE_OPS += ("remove_index", "remove_random", "replace_index", "replace_random")


def people(rng: random.Random, n: int) -> list[str]:
    """n distinct full names."""
    names: set[str] = set()
    while len(names) < n:
        names.add(f"{rng.choice(FIRST)} {rng.choice(LAST)}")
    return rng.sample(sorted(names), n)


def line_case(op: str, rng: random.Random, n: int) -> dict[str, Any]:
    """One Waiting Line case: {"input", "answer", "metadata"} as in ParallelBench's files (the reference of a task
    with many right answers is a dict holding the input line and one right `example`)."""
    *line, word = people(rng, n + 1)
    inp: dict[str, Any] = {"context": json.dumps(line)}
    meta: dict[str, Any] = {"length": n}
    kind, _, where = op.partition("_")
    index = rng.randrange(n + 1 if kind == "insert" else n)
    out = list(line)
    if kind in ("insert", "replace"):
        inp["word"] = meta["word"] = word
        out[index : index + (kind == "replace")] = [word]
    elif kind == "remove":
        del out[index]
    elif op == "reverse":
        out.reverse()
    elif op == "sort":
        out.sort()  # by full name, as ParallelBench's answers are (its prompt says by last name)
    elif op == "shuffle":
        while out == line:
            rng.shuffle(out)
    if where == "index":
        inp["index"] = meta["index"] = index
    if op == "shuffle" or where == "random":
        answer: Any = {"input": line, **({"word": word} if kind in ("insert", "replace") else {})}
        answer["example"] = json.dumps(out)
        if where == "random":
            meta["index"] = None
    else:
        answer = json.dumps(out)
    return {"input": inp, "answer": answer, "metadata": meta}


def latin_case(rng: random.Random) -> dict[str, Any]:
    symbols = rng.sample(SYMBOLS, 4)
    shift = [symbols[i:] + symbols[:i] for i in range(4)]
    rows = rng.sample(shift, 4)
    example = "\n".join(",".join(r) for r in rows)
    inp = {"size": 4, "symbols": "[" + ", ".join(symbols) + "]"}
    return {"input": inp, "answer": {"symbols": symbols, "example": example}, "metadata": {"length": 4}}


def sudoku_cases(count: int, seed: int) -> list[dict[str, Any]]:
    from evals.sudoku.puzzles import generate_puzzles

    def grid(s: str) -> str:
        return "\n".join(s[i : i + 4] for i in range(0, 16, 4))

    puzzles = generate_puzzles(4, count, (4, 4), seed, split="test")
    return [
        {"input": {"sudoku": grid(p.puzzle)}, "answer": grid(p.solution), "metadata": {"length": 12}} for p in puzzles
    ]


def generate(task_name: str, count: int, seed: int, lengths: tuple[int, int] = (3, 6)) -> list[dict[str, Any]]:
    """`count` samples of a Waiting Line or Puzzle task, each with one in-context example of the same task
    (another length where the task has lengths), deterministic in (task, count, seed, lengths)."""
    if task_name not in GENERATED:
        raise ValueError(
            f"eval.task: {task_name!r} has no generator here (only {GENERATED}); point eval.data_dir at a "
            "ParallelBench checkout for the text tasks"
        )
    rng = random.Random(f"parallelbench:{task_name}:{seed}")
    group, op = task_name.split("/")
    if op.startswith("sudoku"):
        cases = sudoku_cases(2 * count, seed)
        pairs = [(cases[2 * i], cases[2 * i + 1]) for i in range(count)]
    elif op.startswith("latin"):
        pairs = [(latin_case(rng), latin_case(rng)) for _ in range(count)]
    else:
        lo, hi = lengths
        sizes = [lo + i % (hi - lo + 1) for i in range(count)]
        pairs = [
            (line_case(op, rng, n), line_case(op, rng, rng.choice([m for m in range(lo, hi + 1) if m != n] or [n])))
            for n in sizes
        ]
    out = []
    for case, example in pairs:
        icl = {k: v for k, v in example.items() if k != "metadata"}
        out.append({**case, "input": {**case["input"], "icl_examples": [icl]}})
    return out
