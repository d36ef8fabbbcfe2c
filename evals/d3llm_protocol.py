"""The two prompt protocols of d3LLM's leaderboard (github.com/hao-ai-lab/d3LLM, `eval_scripts/`), shared by the
GSM8K / MATH (`evals.math_reasoning`) and HumanEval / MBPP (`evals.code_tasks`) evals.

d3LLM measured its LLaDA rows (`AUP_leaderboard/data_llada.yaml`) with its own `eval_llada.py` and its Dream rows
(`data_dream.yaml`) with lm-eval's `--apply_chat_template`; the two differ in what goes through the chat template:

- `llada`: GSM8K and MATH as raw text (MATH 4-shot), HumanEval and MBPP (3-shot) as one chat turn;
- `dream`: every task as a chat turn (MATH 0-shot), HumanEval and MBPP with an assistant prefix the reply continues.

`auto` picks the protocol d3LLM ran for the model's family: `llada` for LLaDA 8B, `dream` for every other chat model
(DiffusionGemma, Gemma 4, LLaDA 2.x, SDAR, Dream). Few-shot examples are read from the installed lm-eval's task files
(the same lists d3LLM's copy of lm-eval holds), never copied into this repository.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

PROTOCOLS = ("llada", "dream")
LLADA_PROTOCOL_MODELS = frozenset({"llada_8b_instruct"})  # conf/model names whose published rows are data_llada's


def resolve_protocol(protocol: str, model_name: str | None) -> str:
    """`llada` | `dream`, or `auto`: the one d3LLM ran for `model_name`'s family."""
    if protocol == "auto":
        return "llada" if model_name in LLADA_PROTOCOL_MODELS else "dream"
    if protocol not in PROTOCOLS:
        raise ValueError(f"eval.protocol: {protocol!r} is not one of auto, {', '.join(PROTOCOLS)}")
    return protocol


@cache
def lm_eval_fewshot(task_dir: str) -> tuple[dict[str, Any], ...]:
    """The few-shot list of an installed lm-eval task (`list_fewshot_samples()` in `tasks/<task_dir>/utils.py`),
    read as a literal: importing those modules needs packages (math_verify, antlr 4.11, evaluate) we do not install."""
    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / task_dir / "utils.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            ret = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            return tuple(ast.literal_eval(ret.value))
    raise ValueError(f"{path} defines no list_fewshot_samples(): lm-eval {lm_eval.__version__} changed its layout")
