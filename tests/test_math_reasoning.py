"""GSM8K (CoT) and MATH as d3LLM's leaderboard runs them (evals/math_reasoning): answer extraction and equivalence on
our own made-up replies, the two prompt protocols, and the data checks that run before any model loads."""

from __future__ import annotations

import json

import pytest

from evals.d3llm_protocol import lm_eval_fewshot, resolve_protocol
from evals.math_reasoning import MathReasoningEval
from evals.math_reasoning.answers import (
    INVALID,
    gsm8k_answers,
    gsm8k_correct,
    gsm8k_reference,
    last_boxed,
    math_answer,
    math_equivalent,
    normalize_math,
)
from tests.helpers.app import REPO

FIX = REPO / "tests/fixtures/d3llm"


def test_gsm8k_strict_and_flexible_extraction():
    reply = "Each box holds 6, so 4 boxes hold 24. Two are broken: 24 - 2 = 22. The answer is 22."
    assert gsm8k_answers(reply) == {"strict": "22", "flexible": "22."}
    assert gsm8k_correct("22.", "22") and gsm8k_correct("$1,250", "1250")
    # no "The answer is": strict finds nothing, flexible takes the last number written
    loose = gsm8k_answers("3 + 4 = 7, then 7 * 2 = 14 apples")
    assert loose == {"strict": INVALID, "flexible": "14"} and not gsm8k_correct(INVALID, "14")
    assert gsm8k_answers("no digits here")["flexible"] == INVALID
    assert gsm8k_answers("The answer is -3.")["strict"] == "-3"
    assert not gsm8k_correct("15", "14")


def test_gsm8k_reference_is_the_number_after_the_marker():
    assert gsm8k_reference("Half of 10 is 5.\n#### 5,000") == "5000"
    assert gsm8k_reference("#### -12") == "-12"


def test_math_answer_takes_minervas_sentence_then_the_last_box():
    assert math_answer("so x=4.\nFinal Answer: The final answer is $4$. I hope it is correct.") == "$4$"
    assert math_answer("Final Answer: The final answer is $\\frac{1}{3}$. ") == "$\\frac{1}{3}$"  # cut after it
    assert math_answer("first \\boxed{2}, then \\boxed{\\frac{3}{\\sqrt{2}}} at last") == "\\frac{3}{\\sqrt{2}}"
    assert math_answer("no answer at all") == INVALID and math_answer("\\boxed{}") == INVALID
    assert last_boxed("\\boxed{1") is None and last_boxed("\\fbox{7}") == "7" and last_boxed("\\boxed 9$ x") == "9"


@pytest.mark.parametrize(
    "answer, reference",
    [
        ("\\frac{1}{2}", "0.5"),
        ("1/2", "\\dfrac{1}{2}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("120^\\circ", "120"),
        ("5 cm", "5"),
        ("x = -3", "-3"),
        ("\\text{(B)}", "(B)"),
        ("10,000", "10000"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("$2\\sqrt{3}$", "2\\sqrt3"),
    ],
)
def test_math_equivalent_forms(answer, reference):
    assert math_equivalent(answer, reference), (normalize_math(answer), normalize_math(reference))


@pytest.mark.parametrize("answer, reference", [("2", "3"), ("\\sqrt{2}", "2"), ("1,2", "12"), (INVALID, "1")])
def test_math_different_answers(answer, reference):
    assert not math_equivalent(answer, reference)


def test_protocols_shape_the_prompts():
    gsm = MathReasoningEval("gsm8k_cot", data_file=str(FIX / "gsm8k.jsonl"), protocol="llada")
    raw = gsm.items()[0].prompt
    assert raw == "Q: A jar holds 7 red marbles and twice as many blue ones. How many marbles are in the jar?\n" + (
        "A: Let's think step by step."
    )
    chat = MathReasoningEval("gsm8k_cot", data_file=str(FIX / "gsm8k.jsonl"), protocol="dream").items()[0].prompt
    assert chat == [{"role": "user", "content": raw}]
    assert gsm.stop_strings == ["Q:", "</s>", "<|im_end|>"] and gsm.max_new_tokens == 256
    shots = MathReasoningEval("math", data_file=str(FIX / "math.jsonl"), protocol="llada").items()[0].prompt
    assert isinstance(shots, str) and shots.count("Problem:\n") == 5 and shots.endswith("\n\nSolution:")
    assert lm_eval_fewshot("minerva_math")[0]["problem"] in shots  # lm-eval's own shots, read from its package
    zero = MathReasoningEval("math", data_file=str(FIX / "math.jsonl"), protocol="dream").items()[0].prompt
    assert zero[0]["content"].count("Problem:") == 1


def test_auto_protocol_follows_the_published_table():
    assert resolve_protocol("auto", "llada_8b_instruct") == "llada"
    assert {resolve_protocol("auto", m) for m in ("dream", "llada2_mini", "diffusiongemma_26b", None)} == {"dream"}
    with pytest.raises(ValueError, match="eval.protocol"):
        resolve_protocol("lada", "dream")


def test_scores_and_summary_on_the_fixture():
    ev = MathReasoningEval("gsm8k_cot", data_file=str(FIX / "gsm8k.jsonl"))
    items = {it.sample_id: it for it in ev.items()}
    right = ev.score(items["gsm8k_cot/3"], "1250 * 4 = 5,000 eggs. The answer is 5,000.")
    wrong = ev.score(items["gsm8k_cot/1"], "7 + 7 = 14, so 14 in all")
    assert right["correct"] == right["correct_strict"] == 1.0 and wrong["correct"] == 0.0
    summary = ev.summarize([{"meta": {}, **right}, {"meta": {}, **wrong}])
    assert summary["accuracy"] == 0.5 and summary["accuracy_strict"] == 0.5 and summary["protocol"] == "dream"
    math = MathReasoningEval("math", data_file=str(FIX / "math.jsonl"))
    angle = next(it for it in math.items() if it.meta["subject"] == "Geometry")
    assert math.score(angle, "Each angle is $\\boxed{120}$ degrees.")["correct"] == 1.0


def test_data_checks_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match=r"eval.data_file: .*bad.jsonl:2: lacks string field\(s\) \['answer'\]"):
        MathReasoningEval("gsm8k_cot", data_file=str(bad))
    with pytest.raises(FileNotFoundError, match="eval.data_file"):
        MathReasoningEval("math", data_file=str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="eval.task"):
        MathReasoningEval("gsm8k")
    hub = MathReasoningEval("math")  # nothing is read until items() is asked for
    assert hub.hub_datasets() == ["EleutherAI/hendrycks_math"]
    assert MathReasoningEval("math", data_file=str(FIX / "math.jsonl")).hub_datasets() == []
