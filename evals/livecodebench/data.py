"""LiveCodeBench `code_generation_lite` problems from the raw `test*.jsonl` files (local or hub snapshot).

Release selection follows the dataset's own loader: `release_vN` is cumulative (test.jsonl .. testN.jsonl),
`vN` is one release's new problems only, `vA_vB` the releases A..B, `release_latest` everything.
Private tests are stored as base64(zlib(pickle(json string))); some rows carry plain JSON instead.

Every `question_id` must appear once in a selection: a repeat (in the same file or across release files)
is rejected with both places named, never silently replaced or graded twice. Malformed rows name their
file and line.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from contract.files import jsonl_objects

HUB_REPO = "livecodebench/code_generation_lite"
NUM_RELEASES = 6


@dataclass(frozen=True)
class TestCase:
    input: str
    output: str
    testtype: str  # "stdin" | "functional"

    __test__ = False  # not a pytest class

    def __post_init__(self):
        if self.testtype not in ("stdin", "functional"):
            raise ValueError(f"unknown LiveCodeBench testtype {self.testtype!r}")


@dataclass
class Problem:
    question_id: str
    question_title: str
    question_content: str
    platform: str
    contest_id: str
    contest_date: datetime
    starter_code: str
    difficulty: str
    public_tests: list[TestCase]
    private_tests: list[TestCase]
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="", compare=False)  # "file:line" it was read from

    @property
    def tests(self) -> list[TestCase]:
        """Public then private tests: the official grader runs both."""
        return self.public_tests + self.private_tests

    @property
    def mode(self) -> str:
        return "functional" if any(t.testtype == "functional" for t in self.tests) else "stdin"

    @property
    def func_name(self) -> str | None:
        return self.metadata.get("func_name")


def release_files(release: str) -> list[str]:
    """File names of a release selection, e.g. release_v2 -> [test.jsonl, test2.jsonl]; v3 -> [test3.jsonl]."""

    def name(n: int) -> str:
        return "test.jsonl" if n == 1 else f"test{n}.jsonl"

    if release == "release_latest":
        return [name(n) for n in range(1, NUM_RELEASES + 1)]
    if m := re.fullmatch(r"release_v(\d+)", release):
        last = int(m.group(1))
        if 1 <= last <= NUM_RELEASES:
            return [name(n) for n in range(1, last + 1)]
    if m := re.fullmatch(r"v(\d+)(?:_v(\d+))?", release):
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if 1 <= first <= last <= NUM_RELEASES:
            return [name(n) for n in range(first, last + 1)]
    raise ValueError(
        f"unknown LiveCodeBench release {release!r}: use release_v1..release_v{NUM_RELEASES}, "
        f"release_latest, vN (one release) or vA_vB (a range)"
    )


class _StringOnlyUnpickler(pickle.Unpickler):
    """The private tests pickle a plain str; refuse any class lookup so a tampered file cannot run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} in LiveCodeBench test data")


def decode_tests(raw: str | list) -> list[TestCase]:
    """Tests from a JSON list, a JSON string, or base64(zlib(pickle(json string)))."""
    if isinstance(raw, list):
        cases = raw
    else:
        try:
            text = _StringOnlyUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(raw, validate=True)))).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError):
            text = raw  # plain JSON
        if not isinstance(text, str):
            raise ValueError(f"compressed LiveCodeBench tests decode to {type(text).__name__}, expected a JSON string")
        try:
            cases = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"LiveCodeBench tests are neither JSON nor base64(zlib(pickle(json))): {exc}") from exc
    return [TestCase(input=c["input"], output=c["output"], testtype=c["testtype"]) for c in cases]


def encode_private_tests(cases: list[TestCase]) -> str:
    """The dataset's compressed form (used to write fixtures)."""
    text = json.dumps([{"input": c.input, "output": c.output, "testtype": c.testtype} for c in cases])
    return base64.b64encode(zlib.compress(pickle.dumps(text))).decode()


def parse_problem(row: dict[str, Any]) -> Problem:
    missing = {"question_id", "question_content", "public_test_cases", "private_test_cases"} - row.keys()
    if missing:
        raise ValueError(f"LiveCodeBench row lacks fields {sorted(missing)}")
    meta = row.get("metadata") or "{}"
    return Problem(
        question_id=str(row["question_id"]),
        question_title=row.get("question_title", ""),
        question_content=row["question_content"],
        platform=row.get("platform", ""),
        contest_id=str(row.get("contest_id", "")),
        contest_date=_parse_date(row.get("contest_date") or "1970-01-01T00:00:00"),
        starter_code=row.get("starter_code") or "",
        difficulty=row.get("difficulty", ""),
        public_tests=decode_tests(row["public_test_cases"]),
        private_tests=decode_tests(row["private_test_cases"]),
        metadata=json.loads(meta) if isinstance(meta, str) else dict(meta),
    )


def _parse_date(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).replace(tzinfo=None)


def read_jsonl(path: str | Path) -> list[Problem]:
    problems = []
    for n, row in jsonl_objects(Path(path), expected="a LiveCodeBench row (a JSON object)"):
        try:
            problem = parse_problem(row)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: bad LiveCodeBench row: {exc}") from exc
        problem.source = f"{path}:{n}"
        problems.append(problem)
    return problems


def check_unique(problems: list[Problem]) -> list[Problem]:
    """The problems, after checking that no question_id repeats (a repeat raises, naming both places)."""
    seen: dict[str, Problem] = {}
    for p in problems:
        if p.question_id in seen:
            raise ValueError(
                f"duplicate LiveCodeBench question_id {p.question_id!r}: {seen[p.question_id].source} and "
                f"{p.source}; each problem must appear once in a selection (pick releases that do not repeat it)"
            )
        seen[p.question_id] = p
    return problems


def hub_snapshot(files: list[str], repo_id: str = HUB_REPO) -> Path:
    """Download (or reuse the cached) raw files of the dataset repo; needs network on first use."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=repo_id, repo_type="dataset", allow_patterns=files))


def load_problems(
    data_dir: str | Path | None = None,
    release: str = "release_v6",
    start_date: str | None = None,
    end_date: str | None = None,
    repo_id: str = HUB_REPO,
) -> list[Problem]:
    """Problems of a release (from `data_dir`, a single .jsonl file, or the hub) in the contest-date window.

    The window is inclusive on both ends, as in the official runner; dates are ISO strings (YYYY-MM-DD).
    """
    if data_dir is not None and Path(data_dir).is_file():
        paths = [Path(data_dir)]
    else:
        files = release_files(release)
        root = Path(data_dir) if data_dir is not None else hub_snapshot(files, repo_id)
        paths = [root / f for f in files]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"LiveCodeBench release {release!r} needs {missing}")
    start = _parse_date(start_date) if start_date else None
    end = _parse_date(end_date) if end_date else None
    if start and end and start > end:
        raise ValueError(f"start_date {start_date} is after end_date {end_date}")
    problems = check_unique([p for path in paths for p in read_jsonl(path)])
    return [
        p for p in problems if (start is None or p.contest_date >= start) and (end is None or p.contest_date <= end)
    ]
