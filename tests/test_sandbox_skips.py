"""Without bubblewrap, every sandbox test skips with the loud reason (none runs and fails on a refused grading)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_with_bubblewrap_hidden_no_sandbox_test_is_left_to_run(tmp_path):
    # PATH holds only the interpreter's folder: bwrap (wherever it is installed) cannot be found.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-m", "sandbox", "-n", "0", "-v", "-o", "addopts="],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    summary = text.strip().splitlines()[-1]
    skipped = int(re.search(r"(\d+) skipped", summary).group(1))
    assert skipped > 100 and not re.search(r"\d+ (passed|failed|error)", summary), summary
    assert f"{skipped} SANDBOX TESTS DID NOT RUN" in text  # the red line counts every one of them
    assert "test_twin_runs_end_to_end_and_the_summary_shows_the_report[report_lcb] SKIPPED" in text  # a pytest.param
