"""The made-up GPQA fixture (tests/fixtures/gpqa) and what a reply needs to answer its prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "gpqa" / "gpqa_made_up.jsonl"


def letter_of(prompt: str, answer: str) -> str:
    """The letter a GPQA prompt shows `answer` under."""
    return next(m[1] for m in re.finditer(r"^\(([A-D])\) (.*)$", prompt, re.M) if m[2] == answer)


def correct_answer(prompt: str) -> str:
    """The correct answer of the fixture question a GPQA prompt asks."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    return next(r["Correct Answer"] for r in rows if f"question:{r['Question']}\n" in prompt)
