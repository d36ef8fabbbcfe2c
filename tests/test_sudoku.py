"""Sudoku puzzles, formats, file loading, scoring and the held-out split."""

from __future__ import annotations

import random

import pytest

from contract.paths import REPO_ROOT
from evals.sudoku.eval import SudokuEval, blank_bucket, score_answer
from evals.sudoku.formats import chat_prompt, parse_answer, render_grid
from evals.sudoku.grid import from_string, is_valid_solution, solve, to_string
from evals.sudoku.io import load_puzzles, write_jsonl
from evals.sudoku.puzzles import generate_puzzles, is_test_grid, random_chain, relabel
from evals.sudoku.stream import Curriculum, PuzzleStream

SOL6 = "123456456123231564564231312645645312"


@pytest.mark.parametrize("size,blanks", [(4, (6, 10)), (6, (18, 24)), (9, (40, 50))])
def test_generated_puzzles_have_exactly_one_solution(size, blanks):
    ps = generate_puzzles(size, 5 if size == 9 else 20, blanks, seed=3)
    for p in ps:
        grid = from_string(p.puzzle)
        assert blanks[0] <= grid.count(0) == p.blanks <= blanks[1]
        res = solve(grid, limit=2)
        assert res.count == 1 and to_string(res.solution) == p.solution
        assert is_valid_solution(from_string(p.solution))


def test_solver_counts_multiple_solutions():
    two = list(from_string(SOL6))
    for i in (0, 3, 6, 9):  # a 1/4 rectangle over two boxes of one band: swapping it gives a second grid
        two[i] = 0
    assert solve(tuple(two), limit=5).count == 2
    assert solve(from_string(SOL6)).count == 1
    empty = (0,) * 16
    assert solve(empty, limit=2).count == 2  # an empty 4x4 board has many solutions; the count stops at 2


def test_generation_is_reproducible_and_seed_dependent():
    a = generate_puzzles(6, 10, (18, 22), seed=7)
    assert [p.puzzle for p in a] == [p.puzzle for p in generate_puzzles(6, 10, (18, 22), seed=7)]
    assert [p.puzzle for p in a] != [p.puzzle for p in generate_puzzles(6, 10, (18, 22), seed=8)]


def test_held_out_set_disjoint_from_training_stream():
    test = generate_puzzles(6, 30, (18, 26), seed=0, split="test")
    assert all(is_test_grid(from_string(p.solution)) for p in test)
    stream = PuzzleStream(6, Curriculum((18, 26), (18, 26), 0.0), seed=0, initial_pool=32)
    test_solutions = {p.solution for p in test}
    for _ in range(5):
        puzzles, solutions = stream.batch(1.0, 64)
        assert not any(is_test_grid(from_string(s)) for s in solutions)
        assert test_solutions.isdisjoint(solutions)


def test_fixture_is_the_generated_held_out_set():
    ps = load_puzzles(REPO_ROOT / "evals/sudoku/data/sudoku6_test.jsonl")
    assert len(ps) == 300 and min(p.blanks for p in ps) >= 18
    assert [p.puzzle for p in ps[:20]] == [p.puzzle for p in generate_puzzles(6, 20, (18, 26), 0, "test")]


def test_relabel_keeps_validity_and_uniqueness():
    rng = random.Random(1)
    chain = random_chain(6, rng)
    for _ in range(5):
        c = relabel(chain, rng)
        assert is_valid_solution(c.solution)
        assert solve(c.puzzle(len(c.order))).count == 1


def test_curriculum_ramps_then_holds():
    c = Curriculum((2, 12), (14, 26), 0.5)
    assert c.range_at(0.0) == (2, 12) and c.range_at(0.5) == (14, 26) and c.range_at(1.0) == (14, 26)


def test_parser_round_trip_and_tolerance():
    assert parse_answer(SOL6, 6) == SOL6
    fenced = f"Sure! Here it is:\n```text\n{render_grid(SOL6)}\n```\nEach row is valid."
    assert parse_answer(fenced, 6) == SOL6
    spaced = "\n".join(" ".join(SOL6[r * 6 : r * 6 + 6]) for r in range(6))
    assert parse_answer(spaced, 6) == SOL6
    assert parse_answer(",".join(SOL6), 6) == SOL6  # a flat, comma-separated grid on one line
    assert parse_answer("I cannot solve this.", 6) is None
    assert parse_answer(SOL6[:30], 6) is None
    assert parse_answer(SOL6.replace("6", "7"), 6) is None  # digits outside 1..6


def test_chat_prompt_shows_the_grid():
    msg = chat_prompt("120000003400000000560000000000000000")[0]
    assert msg["role"] == "user" and "1 2 . | . . ." in msg["content"] and "6x6" in msg["content"]


def test_load_quizzes_solutions_csv(tmp_path):
    ps = generate_puzzles(6, 4, (18, 20), seed=1)
    f = tmp_path / "p.csv"
    f.write_text("quizzes,solutions\n" + "".join(f"{p.puzzle.replace('0', '.')},{p.solution}\n" for p in ps))
    loaded = load_puzzles(f)
    assert [(p.puzzle, p.solution) for p in loaded] == [(p.puzzle, p.solution) for p in ps]
    bad = tmp_path / "bad.csv"
    bad.write_text(f"quizzes,solutions\n{ps[0].puzzle},{SOL6}\n")
    with pytest.raises(ValueError, match="does not solve"):
        load_puzzles(bad)
    ambiguous = tmp_path / "amb.jsonl"
    write_jsonl([], ambiguous)
    ambiguous.write_text('{"puzzle": "' + "0" * 36 + '"}\n')
    with pytest.raises(ValueError, match="more than one"):
        load_puzzles(ambiguous)


def test_scores_on_known_good_and_bad_answers():
    p = generate_puzzles(6, 1, (20, 20), seed=2)[0]
    assert score_answer(p.puzzle, p.solution, p.solution)["solved"] == 1.0
    wrong = list(p.solution)
    i, j = [k for k, ch in enumerate(p.puzzle) if ch == "0"][:2]
    wrong[i], wrong[j] = wrong[j], wrong[i]
    s = score_answer(p.puzzle, p.solution, "".join(wrong))
    assert s["solved"] == 0.0 and s["parse_failed"] == 0.0 and (wrong[i] == wrong[j] or s["blank_accuracy"] == 18 / 20)
    other_valid = "".join(str({1: 2, 2: 1}.get(int(d), int(d))) for d in p.solution)  # breaks givens 1/2
    assert score_answer(p.puzzle, p.solution, other_valid)["solved"] == 0.0
    unparsed = {"correct": 0.0, "solved": 0.0, "blank_accuracy": 0.0, "parse_failed": 1.0, "format_ok": False}
    assert score_answer(p.puzzle, p.solution, None) == unparsed


def test_eval_items_scores_and_buckets():
    ev = SudokuEval(size=6, num_puzzles=6, blanks=(18, 26), seed=0, bucket_edges=[18, 21, 24, 27])
    items = ev.items()
    assert len({it.sample_id for it in items}) == 6 and ev.max_new_tokens == 36
    rows = []
    for k, it in enumerate(items):
        text = it.target if k % 2 == 0 else "garbage"
        rows.append({"meta": it.meta, **ev.score(it, text)})
    m = ev.summarize(rows)
    assert m["quality"] == m["solved_rate"] == 0.5 and m["parse_failures"] == 3
    assert sum(v for k, v in m.items() if k.startswith("blanks_") and k.endswith("/n")) == 6
    assert blank_bucket(22, [18, 21, 24, 27]) == "blanks_21-23"
    chat = SudokuEval(size=6, num_puzzles=2, format="chat")
    assert isinstance(chat.items()[0].prompt, list)
    with pytest.raises(ValueError):
        SudokuEval(format="xml")


ROWS6 = [SOL6[r * 6 : r * 6 + 6] for r in range(6)]


def test_compact_answers_count_the_first_cells_only():
    """Issue 16 item 12: a correct grid followed by more digits was a parse failure in compact format."""
    assert parse_answer(SOL6 + "1234", 6, "compact") == SOL6
    assert parse_answer(SOL6 + "\n5", 6, "compact") == SOL6
    assert parse_answer(" " + SOL6[:18] + "\n" + SOL6[18:] + "66", 6, "compact") == SOL6
    # still no grid: too short, a digit outside 1..6 or a blank inside the first 36 cells
    assert parse_answer(SOL6[:35], 6, "compact") is None
    assert parse_answer("7" + SOL6[1:] + "1", 6, "compact") is None
    assert parse_answer(SOL6[:10] + "0" + SOL6[11:] + "1", 6, "compact") is None
    assert parse_answer("x" + SOL6 + "1", 6, "compact") is None
    # the eval passes its format: a compact-format item is scored as solved
    ev = SudokuEval(size=6, num_puzzles=1, blanks=(18, 20), seed=1)
    item = ev.items()[0]
    assert ev.score(item, item.target + "123")["solved"] == 1.0


@pytest.mark.parametrize(
    "layout",
    [
        lambda i, r: f"Row {i}: {' '.join(r)}",
        lambda i, r: f"**Row {i}:** {' '.join(r[:3])} | {' '.join(r[3:])}",
        lambda i, r: f"row{i} = {r}",
        lambda i, r: f"R{i}: {','.join(r)}",
        lambda i, r: f"{i}. {' '.join(r)}",
        lambda i, r: f"{i}) {r}",
        lambda i, r: f"({i}) {' '.join(r)}",
        lambda i, r: f"- Line {i}: {r}",
        lambda i, r: f"| R{i} | {' | '.join(r)} |",
    ],
)
def test_chat_answers_with_row_labels_or_numbered_lists_parse(layout):
    """Issue 16 item 12: `Row 1: ...` labels and numbered lists were parse failures in chat format."""
    reply = "Here is the solved grid:\n\n" + "\n".join(layout(i, r) for i, r in enumerate(ROWS6, 1)) + "\n\nDone."
    assert parse_answer(reply, 6) == SOL6
    assert parse_answer(reply, 6, "compact") == SOL6  # a compact model that talks is read the same way


def test_row_labels_never_make_a_grid_of_something_else():
    short = "\n".join(f"{i}) {r[:5]}" for i, r in enumerate(ROWS6, 1))  # the label digit must not fill a row
    assert parse_answer(short, 6) is None
    assert parse_answer("\n".join(f"Row {i}: {r[:5]}" for i, r in enumerate(ROWS6, 1)), 6) is None
    assert parse_answer("\n".join(f"Row {i}: {r}7" for i, r in enumerate(ROWS6, 1)), 6) is None
    five_rows = "\n".join(f"Row {i}: {r}" for i, r in enumerate(ROWS6[:5], 1))
    assert parse_answer(five_rows, 6) is None
    steps = "\n".join(f"Step {i}: {r}" for i, r in enumerate(ROWS6, 1))  # not a row label: 7 digits per line
    assert parse_answer(steps, 6) is None
    assert parse_answer(SOL6 + "1234", 6) is None  # in chat format a 40-digit line is not a grid


def test_report_format_is_the_reports_prompt_and_parses_like_chat():
    """`format=report`: the technical report's Sudoku instruction over N lines of N digits (0 = blank)."""
    from evals.sudoku.formats import REPORT_INSTRUCTION, build_prompt, parse_answer

    puzzle = "1200340000210043"
    [message] = build_prompt(puzzle, "report")
    assert message["role"] == "user" and message["content"] == f"{REPORT_INSTRUCTION}\n\n1200\n3400\n0021\n0043"
    assert parse_answer("1234\n3412\n4321\n2143", 4, "report") == "1234341243212143"
