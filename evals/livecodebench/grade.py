"""Grade candidate programs from any system, no model needed.

    python -m evals.livecodebench.grade --problems DIR_OR_JSONL --candidates candidates.jsonl [--out graded.jsonl]

Candidates are JSONL rows {"question_id", "code"} or {"question_id", "completion"} (a model reply; its last
fenced block is graded); both must be strings. Prints pass@1 (and pass@k for every k every problem has
samples for) as JSON, with the grading mode, the isolation level and the sandbox interpreter.

Input errors (an empty candidates file, a row that is not JSON, a null program, an unknown or repeated
question_id in the problems) stop with a message naming the file and line and exit status 2; so does a
machine where bubblewrap cannot run, unless --allow-weaker-isolation is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.files import jsonl_objects
from evals.livecodebench.data import Problem, check_unique, load_problems, read_jsonl
from evals.livecodebench.grader import GRADING_MODES, Grader, GradingConfig
from evals.livecodebench.passk import mean_pass_at_k
from evals.livecodebench.prompts import extract_code
from evals.sandbox.runner import SandboxUnavailable


def read_problems(path: str, release: str | None) -> dict[str, Problem]:
    p = Path(path)
    if release is not None or p.is_file():
        problems = load_problems(p, release or "release_latest")
    elif p.is_dir():
        files = sorted(p.glob("test*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no test*.jsonl files in {p}")
        problems = check_unique([q for f in files for q in read_jsonl(f)])
    else:
        raise FileNotFoundError(f"--problems {path} is neither a file nor a folder")
    return {q.question_id: q for q in problems}


def read_candidates(path: str, problems: dict[str, Problem]) -> list[tuple[str, str]]:
    """(question_id, code) pairs in file order."""
    out = []
    for n, row in jsonl_objects(Path(path), expected="a candidate (a JSON object)"):
        qid = str(row.get("question_id", ""))
        if qid not in problems:
            raise ValueError(f"{path}:{n}: unknown question_id {qid!r}")
        key = "code" if "code" in row else "completion" if "completion" in row else None
        if key is None:
            raise ValueError(f"{path}:{n}: a candidate needs 'code' or 'completion'")
        if not isinstance(row[key], str):
            raise ValueError(
                f"{path}:{n}: {key!r} must be a string, got {json.dumps(row[key])} "
                f'(write "" for a sample with no program: it is graded as a failure)'
            )
        out.append((qid, row[key] if key == "code" else extract_code(row[key])))
    if not out:
        raise ValueError(f"{path}: no candidates to grade (the file is empty)")
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", required=True, help="folder of test*.jsonl files, or one .jsonl file")
    ap.add_argument("--candidates", required=True, help="JSONL of {question_id, code|completion}")
    ap.add_argument("--out", help="write one graded row per candidate here (JSONL)")
    ap.add_argument("--release", help="release selection inside --problems (default: every test*.jsonl there)")
    ap.add_argument("--timeout", type=float, default=6.0, help="seconds per test (official: 6)")
    ap.add_argument("--memory-mb", type=int, default=2048)
    ap.add_argument("--isolation", default="auto", choices=["auto", "bwrap", "unshare", "process"])
    ap.add_argument(
        "--allow-weaker-isolation",
        action="store_true",
        help="run model-written code below the bubblewrap level (unshare / process) when bubblewrap cannot run",
    )
    ap.add_argument(
        "--grading",
        default="official",
        choices=GRADING_MODES,
        help="official: the official LiveCodeBench run semantics (default); strict: a plain Python run per test",
    )
    ap.add_argument("--python", help="sandbox interpreter (default: this project's own)")
    ap.add_argument("--float-tolerance", type=float, default=0.0)
    ap.add_argument("--jobs", type=int, default=1, help="candidates graded in parallel")
    ap.add_argument("--k", default="1,5,10", help="pass@k values to report when enough samples exist")
    args = ap.parse_args(argv)

    problems = read_problems(args.problems, args.release)
    candidates = read_candidates(args.candidates, problems)
    grader = Grader(
        GradingConfig(
            timeout_s=args.timeout,
            memory_mb=args.memory_mb,
            isolation=args.isolation,
            float_tolerance=args.float_tolerance,
            grading=args.grading,
            allow_weaker=args.allow_weaker_isolation,
            python=args.python,
        )
    )
    env = grader.environment()  # refuses here, before grading, when the isolation cannot be provided
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda c: grader.grade(problems[c[0]], c[1]), candidates))

    graded: dict[str, list[bool]] = {}
    rows = []
    for (qid, _), res in zip(candidates, results):
        graded.setdefault(qid, []).append(res.passed)
        rows.append(
            {
                "question_id": qid,
                "sample": len(graded[qid]) - 1,
                "passed": res.passed,
                "status": res.status,
                "num_passed": res.num_passed,
                "num_tests": res.num_tests,
                "sandbox": res.sandbox,
                "grading": res.grading,
                "interpreter": res.interpreter,
                "wall_s": round(res.wall_s, 3),
                "tests": [t.__dict__ for t in res.tests],
            }
        )
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {
        "problems": len(graded),
        "candidates": len(candidates),
        **mean_pass_at_k(graded, [int(k) for k in args.k.split(",") if k.strip()]),
        "sandbox": ",".join(sorted({r["sandbox"] for r in rows} - {"none"})) or "none",
        "grading": args.grading,
        "interpreter": env["interpreter"],
    }
    if env["isolation"] != "bwrap":
        summary["sandbox_warning"] = f"graded with weaker isolation than bubblewrap: {env['isolation']}"
    print(json.dumps(summary, indent=2))
    return summary


def cli(argv: list[str] | None = None) -> int:
    try:
        main(argv)
    except (ValueError, FileNotFoundError, SandboxUnavailable, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
