"""A test that reaches the sandbox without the `sandbox` mark fails (tests/helpers/sandbox_guard.py, the conftest's
hooks): in its own process and through a subprocess, on any machine (the weaker `process` level, explicitly allowed,
needs no bubblewrap); a refusal that probes nothing, and a marked test, do not."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.app import app_env

CASES = """
import contextlib, subprocess, sys
import pytest
from evals.sandbox import Sandbox, SandboxUnavailable
from tests.helpers.app import app_env

# a probe of the weaker level, explicitly allowed: it reaches the sandbox whether or not the level works here
PROBE = "Sandbox(isolation='process', allow_weaker=True).environment()"
SUB = f"import contextlib; from evals.sandbox import *\\nwith contextlib.suppress(SandboxUnavailable): {PROBE}"

def test_in_process_unmarked():
    with contextlib.suppress(SandboxUnavailable):
        eval(PROBE)

def test_subprocess_unmarked():
    subprocess.run([sys.executable, "-c", SUB], env=app_env(), check=True)

def test_refusal_without_probe():
    with pytest.raises(SandboxUnavailable):
        Sandbox(isolation="process").environment()

@pytest.mark.sandbox
def test_marked():
    with contextlib.suppress(SandboxUnavailable):
        eval(PROBE)
"""


@pytest.mark.slow  # a pytest subprocess (torch import) and three sandboxed probes
def test_unmarked_tests_that_reach_the_sandbox_fail(tmp_path):
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", str(tmp_path), "-n", "0", "-v", "-o", "addopts="],
        cwd=tmp_path,
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    outcomes = dict(re.findall(r"^test_cases.py::(\w+) (PASSED|FAILED|SKIPPED)", out, flags=re.M))
    marked = "SKIPPED" if "BUBBLEWRAP MISSING" in out else "PASSED"  # every sandbox test skips without bubblewrap
    assert outcomes == {
        "test_in_process_unmarked": "FAILED",
        "test_subprocess_unmarked": "FAILED",
        "test_refusal_without_probe": "PASSED",
        "test_marked": marked,
    }, out[-3000:]
    for name in ("test_in_process_unmarked", "test_subprocess_unmarked"):
        assert f"{name} reached the sandbox (Sandbox.run, probes isolation 'process')" in out, out[-3000:]
