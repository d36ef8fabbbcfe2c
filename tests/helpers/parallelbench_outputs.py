"""Replies to score on ParallelBench tasks: right, wrong, malformed and partly right, made from a reference by rule
(for the metric tests and the agreement check with ParallelBench's own scorers)."""

from __future__ import annotations

import json
import random
from typing import Any


def right_answer(ref: Any) -> str:
    return ref if isinstance(ref, str) else ref.get("example") or ref.get("summary") or ref.get("text", "")


def variants(ref: Any, rng: random.Random) -> list[str]:
    """About 20 replies per reference: the right one, then it edited (items swapped, dropped, doubled, unquoted,
    truncated, wrapped in text, lines shuffled) and outright garbage."""
    right = right_answer(ref)
    out = [right, "", "[]", "[", "]", "I don't know.", right + "\n", " " + right, f"Sure! Here it is: {right}"]
    out += [right[: len(right) // 2], right[:-1], right.replace('"', ""), right.replace('", "', '","')]
    out += [right.replace('"', "'"), right.replace("[", "").replace("]", ""), right.replace(",", "\n")]
    try:
        items = json.loads(right)
    except ValueError:
        items = None
    if isinstance(items, list) and items:
        for _ in range(4):
            edited = list(items)
            op = rng.choice(["swap", "drop", "double", "rename", "extra"])
            i, j = rng.randrange(len(edited)), rng.randrange(len(edited))
            if op == "swap":
                edited[i], edited[j] = edited[j], edited[i]
            elif op == "drop":
                del edited[i]
            elif op == "double":
                edited.insert(i, edited[j])
            elif op == "rename":
                edited[i] = "Nobody Here"
            else:
                edited.append("Extra Person")
            out.append(json.dumps(edited))
        if isinstance(ref, dict) and "input" in ref:
            out += [json.dumps(ref["input"]), json.dumps(list(reversed(ref["input"])))]
    lines = right.split("\n")
    if len(lines) > 1:
        out += ["\n".join(rng.sample(lines, len(lines))), "\n".join(lines[:-1]), "\n".join(lines + lines[:1])]
        out.append("\n".join(" ".join(line) for line in lines))
    chars = list(right)
    if chars:
        k = rng.randrange(len(chars))
        chars[k] = rng.choice("0123AB,; \n")
        out.append("".join(chars))
    return out
