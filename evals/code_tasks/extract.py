"""The program a HumanEval / MBPP reply stands for, as d3LLM's post-processing builds it (our own implementation).

d3LLM (`utils/utils_LLaDA/postprocess_code_*.py`, Dream's `build_predictions_instruct`) takes the text after the first
"```python" line up to the next fence, prepends the HumanEval prompt, and "sanitizes" it: the longest stretch of lines
that parses, then only its imports and the top-level classes, assignments and functions that return something,
and, given an entry point, only what the entry point reaches by name. Everything else (prints, tests, stray
calls) is dropped, so a reply that only *calls* its function with bad input still passes.
"""

from __future__ import annotations

import ast

MAX_LINES = 100  # d3LLM looks for the parseable stretch in the first 100 lines


def fenced_code(reply: str) -> str:
    """The text after the first "```python" line (the whole reply if there is none), up to the next fence."""
    return reply.split("```python\n", 1)[-1].split("```", 1)[0]


def parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def longest_parsing_stretch(code: str) -> str:
    """The contiguous run of lines (within the first MAX_LINES) with the most non-blank lines that parses."""
    lines = code.replace("\t", "    ").replace("\r\n", "\n").split("\n")[:MAX_LINES]
    best, best_count = "", 0
    for start in range(len(lines)):
        if not lines[start].strip():
            continue
        for end in range(len(lines), start, -1):  # longest first: the first that parses is this start's best
            count = sum(1 for line in lines[start:end] if line.strip())
            if count <= best_count:
                break
            chunk = "\n".join(lines[start:end])
            if parses(chunk):
                best, best_count = chunk, count
                break
    return best


def _kept(node: ast.stmt) -> str | None:
    """The name a top-level definition binds, if the sanitizer keeps it (functions only when they return)."""
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name if any(isinstance(n, ast.Return) for n in ast.walk(node)) else None
    if isinstance(node, ast.Assign) and node.targets and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def sanitize(code: str, entry_point: str | None = None) -> str:
    """Imports, then the kept definitions (those `entry_point` reaches, when given), as source."""
    tree = ast.parse(longest_parsing_stretch(code))
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if (name := _kept(node)) is not None:
            defs[name] = node  # a later definition of a name replaces the earlier one
    keep = set(defs)
    if entry_point:
        keep, todo = set(), [entry_point]
        while todo:
            name = todo.pop()
            if name in defs and name not in keep:
                keep.add(name)
                todo.extend(_names_used(defs[name]) - keep)
    return "\n".join([ast.unparse(n) for n in imports] + [ast.unparse(n) for k, n in defs.items() if k in keep])
