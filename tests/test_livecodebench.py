"""LiveCodeBench: data decoding and release selection, prompts, comparison, sandboxed grading in both modes
(`official` run semantics and `strict` plain runs, on programs written for this project), pass@k, the eval
(Hydra-instantiated) and the grading CLI, all on fixture files written for this project."""

from __future__ import annotations

import base64
import json
import pickle
import shutil
import subprocess
import sys
import zlib
from fractions import Fraction
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from evals.diagnostics import run_diagnostics
from evals.livecodebench import grade as grade_cli
from evals.livecodebench.compare import decode_typed, functional_matches, functional_verdict, stdout_matches
from evals.livecodebench.data import decode_tests, load_problems, read_jsonl, release_files
from evals.livecodebench.driver_common import typed
from evals.livecodebench.driver_official import official_stdin_source
from evals.livecodebench.grader import Grader, GradingConfig
from evals.livecodebench.passk import mean_pass_at_k, pass_at_k
from evals.livecodebench.prompts import SYSTEM_MESSAGE, build_prompt, extract_code

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "livecodebench"
sys.path.insert(0, str(FIX))
import make_fixtures as mf  # noqa: E402  (the fixture programs)
import semantics as sem  # noqa: E402  (programs for the official-vs-plain run differences)

pytestmark = pytest.mark.timeout(120)
# Loud on purpose: grading refuses to run without bubblewrap, so these tests cannot run either.
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="BUBBLEWRAP MISSING: sandbox tests not run; apt-get install -y bubblewrap"
)
MODES = ("official", "strict")


@pytest.fixture(scope="module")
def problems():
    return {p.question_id: p for p in load_problems(FIX, "release_v2")}


@pytest.fixture(scope="module", params=MODES)
def grader(request):
    return Grader(GradingConfig(timeout_s=1.0, grading=request.param))


@pytest.fixture(scope="module")
def graders():
    return {mode: Grader(GradingConfig(timeout_s=2.0, grading=mode)) for mode in MODES}


# -- data --------------------------------------------------------------------------------------------


def test_release_selection_matches_the_official_loader():
    assert release_files("release_v1") == ["test.jsonl"]
    assert release_files("release_v3") == ["test.jsonl", "test2.jsonl", "test3.jsonl"]
    assert release_files("v6") == ["test6.jsonl"]
    assert release_files("v1") == ["test.jsonl"]
    assert release_files("v4_v6") == ["test4.jsonl", "test5.jsonl", "test6.jsonl"]
    assert len(release_files("release_latest")) == 6
    for bad in ("release_v7", "v0", "v5_v3", "latest"):
        with pytest.raises(ValueError, match="unknown LiveCodeBench release"):
            release_files(bad)


def test_compressed_private_tests_decode():
    raw = json.loads((FIX / "test.jsonl").read_text().splitlines()[0])["private_test_cases"]
    assert not raw.lstrip().startswith("[")  # really the compressed form
    text = pickle.loads(zlib.decompress(base64.b64decode(raw)))
    cases = decode_tests(raw)
    assert [c.__dict__ for c in cases] == json.loads(text)
    assert cases[1].input == "4\n-4 10 7 7\n" and cases[1].output == "20\n10\n" and cases[1].testtype == "stdin"


def test_plain_json_tests_and_refused_pickles():
    plain = json.dumps([{"input": "1\n", "output": "0.5\n", "testtype": "stdin"}])
    assert decode_tests(plain)[0].output == "0.5\n"
    evil = base64.b64encode(zlib.compress(pickle.dumps(Path("/")))).decode()
    with pytest.raises(ValueError):
        decode_tests(evil)  # a pickle that needs a class lookup is refused, never executed
    with pytest.raises(ValueError, match="neither JSON"):
        decode_tests("not json at all")


def test_release_and_date_window(problems):
    assert sorted(p.question_id for p in load_problems(FIX, "release_v1")) == ["fx_pairs", "fx_sum_max"]
    assert sorted(problems) == ["fx_halves", "fx_pairs", "fx_sum_max"]
    assert [p.question_id for p in load_problems(FIX, "v2")] == ["fx_halves"]
    window = load_problems(FIX, "release_v2", start_date="2023-07-01", end_date="2024-05-20")
    assert sorted(p.question_id for p in window) == ["fx_halves", "fx_pairs"]
    with pytest.raises(FileNotFoundError, match="test3.jsonl"):
        load_problems(FIX, "release_v3")
    with pytest.raises(ValueError, match="after end_date"):
        load_problems(FIX, "release_v2", start_date="2025-01-01", end_date="2024-01-01")
    pairs = problems["fx_pairs"]
    assert pairs.mode == "functional" and pairs.func_name == "countPairs" and len(pairs.tests) == 4


# -- prompts and comparison ----------------------------------------------------------------------------


def test_prompt_format_with_and_without_starter_code(problems):
    msgs = build_prompt(problems["fx_pairs"])
    assert msgs[0] == {"role": "system", "content": SYSTEM_MESSAGE}
    user = msgs[1]["content"]
    assert user.startswith("### Question:\n") and "### Format: You will use the following starter code" in user
    assert "```python\nclass Solution:\n    def countPairs" in user
    assert user.endswith("### Answer: (use the provided format with backticks)\n\n")
    raw = build_prompt(problems["fx_sum_max"], chat=False)
    assert raw.startswith(SYSTEM_MESSAGE) and "Read the inputs from stdin" in raw and "# YOUR CODE HERE" in raw


def test_extract_code_takes_the_last_fenced_block():
    reply = "Plan:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\nprint(3)\n```\nDone."
    assert extract_code(reply) == "print(2)\nprint(3)"
    assert extract_code("no code here") == ""
    assert extract_code("```python\nprint(1)") == ""  # unclosed block: nothing to grade


def test_stdout_comparison_rules():
    assert stdout_matches("  7 \n4\n\n", "7\n4")
    assert not stdout_matches("7\n4\n5", "7\n4")
    assert stdout_matches("1.50 2\n", "1.5 2.0\n")  # numeric fallback
    assert not stdout_matches("1.5000001\n", "1.5\n")  # exact Decimal, as officially
    assert stdout_matches("1.5000001\n", "1.5\n", float_tolerance=1e-6)
    assert not stdout_matches(str(10**17) + "\n", str(10**17 + 1) + "\n")
    assert stdout_matches("sNaN\n", "1\n") is False  # signalling NaN must not raise
    assert not stdout_matches("yes\n", "YES\n")
    assert functional_matches("[1, 2]", "[1,2]") and functional_matches("2.0", "2")
    assert not functional_matches("[1, 2]", "[2, 1]") and not functional_matches("not json", "1")
    assert not functional_matches("[" * 100000, "1")


# -- grading -------------------------------------------------------------------------------------------


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize(
    "qid, code, status",
    [
        ("fx_sum_max", mf.SUM_OK, "passed"),
        ("fx_sum_max", mf.SUM_WRONG, "wrong_answer"),
        ("fx_sum_max", "while True:\n    pass\n", "timeout"),
        ("fx_sum_max", "import time\ntime.sleep(3)\n", "timeout"),
        ("fx_sum_max", "raise ValueError('boom')\n", "runtime_error"),
        ("fx_sum_max", "def broken(:\n", "compile_error"),
        ("fx_sum_max", "", "no_code"),
        ("fx_halves", mf.HALVES_OK, "passed"),
        ("fx_halves", mf.HALVES_CRASH, "runtime_error"),
        ("fx_pairs", mf.PAIRS_OK, "passed"),
        ("fx_pairs", "class Solution:\n    def countPairs(self, nums, target):\n        return -1\n", "wrong_answer"),
        ("fx_pairs", mf.PAIRS_SLOW, "timeout"),
        (
            "fx_pairs",
            "class Solution:\n    def countPairs(self, nums, target):\n        return nums[99]\n",
            "runtime_error",
        ),
        ("fx_pairs", "class Solution:\n    def wrongName(self, nums, target):\n        return 2\n", "runtime_error"),
        ("fx_pairs", "import sys\nsys.exit(0)\n", "runtime_error"),
    ],
)
def test_grading_outcomes(problems, grader, qid, code, status):
    res = grader.grade(problems[qid], code)
    assert res.status == status, res
    assert res.grading == grader.config.grading
    assert res.passed == (status == "passed")
    assert res.num_passed == (res.num_tests if res.passed else 0)
    if status not in ("passed", "no_code"):
        assert res.tests[0].status == status and all(t.status == "not_run" for t in res.tests[1:])
    if status == "timeout":
        assert 0.9 < res.tests[0].time_s < 3.0


@pytest.mark.sandbox
@needs_bwrap
def test_functional_tuples_count_as_lists(grader):
    from datetime import datetime

    from evals.livecodebench.data import Problem, TestCase

    p = Problem(
        "fx_tuple",
        "t",
        "c",
        "leetcode",
        "c",
        datetime(2024, 1, 1),
        "",
        "easy",
        [TestCase("3", "[3, 4]", "functional")],
        [],
        {"func_name": "pair"},
    )
    assert grader.grade(p, "class Solution:\n    def pair(self, n):\n        return (n, n + 1)\n").passed


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("mode", MODES)
def test_all_tests_run_without_early_stop(problems, mode):
    res = Grader(GradingConfig(timeout_s=1.0, stop_at_first_failure=False, grading=mode)).grade(
        problems["fx_sum_max"], "n = int(input())\nprint(5)\nprint(5)\n"
    )
    assert [t.status for t in res.tests] == ["wrong_answer", "passed", "wrong_answer", "wrong_answer"]
    assert res.num_passed == 1 and res.status == "wrong_answer"
    # a test that had to be killed costs the runner; the remaining tests still run (official: in a fresh one)
    slow = "import time\nn = int(input())\nif n == 3:\n    time.sleep(5)\nprint(5)\nprint(5)\n"
    res = Grader(GradingConfig(timeout_s=1.0, stop_at_first_failure=False, grading=mode)).grade(
        problems["fx_sum_max"], slow
    )
    assert [t.status for t in res.tests] == ["timeout", "passed", "wrong_answer", "wrong_answer"]


# -- the official grader's run semantics vs a plain run (programs in fixtures/livecodebench/semantics.py) --


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sem.CASES, ids=[c[0] for c in sem.CASES])
def test_run_semantics(graders, case, mode):
    name, key, code, want_official, want_strict = case
    res = graders[mode].grade(sem.PROBLEMS[key], code)
    want = want_official if mode == "official" else want_strict
    assert res.status == want, (name, mode, res.tests[0].detail[-800:])
    assert res.grading == mode and "numpy" in res.interpreter


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.parametrize("mode", MODES)
def test_unjoined_thread_is_waited_for_every_time(graders, mode):
    """The verdict must not depend on timing: the old driver exited under the thread (random verdicts)."""
    cases = {c[0]: c for c in sem.CASES}
    for name in ("thread_unjoined", "thread_unjoined_slow"):
        code = cases[name][2]
        statuses = [graders[mode].grade(sem.PROBLEMS["sum"], code).status for _ in range(5)]
        assert statuses == ["passed"] * 5, (name, statuses)


@pytest.mark.sandbox
@needs_bwrap
def test_official_mode_keeps_one_process_and_one_solution_for_all_tests(graders, problems):
    counter = (
        "class Solution:\n    calls = 0\n    def countPairs(self, nums, target):\n        Solution.calls += 1\n"
        "        self.seen = getattr(self, 'seen', 0) + 1\n"
        "        return Solution.calls * 100 + self.seen\n"
    )
    p = problems["fx_pairs"]
    from evals.livecodebench.data import Problem, TestCase

    probe = Problem(p.question_id, "", "", "", "", p.contest_date, "", "", [], [], {"func_name": "countPairs"})
    probe.public_tests = [TestCase(t.input, out, "functional") for t, out in zip(p.tests, ["101", "202", "303"])]
    assert graders["official"].grade(probe, counter).passed
    res = graders["strict"].grade(probe, counter)
    assert [t.status for t in res.tests[:2]] == ["passed", "wrong_answer"]


def test_official_stdin_wrapping():
    wrapped = official_stdin_source(
        "import sys\nx = 1\nfrom math import gcd\nif __name__ == '__main__':\n    print(x)\n"
    )
    assert wrapped.startswith("import sys\nfrom math import gcd\ndef wrapped_function():\n    x = 1\n    print(x)")
    not_last = official_stdin_source("if __name__ == '__main__':\n    print(1)\ny = 2\n")
    assert "if __name__ == '__main__':" in not_last  # only a final guard is unwrapped
    assert official_stdin_source("def broken(:\n") == "def broken(:\n"


def test_typed_values_compare_with_python_equality():
    def verdict(value, want):
        got = typed(value)
        want_text = sem.digits(want) if isinstance(want, int) and not isinstance(want, bool) else json.dumps(want)
        got_text = sem.digits(got) if isinstance(got, int) and not isinstance(got, bool) else json.dumps(got)
        return functional_verdict(got_text, want_text)

    assert verdict([[0, 3], [1, 2]], [[0, 3], [1, 2]]) == "passed"
    assert verdict([(0, 3), (1, 2)], [[0, 3], [1, 2]]) == "wrong_answer"  # a list of tuples is not a list of lists
    assert verdict({1: 2}, {"1": 2}) == "wrong_answer" and verdict({"1": 2}, {"1": 2}) == "passed"
    assert verdict({1, 2}, [1, 2]) == "wrong_answer"
    assert verdict(2.0, 2) == "passed" and verdict(True, 1) == "passed" and verdict(0.1 + 0.2, 0.3) == "wrong_answer"
    assert verdict(Fraction(1, 2), 0.5) == "passed"
    assert verdict(3**30000, 3**30000) == "passed" and verdict(3**30000, 3**30000 + 1) == "wrong_answer"
    assert verdict(float("nan"), 1) == "wrong_answer"
    assert decode_typed(typed({(1, 2): frozenset({3})})) == {(1, 2): frozenset({3})}
    assert functional_verdict('{"~": "ndarray", "size": 3, "v": [1, 2, 3]}', "[1, 2, 3]") == "runtime_error"
    assert functional_verdict('{"~": "ndarray", "size": 1, "v": [4]}', "4") == "passed"
    assert functional_verdict('{"~": "other", "type": "collections.deque"}', "[1]") == "wrong_answer"
    for junk in ("not json", '{"~": "dict", "v": [[[1], 2]]}', '{"~": "tuple"}', "[" * 100000):
        assert functional_verdict(junk, "1") == "wrong_answer"
    assert functional_matches(json.dumps([[1, 2]]), json.dumps([[1, 2]]))  # strict: plain JSON
    assert functional_matches(sem.digits(3**30000), sem.digits(3**30000))


def test_grading_mode_is_validated():
    with pytest.raises(ValueError, match="grading must be one of"):
        GradingConfig(grading="lenient")


# -- pass@k --------------------------------------------------------------------------------------------


def test_pass_at_k_estimator():
    assert pass_at_k(2, 1, 1) == 0.5
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    assert mean_pass_at_k({"a": [True, False], "b": [False, False]}, ks=(1, 2, 5)) == {"pass@1": 0.25, "pass@2": 0.5}
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


# -- eval and CLI --------------------------------------------------------------------------------------


@pytest.mark.sandbox
@needs_bwrap
def test_eval_from_hydra_config_scores_end_to_end():
    with initialize_config_dir(config_dir=str(ROOT / "conf" / "eval"), version_base=None):
        cfg = compose(config_name="livecodebench", overrides=[f"data_dir={FIX}", "release=release_v2", "timeout_s=1.0"])
    ev = instantiate(cfg)
    items = ev.items()
    assert [it.sample_id for it in items] == ["fx_sum_max", "fx_pairs", "fx_halves"]
    by_id = {it.sample_id: it for it in items}
    good = ev.score(by_id["fx_pairs"], f"Sure.\n```python\n{mf.PAIRS_OK}```\n")
    assert good["correct"] == 1.0 and good["status"] == "passed" and good["tests_passed"] == 4
    assert good["sandbox"] in ("bwrap", "unshare", "process")
    bad = ev.score(by_id["fx_sum_max"], "I think the answer is 6.")
    assert bad["correct"] == 0.0 and bad["status"] == "no_code"
    # format success: a fenced block that compiles, right or wrong; nothing else
    assert good["format_ok"] is True and bad["format_ok"] is False
    wrong = ev.score(by_id["fx_pairs"], "```python\nprint(0)\n```")
    assert wrong["format_ok"] is True and wrong["correct"] == 0.0
    broken = ev.score(by_id["fx_pairs"], "```python\nfor i in range(3)\n    print(i)\n```")
    assert broken["format_ok"] is False and broken["correct"] == 0.0
    assert run_diagnostics([good, bad, wrong, broken])["format_ok_rate"] == 0.5
    rows = [{**good, "meta": by_id["fx_pairs"].meta}, {**bad, "meta": by_id["fx_sum_max"].meta}]
    summary = ev.summarize(rows)
    assert summary["quality"] == 0.5 and summary["pass@1_medium"] == 1.0 and summary["pass@1_easy"] == 0.0
    # the mode, the isolation and the sandbox interpreter are recorded, per row and in the summary
    assert good["grading"] == "official" and summary["grading"] == "official" and summary["sandbox"] == "bwrap"
    assert "numpy" in good["interpreter"] and summary["sandbox_python"] == good["interpreter"]
    assert sys.executable in summary["sandbox_python"] and "sandbox_warning" not in summary


def test_eval_refuses_weaker_isolation_before_any_model_loads():
    """Building the eval needs no sandbox (prompts); `check_runtime` (the run's preflight) refuses a weaker level."""
    from evals.livecodebench import LiveCodeBenchEval
    from evals.sandbox.runner import SandboxUnavailable

    weak = LiveCodeBenchEval(data_dir=str(FIX), release="release_v2", sandbox={"isolation": "process"})
    assert weak.items()[0].prompt
    with pytest.raises(SandboxUnavailable, match="allow_weaker"):
        weak.check_runtime()
    with pytest.raises(ValueError, match="eval.sandbox: unknown keys"):
        LiveCodeBenchEval(data_dir=str(FIX), sandbox={"allow_weakr": True})
    with pytest.raises(ValueError, match="grading must be one of"):
        LiveCodeBenchEval(data_dir=str(FIX), grading="plain")


@pytest.mark.sandbox
@needs_bwrap
def test_grade_cli_on_fixture(tmp_path):
    out = tmp_path / "graded.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.livecodebench.grade",
            "--problems",
            str(FIX),
            "--candidates",
            str(FIX / "candidates.jsonl"),
            "--out",
            str(out),
            "--timeout",
            "1",
            "--k",
            "1,2",
            "--jobs",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["problems"] == 3 and summary["candidates"] == 6
    assert summary["pass@1"] == 0.5 and summary["pass@2"] == 1.0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["passed", "wrong_answer", "passed", "timeout", "passed", "runtime_error"]
    assert summary["grading"] == "official" and "numpy" in summary["interpreter"]
    assert {r["grading"] for r in rows} == {"official"} and {r["sandbox"] for r in rows} == {"bwrap"}


# -- input errors (issue 16, item 15): never silently replaced, never exit 0 with nothing graded -------------


def _cli(capsys, *args) -> tuple[int, str]:
    rc = grade_cli.cli(["--problems", str(FIX), "--timeout", "1", *args])
    return rc, capsys.readouterr().err


def test_duplicate_question_id_across_release_files_is_rejected(tmp_path, capsys):
    (tmp_path / "test.jsonl").write_text((FIX / "test.jsonl").read_text())
    first = json.loads((FIX / "test.jsonl").read_text().splitlines()[1])
    (tmp_path / "test2.jsonl").write_text((FIX / "test2.jsonl").read_text() + json.dumps(first) + "\n")
    with pytest.raises(
        ValueError, match=r"duplicate LiveCodeBench question_id 'fx_pairs': .*test.jsonl:2 and .*test2.jsonl:2"
    ):
        load_problems(tmp_path, "release_v2")
    cands = tmp_path / "cands.jsonl"
    cands.write_text(json.dumps({"question_id": "fx_pairs", "code": mf.PAIRS_OK}) + "\n")
    rc = grade_cli.cli(["--problems", str(tmp_path), "--candidates", str(cands)])
    assert rc == 2 and "duplicate LiveCodeBench question_id 'fx_pairs'" in capsys.readouterr().err


def test_empty_candidates_file_fails_naming_it(tmp_path, capsys):
    for text in ("", "\n\n"):
        empty = tmp_path / "empty.jsonl"
        empty.write_text(text)
        rc, err = _cli(capsys, "--candidates", str(empty))
        assert rc == 2 and f"{empty}: no candidates to grade" in err
        assert capsys.readouterr().out == ""  # no summary, no pass@1


@pytest.mark.parametrize(
    "row, message",
    [
        ({"question_id": "fx_pairs", "code": None}, "'code' must be a string, got null"),
        ({"question_id": "fx_pairs", "completion": None}, "'completion' must be a string, got null"),
        ({"question_id": "fx_pairs", "code": 12}, "'code' must be a string, got 12"),
        ({"question_id": "fx_pairs"}, "needs 'code' or 'completion'"),
        (["fx_pairs"], "expected a candidate (a JSON object), got a JSON list"),
    ],
)
def test_malformed_candidates_name_file_and_line(tmp_path, capsys, row, message):
    cands = tmp_path / "cands.jsonl"
    cands.write_text(json.dumps({"question_id": "fx_pairs", "code": mf.PAIRS_OK}) + "\n" + json.dumps(row) + "\n")
    rc, err = _cli(capsys, "--candidates", str(cands))
    assert rc == 2 and f"{cands}:2: " in err and message in err
    cands.write_text('{"question_id": "fx_pairs", "code": \n')
    rc, err = _cli(capsys, "--candidates", str(cands))
    assert rc == 2 and f"{cands}:1: not valid JSON" in err


def test_bad_problem_rows_name_file_and_line(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text((FIX / "test.jsonl").read_text() + '{"question_id": "x"}\n')
    with pytest.raises(ValueError, match=r"test.jsonl:3: bad LiveCodeBench row: .*lacks fields"):
        load_problems(bad)


@pytest.mark.sandbox
@needs_bwrap
def test_null_program_is_a_clear_error_in_the_grader(problems):
    with pytest.raises(TypeError, match="fx_pairs: the program must be a str, got NoneType"):
        Grader(GradingConfig(timeout_s=1.0)).grade(problems["fx_pairs"], None)


def test_fixture_files_match_their_generator():
    """The committed fixtures are what make_fixtures.py writes (keeps the compressed data reviewable)."""
    assert [json.loads(line)["question_id"] for line in (FIX / "test.jsonl").read_text().splitlines()] == [
        r["question_id"] for r in mf.ROWS_V1
    ]
    assert len(read_jsonl(FIX / "test2.jsonl")) == len(mf.ROWS_V2)
