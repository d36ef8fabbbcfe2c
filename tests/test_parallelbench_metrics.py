"""ParallelBench's scores on hand-made replies (right, wrong, malformed, partly right), the values its own scorers give
(checked against them in tests/test_parallelbench_reference.py), and the eval around them: prompts, references kept
with each row, checksums, skipped metrics."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from evals.parallelbench import ParallelBenchEval
from evals.parallelbench.instances import generate
from evals.parallelbench.metrics import MISSING, bleu, parse_list, score_sample
from evals.parallelbench.tasks import GENERATED, TASKS

LINE = ["Ada Holt", "Bram Sato", "Cora Lund"]
RANDOM_REF = {"input": LINE, "word": "Dov Falk", "example": "unused"}


@pytest.mark.parametrize(
    ("metric", "reply", "ref", "score", "strict"),
    [
        ("list_match_score", json.dumps(LINE), json.dumps(LINE), 1.0, 1.0),
        ("list_match_score", "Ada Holt, Bram Sato, Cora Lund", json.dumps(LINE), 1.0, 0.0),  # no brackets: loose only
        (
            "list_match_score",
            "['Ada Holt', 'Bram Sato', 'Cora Lund']",
            json.dumps(LINE),
            0.0,
            0.0,
        ),  # single quotes kept
        ("list_match_score", 'Answer: ["x"] then ["Ada Holt", "Bram Sato", "Cora Lund"]', json.dumps(LINE), 1.0, 1.0),
        ("list_match_score", '["Ada Holt", "Cora Lund", "Bram Sato"]', json.dumps(LINE), 0.0, 0.0),  # wrong order
        ("list_match_score", '["Ada Holt", "Bram Sato"', json.dumps(LINE), 0.0, 0.0),  # truncated
        ("list_match_score", "", json.dumps(LINE), 0.0, 0.0),
        ("list_shuffle_score", '["Bram Sato", "Ada Holt", "Cora Lund"]', {"input": LINE}, 1.0, 1.0),
        ("list_shuffle_score", json.dumps(LINE), {"input": LINE}, 0.0, 0.0),  # unshuffled
        ("list_shuffle_score", '["Bram Sato", "Ada Holt"]', {"input": LINE}, 0.0, 0.0),  # lost one
        ("list_random_insert_score", '["Ada Holt", "Dov Falk", "Bram Sato", "Cora Lund"]', RANDOM_REF, 1.0, 1.0),
        ("list_random_insert_score", '["Ada Holt", "Bram Sato", "Cora Lund"]', RANDOM_REF, 0.0, 0.0),
        ("list_random_replace_score", '["Ada Holt", "Dov Falk", "Cora Lund"]', RANDOM_REF, 1.0, 1.0),
        ("list_random_replace_score", '["Dov Falk", "Dov Falk", "Cora Lund"]', RANDOM_REF, 0.0, 0.0),
        ("list_random_remove_score", '["Ada Holt", "Cora Lund"]', {"input": LINE}, 1.0, 1.0),
        ("list_random_remove_score", '["Cora Lund", "Ada Holt"]', {"input": LINE}, 0.0, 0.0),  # reordered
        ("latin_square_score", "A,B\nB,A", {"symbols": ["A", "B"]}, 1.0, 1.0),
        ("latin_square_score", "Here:\nA, B\nB, A\n", {"symbols": ["A", "B"]}, 1.0, 1.0),
        ("latin_square_score", "A,B\nA,B", {"symbols": ["A", "B"]}, 0.0, 0.0),  # columns repeat
        ("latin_square_score", "A,B", {"symbols": ["A", "B"]}, 0.0, 0.0),  # one row
        ("sudoku_score", "1234\n3412\n2143\n4321", "1234\n3412\n2143\n4321", 1.0, 1.0),
        ("sudoku_score", "1 2 3 4\n3,4,1,2\n2143\n4321", "1234\n3412\n2143\n4321", 1.0, 0.0),
        ("sudoku_score", "1234\n3412\n2143", "1234\n3412\n2143\n4321", 0.0, 0.0),
        ("sudoku_score", "1234\n3412\n2143\n4312", "1234\n3412\n2143\n4321", 0.0, 0.0),
    ],
)
def test_list_and_puzzle_scores(metric, reply, ref, score, strict):
    assert score_sample(metric, reply, ref) == {"score": score, "score_strict": strict}


def test_parse_list_rules():
    assert parse_list('["a", "b"]', strict=True) == ["a", "b"]
    assert parse_list('["a","b"]', strict=True) is None  # strict wants ", "
    assert parse_list('a, , "b" ,') == ["a", "b"]


def test_text_scores_mark_what_needs_languagetool():
    w2s = {"words": ["dog", "park"], "example": "x"}
    assert score_sample("sentence_to_words_score", "The dog ran.", w2s) == {
        "inclusion_score": 0.0,
        "grammar_score": None,
        "score": 0.0,  # a missing word decides it
    }
    assert score_sample("sentence_to_words_score", "The dog ran in the park.", w2s)["score"] is None
    s = score_sample("summary_score", "Steve and Rob talk about the album.", {"summary": "Steve and Rob will talk."})
    assert s["score"] is None and 0 < s["rougeL_score"] < 1
    assert score_sample("paraphrase_score", "", {"text": "a"})["score"] == 0.0
    assert score_sample("paraphrase_score", "A sentence.", {"text": "a"})["score"] is None


def test_bleu_as_the_hub_module_computes_it():
    """Hand-computed: 13a tokens, clipped 1-4-gram precisions, geometric mean, brevity penalty. The same function
    gave the hub module's value bit for bit on 2,400 paraphrases (docs/parallelbench.md)."""
    ref = "the cat sat on the mat"
    assert bleu(ref, ref) == 1.0
    # 13a splits off the '.' and does not lowercase: 7 tokens, 5/7, 4/6, 3/5, 2/4 match, no penalty
    assert bleu("The cat sat on the mat.", ref) == pytest.approx((5 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25)
    # 5 of the 6 words, in order: precisions 5/5, 4/4, 3/3, 2/2; brevity penalty exp(1 - 6/5)
    assert bleu("the cat sat on the", ref) == pytest.approx(math.exp(1 - 6 / 5))
    # 7 tokens ("the cat sat on the mat today"): 6/7, 5/6, 4/5, 3/4, no penalty
    assert bleu("the cat sat on the mat today", ref) == pytest.approx((6 / 7 * 5 / 6 * 4 / 5 * 3 / 4) ** 0.25)
    assert bleu("mat the on sat cat the", ref) == 0.0  # every unigram, no bigram in order


def test_a_paraphrase_scores_its_bleu_part_and_zero_when_it_copies():
    ref = {"text": "Any idea of what sweater this is?"}
    copy = score_sample("paraphrase_score", " Any idea of what sweater this is? ", ref)
    assert copy == {"inv_bleu_score": 0.0, "bertscore_score": None, "grammar_score": None, "score": 0.0}
    other = score_sample("paraphrase_score", "Can you identify this sweater?", ref)
    assert 0 < other["inv_bleu_score"] <= 1 and other["score"] is None  # BERTScore and grammar still missing
    assert "inv_bleu_score" not in " ".join(MISSING["paraphrase_score"])


@pytest.mark.parametrize("name", GENERATED)
def test_generated_instances_are_right_by_their_own_metric(name):
    """Our generator's reference answers score 1 and the unchanged input (where it differs) 0."""
    spec = TASKS[name]
    for sample in generate(name, 12, seed=3):
        ref = sample["answer"]
        right = ref if isinstance(ref, str) else ref["example"]
        assert score_sample(spec.metric, right, ref)["score_strict" if "[" in right else "score"] == 1.0
        assert len(sample["input"]["icl_examples"]) == 1


def test_eval_items_keep_prompt_examples_and_reference():
    ev = ParallelBenchEval(task="copy", num_samples=3, seed=0)
    item = ev.items()[0]
    roles = [m["role"] for m in item.prompt]
    assert roles == ["user", "assistant", "user"]
    assert item.prompt[-1]["content"].startswith("You are managing a waiting line")
    assert item.meta["reference"] == item.target and item.meta["task"] == "waiting_line/copy"
    row = {**ev.score(item, item.target), "meta": item.meta}
    assert row["correct"] == 1.0 and ev.summarize([row])["quality"] == 1.0


def test_text_task_without_data_dir_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="eval.task"):
        ParallelBenchEval(task="words_to_sentence/easy")
    with pytest.raises(ValueError, match="eval.task: unknown"):
        ParallelBenchEval(task="no_such_task")
    with pytest.raises(ValueError, match="eval.data_dir: eval.official=true"):
        ParallelBenchEval(task="copy", official=True)


def test_official_file_checksum(tmp_path):
    spec = TASKS["waiting_line/copy"]
    (tmp_path / "waiting_line").mkdir()
    bad = tmp_path / "waiting_line/copy.jsonl"
    bad.write_text(json.dumps(generate(spec.name, 1, 0)[0]) + "\n")
    with pytest.raises(ValueError, match="eval.data_dir: .*not ParallelBench's"):
        ParallelBenchEval(task="copy", data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="eval.data_dir"):
        ParallelBenchEval(task="reverse", data_dir=str(tmp_path))
    assert hashlib.sha256(bad.read_bytes()).hexdigest() != spec.sha256


def test_skipped_parts_are_listed_not_averaged(caplog):
    ev = ParallelBenchEval.__new__(ParallelBenchEval)
    ev.spec, ev.max_new_tokens = TASKS["words_to_sentence/easy"], 16
    rows = [
        {f"pb_{k}": v for k, v in score_sample(ev.spec.metric, text, {"words": ["dog"]}).items()}
        for text in ("A dog.", "A cat.")
    ]
    out = ev.summarize(rows)
    assert out["quality"] is None and out["pb_score_known"] == 1
    assert out["pb_inclusion_score"] == 0.5 and set(out["skipped_metrics"]) == {"pb_grammar_score", "pb_score"}
