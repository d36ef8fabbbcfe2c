"""Run a HumanEval / MBPP program with its check in this project's sandbox (never lm-eval's unsandboxed code_eval).

The check is appended to the program, as `code_eval` does (`program + "\\n" + test`), and the file runs once: it
passes when it exits 0 within the time limit (code_eval's default, 3 s). The sandbox (`evals.sandbox`) isolates it
(bubblewrap: no network, a private /tmp, nothing outside writable, every process killed at the end) and refuses to
run below bubblewrap unless `allow_weaker` is set, as LiveCodeBench's grading does; every verdict records the level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evals.sandbox import Limits, Sandbox


@dataclass(frozen=True)
class CodeVerdict:
    passed: bool
    status: str  # passed | failed | timeout | output_limit | no_code
    sandbox: str  # isolation level it ran at (none when nothing ran)
    wall_s: float = 0.0
    detail: str = ""  # the stderr tail of a failure


@dataclass(frozen=True)
class SandboxSettings:
    isolation: str = "auto"
    allow_weaker: bool = False
    python: str | None = None

    @classmethod
    def from_config(cls, box: Mapping[str, Any] | None) -> SandboxSettings:
        box = dict(box or {})
        unknown = set(box) - {"isolation", "allow_weaker", "python"}
        if unknown:
            raise ValueError(f"eval.sandbox: unknown keys {sorted(unknown)}; known: isolation, allow_weaker, python")
        if not isinstance(box.get("allow_weaker", False), bool):
            raise ValueError(f"eval.sandbox.allow_weaker: must be true or false, got {box['allow_weaker']!r}")
        return cls(box.get("isolation") or "auto", box.get("allow_weaker", False), box.get("python"))


class CodeGrader:
    def __init__(self, settings: SandboxSettings, timeout_s: float = 3.0, memory_mb: int = 1024):
        if not timeout_s > 0:
            raise ValueError(f"eval.timeout_s: must be > 0, got {timeout_s!r}")
        self.settings, self.timeout_s = settings, timeout_s
        self.limits = Limits(wall_s=timeout_s, cpu_s=max(1, int(timeout_s) + 1), memory_mb=memory_mb)

    def sandbox(self) -> Sandbox:
        s = self.settings
        return Sandbox(self.limits, isolation=s.isolation, python=s.python, allow_weaker=s.allow_weaker)

    def environment(self) -> dict:
        """Where programs will run (raises `SandboxUnavailable` now, before any model loads, when it cannot)."""
        return self.sandbox().environment()

    def grade(self, program: str, check: str) -> CodeVerdict:
        if not program.strip():
            return CodeVerdict(False, "no_code", "none")
        res = self.sandbox().run({"program.py": f"{program}\n\n{check}"}, "program.py")
        status = (
            "timeout"
            if res.timed_out
            else "output_limit"
            if res.output_limited
            else "passed"
            if res.returncode == 0
            else "failed"
        )
        detail = "" if status == "passed" else res.stderr[-500:].decode(errors="replace")
        return CodeVerdict(status == "passed", status, res.isolation, res.wall_s, detail)
