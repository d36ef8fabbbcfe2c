"""GPQA answer extraction (lm-eval's own filters) on replies with and without thought blocks."""

from __future__ import annotations

import pytest

from evals.gpqa.extract import extract_answers
from evals.lmeval.thoughts import opens_thought, split_thoughts

DOC = {"choices": ["Argon", "Carbon dioxide", "Oxygen", "Nitrogen"], "answer": "(D)"}
GEMMA_OPEN, GEMMA_CLOSE = "<|channel>thought\n", "<channel|>"


def test_plain_reply_both_filters():
    got = extract_answers("Nitrogen dominates. The answer is (D).", DOC)
    assert got == {"strict-match": "(D)", "flexible-extract": "(D)"}


def test_closed_gemma_thought_is_ignored():
    reply = f"{GEMMA_OPEN}Maybe (B) Carbon dioxide? The answer is (B). No: nitrogen.{GEMMA_CLOSE}The answer is (D)."
    assert extract_answers(reply, DOC) == {"strict-match": "(D)", "flexible-extract": "(D)"}
    # without the strip, strict-match starts at the "The answer is (B)" quoted in the reasoning
    unstripped = extract_answers(reply.replace(GEMMA_OPEN, "").replace(GEMMA_CLOSE, " "), DOC)
    assert unstripped["strict-match"].startswith("(B)")


def test_closed_think_tags_and_choice_text_fallback():
    reply = "<think>Oxygen is reactive, so (C) is tempting.</think>\nIt is Nitrogen"
    got = extract_answers(reply, DOC)
    assert got["flexible-extract"] == "(D)"  # matched by choice text, not the (C) inside the thought
    assert got["strict-match"] == "[invalid]"


@pytest.mark.parametrize(
    "reply",
    [
        f"{GEMMA_OPEN}The answer is (A). Let me double-check the mole fractions of",
        "<think>So the answer is (C) probably, but",
    ],
)
def test_unclosed_thought_gives_no_answer(reply):
    split = split_thoughts(reply)
    assert split.unclosed and split.has_thought and split.answer == ""
    assert extract_answers(reply, DOC) == {"strict-match": "[invalid]", "flexible-extract": "[invalid]"}


def test_prefilled_thought_closes_without_opening():
    reply = "weighing (A) against (B)...</think>The answer is (D)."
    split = split_thoughts(reply)
    assert split.has_thought and not split.unclosed and split.answer == "The answer is (D)."
    assert split_thoughts("still thinking (A)", starts_in_thought=True).unclosed
    assert opens_thought("<start_of_turn>model\n<think>\n") and not opens_thought("<think>x</think>")


def test_multiple_blocks_and_no_thought():
    split = split_thoughts("<think>a</think>(A) then <think>b</think> final (B)")
    assert split.answer == "(A) then  final (B)" and split.thought == "a\nb" and not split.unclosed
    plain = split_thoughts("The answer is (A).")
    assert not plain.has_thought and plain.answer == "The answer is (A)."
