"""Format success (`format_ok`) for every eval: a planted malformed output is not ok, a well-formed wrong answer is
ok but not correct; the run's `format_ok_rate` reaches metrics.json through the real eval loops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.json_schema import JsonSchemaEval, check_reply, schema_validator
from evals.livecodebench.prompts import compiles
from evals.prompts import PromptsEval
from evals.sudoku import SudokuEval
from harness.runner.store import ResultStore

REPO = Path(__file__).resolve().parents[1]
JSON_TASKS = REPO / "evals" / "json_schema" / "data" / "json_schema_tasks.jsonl"
# One valid reply per shipped task: the fixture set is satisfiable (and its schemas are what the prompts show).
VALID = {
    "person": '{"name": "Ada Okafor", "age": 41}',
    "three_colors": '["red", "amber", "green"]',
    "event_date": '{"title": "Planning", "date": "2027-03-03"}',
    "price": '{"item": "notebook", "price": 4.5, "currency": "EUR"}',
    "is_prime": '{"number": 97, "is_prime": true}',
    "coordinates": '{"lat": 0, "lon": 30}',
    "recipe": '{"title": "Pancakes", "ingredients": [{"item": "flour", "grams": 120}, {"item": "egg", "grams": 50}]}',
    "contact": '{"team": "support", "email": "help@example.com"}',
    "matrix": "[[1, 0], [0, 1]]",
    "shape": '```json\n{"kind": "circle", "radius": 2}\n```',
    "country_code": '{"country": "Kenya", "code": "KE"}',
    "city": '{"city": "Lowbridge", "population": 12000}',
    "word_count": '{"word": "harness", "letters": 7}',
    "todo": '{"tasks": [{"text": "buy milk", "done": true}, {"text": "call Sam", "done": false}]}',
    "rgb": '{"r": 0, "g": 255, "b": 0}',
    "version": '{"version": "2.1.0", "stable": true}',
}


def test_sudoku_complete_grid_is_well_formed_whatever_its_correctness():
    ev = SudokuEval(size=6, num_puzzles=2)
    it = ev.items()[0]
    assert ev.score(it, it.target) == {**ev.score(it, it.target), "format_ok": True, "correct": 1.0}
    wrong = ev.score(it, "1" * 36)  # a complete 6x6 grid of digits 1..6, not a solution
    assert wrong["format_ok"] is True and wrong["correct"] == 0.0
    for malformed in ("12345", "1" * 35 + "7", "no grid here"):
        assert ev.score(it, malformed)["format_ok"] is False


def test_json_schema_fixture_set_is_satisfiable_and_scored_by_parse_and_validation():
    ev = JsonSchemaEval(path=str(JSON_TASKS))
    items = {it.sample_id: it for it in ev.items()}
    assert set(items) == set(VALID)
    for it in items.values():  # the prompt shows the very schema the reply is validated against
        shown = it.prompt[0]["content"].split("Schema:\n", 1)[1].split("\n\nTask: ", 1)[0]
        assert json.loads(shown) == it.target
    for sid, reply in VALID.items():
        assert ev.score(items[sid], reply) == {"correct": 1.0, "format_ok": True, "json_error": None}, sid
    wrong = ev.score(items["person"], '{"name": "Ada", "age": "forty-one"}')  # JSON, but not the schema
    assert wrong["format_ok"] is True and wrong["correct"] == 0.0 and wrong["json_error"].startswith("/age:")
    for malformed in ('{"name": "Ada", "age": 41', 'Sure! Here it is: {"name": "Ada", "age": 41}', ""):
        got = ev.score(items["person"], malformed)
        assert got["format_ok"] is False and got["correct"] == 0.0 and got["json_error"].startswith("not JSON")
    bad_date = ev.score(items["event_date"], '{"title": "Planning", "date": "3 March 2027"}')
    assert bad_date["format_ok"] and not bad_date["correct"] and "date" in bad_date["json_error"]  # formats checked
    summary = ev.summarize([ev.score(items["person"], r) for r in (VALID["person"], '{"age": 1}', "x")])
    assert summary["quality"] == pytest.approx(1 / 3) and summary["parsed_but_invalid"] == 1


def test_json_schema_bad_fixtures_fail_naming_file_and_line(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps({"id": "a", "task": "t", "schema": {"type": "nonsense"}}) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:1 'schema': not a valid JSON schema"):
        JsonSchemaEval(path=str(bad))
    row = {"id": "a", "task": "t", "schema": {"type": "object"}}
    bad.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: id 'a' repeats line 1"):
        JsonSchemaEval(path=str(bad))
    with pytest.raises(FileNotFoundError, match="eval.path"):
        JsonSchemaEval(path=str(tmp_path / "missing.jsonl"))


def test_check_reply_fences_and_errors():
    v = schema_validator({"type": "array", "items": {"type": "integer"}}, "test")
    assert check_reply("```json\n[1, 2]\n```", v).valid and check_reply("  [1]\n", v).valid
    assert not check_reply("[1]\n```", v).parsed  # a stray fence is prose around the JSON
    assert check_reply("[1, 2.5]", v).error == "/1: 2.5 is not of type 'integer'"
    assert not check_reply("[" * 100_000, v).parsed  # nested too deep: not JSON, not a crash


def test_livecodebench_format_is_a_block_that_compiles():
    assert compiles("print(int(input()) * 2)\n") and compiles("def f(x):\n    return x\n")
    assert not compiles("") and not compiles("def f(:\n    pass") and not compiles("x = '\0'")


def test_prompts_format_rules(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "Give a year."}) + "\n")
    plain = PromptsEval(path=str(path))
    assert plain.score(plain.items()[0], "1999") == {}  # no rule: format success is not measured
    ev = PromptsEval(path=str(path), format_regex=r"\A\d{4}\Z")
    assert ev.score(ev.items()[0], "1999")["format_ok"] and not ev.score(ev.items()[0], "in 1999")["format_ok"]
    schema = {"type": "object", "required": ["year"], "properties": {"year": {"type": "integer"}}}
    both = PromptsEval(path=str(path), format_regex="year", format_schema=schema)
    assert both.score(both.items()[0], '{"year": 1999}')["format_ok"]
    assert not both.score(both.items()[0], '{"year": "1999"}')["format_ok"]  # the schema fails
    assert both.items()[0].target != ev.items()[0].target  # a changed rule changes the item hash (no mixed resume)
    schema_file = tmp_path / "s.json"
    schema_file.write_text(json.dumps(schema))
    assert PromptsEval(path=str(path), format_schema=str(schema_file)).schema == schema
    with pytest.raises(ValueError, match="eval.format_regex"):
        PromptsEval(path=str(path), format_regex="(unclosed")
    with pytest.raises(ValueError, match="eval.format_schema: not a valid JSON schema"):
        PromptsEval(path=str(path), format_schema={"type": 3})
    with pytest.raises(FileNotFoundError, match="eval.format_schema"):
        PromptsEval(path=str(path), format_schema=str(tmp_path / "none.json"))


def test_gpqa_malformed_and_well_formed_wrong_replies(tmp_path):
    """GPQA fixture through lm-eval: no "The answer is (X)" is not ok; a wrong letter is ok but not correct."""
    from evals.gpqa import GPQAEval
    from models.tiny import char_tokenizer
    from tests.helpers.gpqa_fixture import DATA, correct_answer, letter_of
    from tests.helpers.replay import ReplayDecoder

    def reply(prompt: str) -> str:
        right = letter_of(prompt, correct_answer(prompt))
        if "atmosphere" in prompt:
            return "I would need to look this up."  # malformed: no answer the strict extraction finds
        wrong = next(x for x in "ABCD" if x != right)
        return f"The answer is ({wrong})." if "ball" in prompt else f"The answer is ({right})."

    ev = GPQAEval(data_files=str(DATA), limit=3, max_new_tokens=64)
    metrics = ev.run(ReplayDecoder(char_tokenizer(), reply), ResultStore(tmp_path / "run"), batch_size=3, seed=0)
    rows = {json.loads(line)["doc_id"]: json.loads(line) for line in (tmp_path / "run" / "samples_scored.jsonl").open()}
    assert [(rows[i]["format_ok"], rows[i]["correct"]) for i in range(3)] == [(False, 0.0), (True, 0.0), (True, 1.0)]
    assert metrics["format_ok_rate"] == pytest.approx(2 / 3) and metrics["format_failures"] == 1


def test_format_ok_rate_reaches_metrics_for_real_decodes(tmp_path):
    """Tiny real models through the harness loop: json_schema and prompts with a rule record the rate."""
    from harness.engine.decode import BlockDiffusionDecoder
    from harness.runner.evaluate import run_items
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig

    dec = BlockDiffusionDecoder(
        DiffusionGemmaAdapter(str(REPO / "outputs/tiny/diffusion"), dtype="float32"), EntropyBoundConfig(max_steps=2)
    )
    evs = [
        JsonSchemaEval(path=str(JSON_TASKS), limit=3, max_new_tokens=8),
        PromptsEval(path=str(REPO / "evals/data/example_prompts.jsonl"), format_regex=r"\S", max_new_tokens=8),
    ]
    for ev in evs:
        store = ResultStore(tmp_path / ev.name)
        m = run_items(ev, dec, store, batch_size=2, seed=0)
        rows = list(store.load().values())
        assert m["format_ok_rate"] == sum(r["format_ok"] for r in rows) / len(rows)
        assert all(r["format_ok"] == bool(r["text"].strip()) for r in rows if ev.name == "prompts")
