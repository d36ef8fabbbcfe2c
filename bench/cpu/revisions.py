"""The engine benches at two git revisions, interleaved: did a refactor change the engine's speed?

Each round runs the decode-loop bench (ours vs transformers' `generate()` at B = 1, 4), the Sudoku throughput
bench (ours vs `generate()` at B = 1, 16) and the masked bench (diffusers' LLaDA2Pipeline vs our masked engine at
B = 1, 16) once at the base revision (a detached worktree) and once here, in alternating order, each in its own
process. Every run reports ratios against its reference (`generate()`, the pipeline) measured in that same process,
and the reference is the same code at both revisions, so each ratio is a speed of our engine normalised by
the machine's state at that moment. Per setting: the median ratio over the rounds at each revision and head /
base - 1 of the medians, and per round head / base - 1 (the two ran back to back): its median and range, the noise
a refactor that changes nothing stays within. A module that moved between the revisions is named per side
(`--base-prefix bench.` for the flat layout before `bench/cpu/`).

    python -m bench.cpu.revisions --base 1a7944e [--rounds 5] [--base-prefix bench.]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.cpu.common import OUT_DIR, machine_info, print_machine, table, write_json

REPO = Path(__file__).resolve().parents[2]
# module (after the prefix), its arguments, its JSON file, the row key, the ratio columns
BENCHES = (
    (
        "decode_loop",
        ["--batch", "1", "4", "--repeats", "3", "--threads", "1"],
        "decode_loop.json",
        "batch",
        ("ours_reference_ratio", "ours_fast_ratio", "ours_exact_ratio"),
    ),
    (
        "eval_throughput",
        ["--batch", "1", "16", "--samples", "32", "--threads", "1"],
        "eval_throughput.json",
        "batch",
        ("ratio",),
    ),
    ("masked_bench", [], "masked_bench.json", "batch", ("ratio_of_medians",)),  # pipeline / ours, B = 1, 16
)


def _worktree(base: str, root: Path) -> Path:
    """The base revision checked out beside this one, sharing this checkout's virtual environment and models."""
    path = root / f"base-{base}"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), base], cwd=REPO, check=True, capture_output=True)
    (path / ".venv").symlink_to(REPO / ".venv")
    for d in ("outputs/tiny", "outputs/bench/models"):  # the benches' models, built once, read by both sides
        (path / d).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / d).exists():
            (path / d).symlink_to(REPO / d)
    return path


def _run_one(cwd: Path, module: str, args: list[str], out: Path) -> None:
    cmd = [sys.executable, "-m", module, *args, "--out-dir", str(out)]
    proc = subprocess.run(cmd, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"{module} at {cwd} failed:\n{proc.stderr[-3000:]}")


def _env(cwd: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(cwd), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _ratios(path: Path, key: str, columns: tuple[str, ...]) -> dict[str, float]:
    rows = json.loads(path.read_text())["rows"]
    return {f"{key}={r[key]} {c}": float(r[c]) for r in rows for c in columns}


def measure(base: str, rounds: int, base_prefix: str, root: Path) -> list[dict[str, Any]]:
    sides = {"base": (_worktree(base, root), base_prefix), "head": (REPO, "bench.cpu.")}
    seen: dict[tuple[str, str], list[float]] = {}
    for k in range(rounds):
        order = ["base", "head"] if k % 2 == 0 else ["head", "base"]
        for side in order:
            cwd, prefix = sides[side]
            for name, args, fname, key, cols in BENCHES:
                out = root / f"{side}-{k}-{name}"
                _run_one(cwd, prefix + name, args, out)
                for setting, ratio in _ratios(out / fname, key, cols).items():
                    seen.setdefault((f"{name} {setting}", side), []).append(ratio)
        print(f"round {k + 1}/{rounds} done", flush=True)
    settings = dict.fromkeys(s for s, _ in seen)
    rows = []
    for s in settings:
        base, head = seen[(s, "base")], seen[(s, "head")]
        paired = sorted(h / b - 1 for h, b in zip(head, base, strict=True))  # one pair per round
        rows.append(
            {
                "setting": s,
                "base_ratio": statistics.median(base),
                "head_ratio": statistics.median(head),
                "head_vs_base": statistics.median(head) / statistics.median(base) - 1,
                "paired_median": statistics.median(paired),
                "paired_min": paired[0],
                "paired_max": paired[-1],
                "rounds": rounds,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the git revision to compare against")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--base-prefix", default="bench.cpu.", help="the benches' package at the base revision")
    p.add_argument("--out-dir", default=str(OUT_DIR))
    a = p.parse_args(argv)
    info = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            rows = measure(a.base, a.rounds, a.base_prefix, Path(tmp))
        finally:
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
    payload = {"bench": "revisions", "base": a.base, "head": _head(), "machine": info, "rows": rows}
    path = write_json("revisions", payload, out_dir=a.out_dir)
    print_machine(info)
    print(table(rows, list(rows[0])))
    print(f"wrote {path}")
    return payload


def _head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


if __name__ == "__main__":
    main()
