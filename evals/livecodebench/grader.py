"""Grade one candidate program against a problem's tests in the sandbox, as the official runner does.

The sandbox gets the program, the driver and the test *inputs*; the expected outputs stay here. Each
driver record is compared as it arrives; the run stops at the first failing test (official behaviour),
and tests the driver never reported (the program took the sandbox down, or the overall limit hit) fail.
Limits: `timeout_s` per test (official default 6 s) and (timeout_s + 1) * tests + 5 s overall.

`grading`: "official" (default) runs programs with the official grader's semantics (one process for all
tests, in-memory stdin/stdout, stdin programs wrapped in a function, one `Solution()`, Python equality of
returned values), so pass@1 compares with published numbers; "strict" is a plain Python run per test
(see `driver.py` for both). Every result records the mode, the isolation level and the sandbox interpreter.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from evals.livecodebench.compare import functional_matches, functional_verdict, stdout_matches
from evals.livecodebench.data import Problem
from evals.sandbox import Limits, Sandbox
from evals.sandbox.interpreter import describe

GRADING_MODES = ("official", "strict")

# The in-sandbox driver: `driver.py` (the entry) and its stdlib-only sibling modules, staged side by side.
DRIVER_FILES = {
    name: resources.files("evals.livecodebench").joinpath(name).read_text(encoding="utf-8")
    for name in ("driver.py", "driver_common.py", "driver_official.py", "driver_strict.py")
}
MB = 1 << 20


@dataclass
class TestVerdict:
    index: int
    # passed | wrong_answer | timeout | runtime_error | compile_error | output_limit | no_result | not_run
    status: str
    time_s: float | None = None
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class GradeResult:
    question_id: str
    passed: bool
    status: str  # "passed" or the first failing test's status ("no_code" when nothing was extracted)
    num_tests: int
    num_passed: int
    sandbox: str  # isolation level the program ran under (bwrap | unshare | process | none)
    wall_s: float = 0.0
    tests: list[TestVerdict] = field(default_factory=list)
    grading: str = "official"  # official | strict
    interpreter: str = ""  # the sandbox interpreter, its version and packages (interpreter.describe)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GradingConfig:
    timeout_s: float = 6.0  # per test, wall clock
    memory_mb: int = 2048  # address-space limit per process
    max_processes: int = 32
    isolation: str = "auto"  # auto | bwrap | unshare | process (below bwrap only with allow_weaker)
    float_tolerance: float = 0.0  # 0 = official exact Decimal comparison of numeric tokens
    stop_at_first_failure: bool = True
    grading: str = "official"  # official | strict
    allow_weaker: bool = False  # the explicit opt-in to grade below the bubblewrap level
    python: str | None = None  # sandbox interpreter; None = this project's own (evals.sandbox.interpreter)

    def __post_init__(self):
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.grading not in GRADING_MODES:
            raise ValueError(f"grading must be one of {GRADING_MODES}, got {self.grading!r}")


class Grader:
    def __init__(self, config: GradingConfig | None = None, python: str | None = None):
        self.config = config or GradingConfig()
        self.python = python or self.config.python
        self._env: dict | None = None
        self._env_lock = threading.Lock()

    def sandbox(self, limits: Limits | None = None) -> Sandbox:
        cfg = self.config
        return Sandbox(limits, isolation=cfg.isolation, python=self.python, allow_weaker=cfg.allow_weaker)

    def environment(self) -> dict:
        """Where programs run: isolation level, interpreter, its version and packages (checked once: raises
        when the isolation cannot be provided or a declared solution package is missing)."""
        with self._env_lock:
            if self._env is None:
                env = self.sandbox().require_packages()
                self._env = {**env, "grading": self.config.grading, "interpreter": describe(env)}
            return self._env

    def grade(self, problem: Problem, code: str) -> GradeResult:
        tests = problem.tests
        if not tests:
            raise ValueError(f"problem {problem.question_id} has no tests")
        if not isinstance(code, str):
            raise TypeError(f"problem {problem.question_id}: the program must be a str, got {type(code).__name__}")
        grading = self.config.grading
        if not code.strip():
            return GradeResult(
                problem.question_id,
                False,
                "no_code",
                len(tests),
                0,
                "none",
                tests=[TestVerdict(i, "not_run") for i in range(len(tests))],
                grading=grading,
            )
        mode = problem.mode
        if mode == "functional" and not problem.func_name:
            raise ValueError(f"functional problem {problem.question_id} has no metadata.func_name")
        env = self.environment()
        limits = self._limits(tests)
        spec = {
            "mode": mode,
            "func_name": problem.func_name,
            "timeout_s": self.config.timeout_s,
            "inputs": [t.input for t in tests],
            "grading": grading,
            "output_cap_bytes": limits.file_size_mb << 20,
        }
        sandbox = self.sandbox(limits)
        verdicts: dict[int, TestVerdict] = {}

        def judge(line: bytes) -> bool:
            verdict = self._judge_record(line, tests, mode)
            if verdict is None or verdict.index in verdicts:
                return False  # not a driver record, or a repeat: ignored
            verdicts[verdict.index] = verdict
            return self.config.stop_at_first_failure and not verdict.passed

        args = ["--own-pid-namespace"] if sandbox.isolation in ("bwrap", "unshare") else []
        res = sandbox.run(
            {**DRIVER_FILES, "solution.py": code, "tests.json": json.dumps(spec)},
            "driver.py",
            args=args,
            stop_when=judge,
        )
        missing = (
            "timeout"
            if res.timed_out
            else "output_limit"
            if res.output_limited
            else "not_run"
            if res.stopped_early
            else "no_result"
        )
        ordered = [
            verdicts.get(i) or TestVerdict(i, missing, detail=res.stderr[-500:].decode(errors="replace"))
            for i in range(len(tests))
        ]
        failed = next((v for v in ordered if not v.passed), None)
        return GradeResult(
            question_id=problem.question_id,
            passed=failed is None,
            status=failed.status if failed else "passed",
            num_tests=len(tests),
            num_passed=sum(v.passed for v in ordered),
            sandbox=res.isolation,
            wall_s=res.wall_s,
            tests=ordered,
            grading=grading,
            interpreter=env["interpreter"],
        )

    def _limits(self, tests) -> Limits:
        """Overall limits scale with the problem: official global timeout, room for its largest I/O."""
        cfg = self.config
        wall = (cfg.timeout_s + 1) * len(tests) + 5
        biggest_out = max(len(t.output.encode()) for t in tests)
        biggest_in = max(len(t.input.encode()) for t in tests)
        file_mb = max(8, math.ceil(4 * biggest_out / MB))
        return Limits(
            wall_s=wall,
            cpu_s=math.ceil(wall),
            memory_mb=cfg.memory_mb,
            file_size_mb=max(file_mb, math.ceil(biggest_in / MB) + 1),
            max_processes=cfg.max_processes,
            stdout_bytes=64 * MB + 8 * sum(len(t.output.encode()) for t in tests),
            tmp_size_mb=64 + 2 * file_mb + 2 * math.ceil(biggest_in / MB),
        )

    def _judge_record(self, line: bytes, tests, mode: str) -> TestVerdict | None:
        try:
            rec = json.loads(line)
            i, status, out, t = int(rec["i"]), str(rec["status"]), str(rec["out"]), float(rec["t"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        if not 0 <= i < len(tests):
            return None
        err = str(rec.get("err", ""))[-500:]
        if status != "ok":
            known = {"timeout", "runtime_error", "compile_error", "output_limit"}
            return TestVerdict(i, status if status in known else "runtime_error", t, err)
        want = tests[i].output
        if mode == "functional" and self.config.grading == "official":
            status = functional_verdict(out, want)
        elif mode == "functional":
            status = "passed" if functional_matches(out, want) else "wrong_answer"
        else:
            status = "passed" if stdout_matches(out, want, self.config.float_tolerance) else "wrong_answer"
        if status == "runtime_error" and not err:
            err = "the returned numpy array has no single truth value (compared elementwise)"
        return TestVerdict(i, status, t, "" if status == "passed" else err)
