"""LiveCodeBench code generation as a harness eval: official prompt, last fenced block, sandboxed grading.

`correct` is 1.0 when the extracted program passes every public and private test; the summary gives
pass@1 overall and per difficulty, the grading mode, the sandbox isolation level (anything but bwrap is
flagged) and the sandbox interpreter with its package versions.

The sandbox is checked by the run's preflight (`check_runtime`, before any model loads), not when the eval is
built (prompts need no sandbox): where bubblewrap cannot run it refuses unless `sandbox.allow_weaker` is set, and
a sandbox interpreter without the declared solution packages (numpy, ...) is an error too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from evals.base import Eval, EvalItem
from evals.livecodebench.data import HUB_REPO, Problem, load_problems
from evals.livecodebench.grader import Grader, GradingConfig
from evals.livecodebench.prompts import build_prompt, compiles, extract_code


class LiveCodeBenchEval(Eval):
    name = "livecodebench"

    def __init__(
        self,
        data_dir: str | None = None,  # folder with test*.jsonl (or one .jsonl); None = hub snapshot
        release: str = "release_v6",
        start_date: str | None = None,
        end_date: str | None = None,
        limit: int | None = None,
        max_new_tokens: int = 4096,
        stop_strings: list[str] | None = None,
        chat: bool = True,
        timeout_s: float = 6.0,
        memory_mb: int = 2048,
        grading: str = "official",  # official | strict (see evals.livecodebench.driver)
        sandbox: Mapping[str, Any] | None = None,  # {isolation, allow_weaker, python}
        float_tolerance: float = 0.0,
        hub_repo: str = HUB_REPO,
        name: str = "livecodebench",
    ):
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stop_strings, limit=limit)
        self.name = name
        self.data_dir, self.release, self.hub_repo = data_dir, release, hub_repo
        self.start_date, self.end_date, self.chat = start_date, end_date, chat
        box = dict(sandbox or {})
        unknown = set(box) - {"isolation", "allow_weaker", "python"}
        if unknown:
            raise ValueError(f"eval.sandbox: unknown keys {sorted(unknown)}; known: isolation, allow_weaker, python")
        allow_weaker = box.get("allow_weaker", False)
        if not isinstance(allow_weaker, bool):
            raise ValueError(f"eval.sandbox.allow_weaker: must be true or false, got {allow_weaker!r}")
        try:
            config = GradingConfig(
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                isolation=box.get("isolation") or "auto",
                float_tolerance=float_tolerance,
                grading=grading,
                allow_weaker=allow_weaker,
                python=box.get("python"),
            )
        except ValueError as exc:
            raise ValueError(f"eval: {exc}") from exc
        self.grader = Grader(config)
        self._problems: dict[str, Problem] | None = None

    @property
    def sandbox_environment(self) -> dict[str, Any]:
        """Where programs run, probed once (`Grader.environment`: refuses without the isolation or the packages)."""
        return self.grader.environment()

    def check_runtime(self) -> None:
        self.grader.environment()

    def problems(self) -> dict[str, Problem]:
        if self._problems is None:
            loaded = load_problems(self.data_dir, self.release, self.start_date, self.end_date, self.hub_repo)
            loaded = loaded[: self.limit] if self.limit is not None else loaded
            self._problems = {p.question_id: p for p in loaded}
        return self._problems

    def hub_datasets(self) -> list[str]:
        """The hub data set read when no local `data_dir` is given: checked for access before loading."""
        return [] if self.data_dir else [self.hub_repo]

    def items(self) -> list[EvalItem]:
        return [
            EvalItem(
                sample_id=p.question_id,
                prompt=build_prompt(p, chat=self.chat),
                target=p.question_id,
                meta={
                    "difficulty": p.difficulty,
                    "platform": p.platform,
                    "contest_date": p.contest_date.isoformat(),
                    "release": self.release,
                    "mode": p.mode,
                },
            )
            for p in self.problems().values()
        ]

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        problem = self.problems()[item.target]
        code = extract_code(text)
        res = self.grader.grade(problem, code)
        return {
            "correct": 1.0 if res.passed else 0.0,
            "format_ok": compiles(code),  # a fenced block that compiles, whatever the tests say
            "status": res.status,
            "tests_passed": res.num_passed,
            "num_tests": res.num_tests,
            "sandbox": res.sandbox,
            "grading": res.grading,
            "interpreter": res.interpreter,
            "grade_wall_s": res.wall_s,
            "code": code,
        }

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(scored)
        out: dict[str, Any] = {"quality": sum(r["correct"] for r in scored) / n if n else 0.0}
        out["pass@1"] = out["quality"]
        for diff in sorted({r.get("meta", {}).get("difficulty", "") for r in scored} - {""}):
            rows = [r for r in scored if r.get("meta", {}).get("difficulty") == diff]
            out[f"pass@1_{diff}"] = sum(r["correct"] for r in rows) / len(rows)
        out["status_counts"] = dict(Counter(r.get("status", "") for r in scored))
        levels = sorted({r.get("sandbox", "") for r in scored} - {"", "none"})
        out["sandbox"] = ",".join(levels) or "none"
        out["grading"] = ",".join(sorted({r.get("grading", "") for r in scored} - {""})) or self.grader.config.grading
        out["sandbox_python"] = self.sandbox_environment["interpreter"]
        if any(level != "bwrap" for level in levels):
            out["sandbox_warning"] = (
                f"programs ran with weaker isolation than bubblewrap ({out['sandbox']}), explicitly allowed "
                f"(apt-get install -y bubblewrap)"
            )
        return out
