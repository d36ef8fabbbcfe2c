"""Input files that are broken or odd fail naming the file and the line, or are read correctly; nothing is
dropped without a word (issue 16, items 10, 11, 14 and 15): samples.jsonl rows on resume, metrics.json,
Sudoku puzzle files (BOM, wrong lengths, bad JSON, repeats, streaming) and prompts files."""

from __future__ import annotations

import json
import logging

import pytest

import evals.sudoku.io as sudoku_io
from contract.files import jsonl_objects
from contract.records import GenerationResult
from evals.prompts import PromptsEval
from evals.sudoku.eval import SudokuEval
from evals.sudoku.io import load_puzzles
from evals.sudoku.puzzles import generate_puzzles
from harness.runner.store import ResultStore, UnreadableFile, read_metrics, read_samples

PUZZLES = generate_puzzles(6, 20, (18, 20), seed=5)


def _row(sid: str) -> dict:
    return {**GenerationResult(sid, [1, 2], "x", nfe=2).to_dict(), "correct": 1.0}


# ---- samples.jsonl: bad rows on resume (items 10 and 11) -------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        b"{}\n",  # was a KeyError on resume
        b"null\n",  # was a TypeError
        b"\xff\xfe\x00garbage\n",  # was a UnicodeDecodeError
        b'[{"sample_id": "x"}]\n',
        b'{"sample_id": "zz"}\n',  # no token / forward counts: would break the metrics sums
        b'{"sample_id": "q7", "nfe"\n',  # corrupted JSON: was dropped without a word
    ],
    ids=["empty-object", "null", "not-utf8", "list", "no-counts", "bad-json"],
)
def test_resume_drops_a_bad_middle_row_with_a_warning_and_keeps_the_bytes(tmp_path, caplog, bad):
    store = ResultStore(tmp_path / "run")
    store.append(_row("a"))
    with store.samples_path.open("ab") as f:
        f.write(bad)
    store.append(_row("b"))
    store.append(_row("c"))
    original = store.samples_path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="harness.runner.store"):
        rows = store.load()
    assert list(rows) == ["a", "b", "c"]
    warning = caplog.text
    assert str(store.samples_path) in warning and "line 2" in warning and "1 unreadable" in warning
    (backup,) = store.run_dir.glob("samples.jsonl.bad-*")
    assert backup.read_bytes() == original  # the dropped bytes are kept beside the file
    assert backup.name in warning
    assert store.samples_path.read_bytes() == original.replace(bad, b"")
    caplog.clear()
    assert list(store.load()) == ["a", "b", "c"]  # a clean file: no second warning, no second copy
    assert "unreadable" not in caplog.text and len(list(store.run_dir.glob("samples.jsonl.bad-*"))) == 1
    assert [r["sample_id"] for r in read_samples(store.run_dir)] == ["a", "b", "c"]


def test_a_torn_last_line_is_dropped_and_reported(tmp_path, caplog):
    store = ResultStore(tmp_path / "run")
    store.append(_row("a"))
    with store.samples_path.open("a") as f:
        f.write('{"sample_id": "b", "tok')  # SIGKILL mid-write
    with caplog.at_level(logging.WARNING, logger="harness.runner.store"):
        assert list(store.load()) == ["a"]
    assert "line 2: torn last line" in caplog.text
    store.append(_row("b"))  # the next sample starts on a line of its own
    assert list(store.load()) == ["a", "b"]


def test_an_unreadable_metrics_file_is_named(tmp_path):
    (tmp_path / "metrics.json").write_text('{"quality": 0.5, "tp')
    with pytest.raises(UnreadableFile, match=r"metrics\.json:1: not valid JSON"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text("null")
    with pytest.raises(UnreadableFile, match=r"metrics\.json: a JSON NoneType, not an object"):
        read_metrics(tmp_path)


# ---- Sudoku puzzle files (items 10, 14, 15) ---------------------------------------------------------------


def _csv(puzzles, header: str = "quizzes,solutions") -> str:
    return header + "\n" + "".join(f"{p.puzzle},{p.solution}\n" for p in puzzles)


def test_an_excel_csv_with_a_byte_order_mark_loads(tmp_path):
    f = tmp_path / "excel.csv"
    f.write_bytes(_csv(PUZZLES[:3]).encode("utf-8-sig"))  # Excel's "CSV UTF-8" starts with EF BB BF
    assert [p.puzzle for p in load_puzzles(f)] == [p.puzzle for p in PUZZLES[:3]]
    g = tmp_path / "caps.csv"
    g.write_text(_csv(PUZZLES[:2], header=" Quizzes , Solutions "))
    assert len(load_puzzles(g)) == 2


@pytest.mark.parametrize(
    "name,body,error",
    [
        (
            "short.csv",
            lambda: _csv(PUZZLES[:2]) + f"{PUZZLES[2].puzzle[:-1]},{PUZZLES[2].solution}\n",
            r"short\.csv:4: .*35",
        ),
        ("fields.csv", lambda: _csv(PUZZLES[:2]) + "1,2,3\n", r"fields\.csv:4: 3 fields, but the header"),
        ("nocol.csv", lambda: "grid,answer\n" + PUZZLES[0].puzzle + ",x\n", r"nocol\.csv:2: no puzzle column"),
        ("bad.jsonl", lambda: json.dumps({"puzzle": PUZZLES[0].puzzle}) + "\n{oops\n", r"bad\.jsonl:2: not valid JSON"),
        ("list.jsonl", lambda: "[1, 2]\n", r"list\.jsonl:1: expected a JSON object"),
        ("size.jsonl", lambda: json.dumps({"puzzle": "0" * 15 + "1"}) + "\n", r"size\.jsonl:1: 16 cells, not a 6x6"),
        ("sol.csv", lambda: f"quizzes,solutions\n{PUZZLES[0].puzzle},{'1' * 35}\n", r"sol\.csv:2: expected 36 cells"),
    ],
)
def test_puzzle_file_errors_name_the_file_and_the_line(tmp_path, name, body, error):
    f = tmp_path / name
    f.write_text(body())
    with pytest.raises(ValueError, match=error):
        SudokuEval(size=6, path=str(f), num_puzzles=50).items()


def test_a_puzzle_file_that_is_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "latin1.csv"
    f.write_bytes(_csv(PUZZLES[:2]).encode() + b"caf\xe9,x\n")
    with pytest.raises(ValueError, match=r"latin1\.csv:4: not UTF-8"):
        load_puzzles(f)


def test_a_repeated_puzzle_is_refused_naming_both_lines(tmp_path):
    f = tmp_path / "dups.csv"
    blanks_as_dots = PUZZLES[1].puzzle.replace("0", ".")  # the same puzzle, spelled differently
    f.write_text(_csv(PUZZLES[:3]) + f"{blanks_as_dots},{PUZZLES[1].solution}\n")
    with pytest.raises(ValueError, match=r"dups\.csv:5: the same puzzle as line 3"):
        SudokuEval(size=6, path=str(f), num_puzzles=10).items()
    assert len(SudokuEval(size=6, path=str(f), num_puzzles=3).items()) == 3  # the repeat lies past the 3 read


def test_num_puzzles_streams_the_file_and_stops_early(tmp_path, monkeypatch):
    """A 200,000-row file with num_puzzles=20: 20 rows are parsed and solved, not the whole file (the rows
    after the 20th repeat the first ones, which would be refused as repeats were they read)."""
    f = tmp_path / "big.csv"
    f.write_text(_csv(PUZZLES * 10_000))
    assert f.read_text().count("\n") == 200_001
    parsed = []
    real = sudoku_io.to_puzzle

    def counting(*args, **kwargs):
        parsed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sudoku_io, "to_puzzle", counting)
    items = SudokuEval(size=6, path=str(f), num_puzzles=20).items()
    assert [it.meta["puzzle"] for it in items] == [p.puzzle for p in PUZZLES]
    assert len(parsed) == 20
    parsed.clear()
    assert len(load_puzzles(f, limit=5)) == 5 and len(parsed) == 5


def test_a_sudoku_eval_without_a_cap_reads_the_whole_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"puzzle": p.puzzle}) + "\n" for p in PUZZLES[:4]))
    assert len(SudokuEval(size=6, path=str(f), num_puzzles=None).items()) == 4
    with pytest.raises(ValueError, match="eval.num_puzzles: null"):
        SudokuEval(size=6, num_puzzles=None)


# ---- prompts files (items 10 and 15) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line,error",
    [
        ('{"id": "a", "messages": "hello"}', r"p\.jsonl:2: 'messages' must be a non-empty list"),
        ('{"id": "a", "messages": []}', r"p\.jsonl:2: 'messages' must be a non-empty list"),
        ('{"id": "a", "messages": [{"role": "user"}]}', r"p\.jsonl:2: messages\[0\] needs"),
        ('{"id": "a", "messages": ["hi"]}', r"p\.jsonl:2: messages\[0\] needs"),
        ('{"id": "a", "prompt": ["hi"]}', r"p\.jsonl:2: needs a non-empty 'prompt' string"),
        ('{"id": "a", "prompt": ""}', r"p\.jsonl:2: needs a non-empty 'prompt' string"),
        ('{"id": "a", "prompt": "x"', r"p\.jsonl:2: not valid JSON"),
        ('"just text"', r"p\.jsonl:2: expected a JSON object"),
    ],
)
def test_prompt_file_errors_name_the_file_and_the_line(tmp_path, line, error):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "ok", "prompt": "hello"}\n' + line + "\n")
    with pytest.raises(ValueError, match=error):
        PromptsEval(str(f))


def test_prompt_files_read_chat_raw_bom_and_reject_non_utf8(tmp_path):
    f = tmp_path / "p.jsonl"
    chat = [{"role": "user", "content": "hi"}]
    f.write_bytes(
        ("\n".join([json.dumps({"id": "r", "prompt": "hello"}), json.dumps({"messages": chat})]) + "\n").encode(
            "utf-8-sig"
        )
    )
    items = PromptsEval(str(f)).items()
    assert [(it.sample_id, it.prompt) for it in items] == [("r", "hello"), ("2", chat)]
    f.write_bytes(b'{"id": "r", "prompt": "hello"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: not UTF-8"):
        PromptsEval(str(f))


# ---- the one JSON Lines reader ---------------------------------------------------------------------------


def test_jsonl_objects_skips_a_torn_last_line_only_when_asked(tmp_path):
    path = tmp_path / "appended.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": ')  # a crash mid-append tore the last line
    assert list(jsonl_objects(path, torn_tail_ok=True)) == [(1, {"a": 1}), (3, {"a": 2})]
    with pytest.raises(ValueError, match=f"{path}:4: not valid JSON"):
        list(jsonl_objects(path))
    path.write_bytes(b'{"a": \n{"a": 2}\n')  # a bad line with its newline is not a torn tail: it still fails
    with pytest.raises(ValueError, match=f"{path}:1: not valid JSON"):
        list(jsonl_objects(path, torn_tail_ok=True))
