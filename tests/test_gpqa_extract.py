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


def _lm_eval_raw(reply: str) -> dict[str, str]:
    """lm-eval's own `gpqa_diamond_cot_zeroshot` filters applied to the reply as lm-eval would see it unstripped."""
    from lm_eval.filters import build_filter_ensemble

    from evals.gpqa.extract import task_filters

    out = {}
    for name, steps in task_filters():
        resps = [[reply]]
        for f in build_filter_ensemble(name, steps).filters:
            resps = f().apply(resps, [DOC])
        out[name] = list(resps)[0]
    return out


# Realistic replies without thought blocks: our extraction must agree with lm-eval's filters exactly.
PLAIN = [
    "Nitrogen makes up 78% of air. The answer is (D).",
    "The answer is (D)",
    "Let me think step by step. Argon is 0.9%, CO2 0.04%, O2 21%, N2 78%.\n\nThe answer is (D).",
    "(D)",
    "D",
    "The correct choice is Nitrogen.",
    "Answer: D",
    "It is (B)... no wait, it is (D).",
    "The answer is Nitrogen.",
    "**The answer is (D).**",
    "I am not sure.",
    # the generation stopped on a space / newline token: strict-match's `(?=.)` needs that last character
    "Argon and CO2 are trace gases; oxygen is 21%. The answer is D ",
    "The answer is (D) ",
    "Nitrogen is 78% of the air.\nThe answer is D\n",
    "  \nThe answer is D.",  # leading whitespace is kept too (lm-eval strips nothing without a thought)
    "The answer is D",  # no trailing character: empty strict match, in lm-eval as here
]
# With thought blocks lm-eval (run on the raw text) can pick a choice quoted in the reasoning; we strip the
# thoughts first (documented in docs/evals.md: "thought blocks removed first"). These are the disagreements.
THOUGHT = [
    (
        f"{GEMMA_OPEN}Could it be (B)? The answer is (B). No.{GEMMA_CLOSE}The answer is (D).",
        {"strict-match": "(D)", "flexible-extract": "(D)"},
    ),
    (
        "<think>The answer is (C)? Oxygen is reactive.</think>\nNitrogen, so (D).",
        {"strict-match": "[invalid]", "flexible-extract": "(D)"},
    ),
]


def test_trailing_space_reply_scores_as_lm_eval(tmp_path):
    """The case of issue 26: a reply ending `The answer is B ` is right under lm-eval's strict-match (it reads
    the raw text); the stripped text gave an empty match."""
    doc = {**DOC, "answer": "(B)"}
    reply = "Carbon dioxide absorbs infrared, so the best match is the second choice. The answer is B "
    got = extract_answers(reply, doc)
    assert got["strict-match"] == "B" == _lm_eval_raw(reply)["strict-match"]
    assert _exact_match(got["strict-match"], "(B)") == 1.0
    assert _exact_match(extract_answers(reply.rstrip(), doc)["strict-match"], "(B)") == 0.0


def _exact_match(answer: str, target: str) -> float:
    """GPQA's metric as its task YAML configures it (ignore case and punctuation)."""
    from lm_eval.api.metrics import exact_match_hf_evaluate

    got = exact_match_hf_evaluate([answer], [target], ignore_case=True, ignore_punctuation=True)
    return float(got["exact_match"])


# Thinking replies: lm-eval's own model classes drop the thought with `postprocess_generated_text(...,
# think_end_token=...)` (text after the last close tag, left-stripped) and hand the rest to the filters as is.
THINKING = [
    f"{GEMMA_OPEN}Nitrogen is 78%, argon 0.9%.{GEMMA_CLOSE}\n\nThe answer is D ",
    f"{GEMMA_OPEN}Is it (B)? The answer is (B)? No.{GEMMA_CLOSE} The answer is (D).\n",
    "<think>Oxygen (C) is reactive; the inert majority gas is nitrogen.</think>\nThe answer is D\n",
    "<think>78% nitrogen</think>The answer is D",
]


@pytest.mark.parametrize("reply", THINKING)
def test_thinking_replies_agree_with_lm_eval_think_removal(reply):
    from lm_eval.models.utils import postprocess_generated_text

    close = GEMMA_CLOSE if GEMMA_CLOSE in reply else "</think>"
    as_lm_eval = postprocess_generated_text(reply, stop=None, think_end_token=close)
    assert split_thoughts(reply).answer == as_lm_eval
    assert extract_answers(reply, DOC) == _lm_eval_raw(as_lm_eval)


@pytest.mark.slow
@pytest.mark.parametrize("reply", PLAIN)
def test_plain_replies_agree_with_lm_eval_filters(reply):
    assert extract_answers(reply, DOC) == _lm_eval_raw(reply)


@pytest.mark.parametrize("reply,ours", THOUGHT)
def test_thought_replies_differ_from_raw_lm_eval_only_by_the_strip(reply, ours):
    got, raw = extract_answers(reply, DOC), _lm_eval_raw(reply)
    assert got == ours
    assert raw["strict-match"] != got["strict-match"]  # the documented disagreement: raw filters read the thought
