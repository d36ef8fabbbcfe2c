"""Grade candidate programs from any system, no model needed.

    python -m evals.livecodebench.grade --problems DIR_OR_JSONL --candidates candidates.jsonl [--out graded.jsonl]

Candidates are JSONL rows {"question_id", "code"} or {"question_id", "completion"} (a model reply; its last
fenced block is graded). Prints pass@1 (and pass@k for every k every problem has samples for) as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evals.livecodebench.data import Problem, load_problems, read_jsonl
from evals.livecodebench.grader import Grader, GradingConfig
from evals.livecodebench.passk import mean_pass_at_k
from evals.livecodebench.prompts import extract_code


def read_problems(path: str, release: str | None) -> dict[str, Problem]:
    p = Path(path)
    if release is not None or p.is_file():
        problems = load_problems(p, release or "release_latest")
    elif p.is_dir():
        files = sorted(p.glob("test*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no test*.jsonl files in {p}")
        problems = [q for f in files for q in read_jsonl(f)]
    else:
        raise FileNotFoundError(f"--problems {path} is neither a file nor a folder")
    return {q.question_id: q for q in problems}


def read_candidates(path: str, problems: dict[str, Problem]) -> list[tuple[str, str]]:
    """(question_id, code) pairs in file order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            qid = str(row.get("question_id", ""))
            if qid not in problems:
                raise ValueError(f"{path}:{n}: unknown question_id {qid!r}")
            if "code" in row:
                code = row["code"]
            elif "completion" in row:
                code = extract_code(row["completion"])
            else:
                raise ValueError(f"{path}:{n}: a candidate needs 'code' or 'completion'")
            out.append((qid, code))
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
        )
    )
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
    }
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
