"""The sandbox runner itself: capture, limits, early stop, levels, concurrency, cleanup (real subprocesses);
its interpreter (this project's virtualenv, with numpy); and that isolation never silently weakens."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evals.sandbox import Limits, Sandbox, interpreter, runner
from evals.sandbox.isolation import THREAD_ENV
from evals.sandbox.runner import SandboxUnavailable, resolve_level, tagged_processes
from tests.helpers import sandbox_guard

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(60)
HAVE_BWRAP = shutil.which("bwrap") is not None
IS_ROOT = os.geteuid() == 0
# Loud on purpose: without bubblewrap the sandbox refuses to grade, and these tests cannot show it holds.
BWRAP_MISSING = "BUBBLEWRAP MISSING: sandbox tests not run; install it: apt-get install -y bubblewrap"
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason=BWRAP_MISSING)
LEVELS = [
    pytest.param("bwrap", marks=needs_bwrap),
    pytest.param("unshare", marks=pytest.mark.skipif(not IS_ROOT, reason="unshare level needs root")),
    "process",
]


def python_for(level: str) -> str:
    """The project's interpreter, or (at the `process` level, which cannot mount it) one every user can reach."""
    default = interpreter.default_python()
    if level == "process" and IS_ROOT and interpreter.unreachable_dirs(default):
        return interpreter.system_python()
    return default


def sandbox_at(level: str, limits: Limits) -> Sandbox:
    return Sandbox(limits, isolation=level, python=python_for(level), allow_weaker=level != "bwrap")


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_runs_a_program_with_stdin_and_reports_its_level(level):
    prog = "import os, sys\ndata = sys.stdin.read()\nprint(data.upper(), os.getuid() != 0, sorted(os.environ))\n"
    with pytest.warns(RuntimeWarning, match="weaker") if level != "bwrap" else contextlib.nullcontext():
        res = sandbox_at(level, Limits(wall_s=10)).run({"main.py": prog}, "main.py", stdin=b"hello")
    assert res.returncode == 0 and res.isolation == level
    text = res.stdout.decode()
    assert text.startswith("HELLO True")
    names = set(eval(text.split(" ", 2)[2]))
    assert (
        {"SANDBOX_RUN_ID", "HOME", *THREAD_ENV}
        <= names
        <= {"SANDBOX_RUN_ID", "HOME", "LANG", "PATH", "PWD", *THREAD_ENV}
    )


@pytest.mark.sandbox
@pytest.mark.filterwarnings("ignore:sandbox running at the weaker isolation level")
@pytest.mark.parametrize("level", LEVELS)
def test_wall_limit_kills_and_daemons_die(level):
    prog = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\ntime.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = sandbox_at(level, Limits(wall_s=1.0)).run({"main.py": prog}, "main.py")
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t0 < 5
    time.sleep(0.2)
    assert tagged_processes(res.run_id) == []


@pytest.mark.sandbox
@needs_bwrap
def test_exit_code_stderr_and_output_cap():
    sb = Sandbox(Limits(wall_s=10, stdout_bytes=1000, stderr_bytes=10))
    res = sb.run({"main.py": "import sys\nsys.stderr.write('x' * 100)\nsys.exit(3)\n"}, "main.py")
    assert res.returncode == 3 and res.stderr == b"x" * 10
    res = sb.run({"main.py": "while True:\n    print('y' * 100)\n"}, "main.py")
    assert res.output_limited and res.returncode is None and len(res.stdout) == 1000


@pytest.mark.sandbox
@needs_bwrap
def test_stop_when_ends_the_run_early():
    seen = []

    def stop(line: bytes) -> bool:
        seen.append(line)
        return line == b"2"

    prog = "import time\nfor i in range(100):\n    print(i, flush=True)\n    time.sleep(0.01)\n"
    res = Sandbox(Limits(wall_s=10)).run({"main.py": prog}, "main.py", stop_when=stop)
    assert res.stopped_early and seen == [b"0", b"1", b"2"]


@pytest.mark.sandbox
@needs_bwrap
def test_rlimits_apply():
    prog = (
        "import resource as r\nprint(r.getrlimit(r.RLIMIT_CPU)[0], r.getrlimit(r.RLIMIT_AS)[0] >> 20, "
        "r.getrlimit(r.RLIMIT_FSIZE)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0])\n"
    )
    res = Sandbox(Limits(cpu_s=3, memory_mb=512, file_size_mb=2, max_processes=9)).run({"m.py": prog}, "m.py")
    assert res.stdout.split() == [b"3", b"512", b"2", b"9"]


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.skipif(not IS_ROOT, reason="per-run uids are leased only when the grader is root")
def test_concurrent_runs_have_separate_process_budgets():
    """A fork-hungry run must not eat another run's RLIMIT_NPROC budget."""
    prog = (
        "import os, time\nn = 0\nfor _ in range(12):\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    n += 1\n"
        "print(n)\ntime.sleep(1)\n"
    )
    outs = []
    runs = [
        threading.Thread(
            target=lambda: outs.append(Sandbox(Limits(wall_s=15, max_processes=20)).run({"m.py": prog}, "m.py").stdout)
        )
        for _ in range(3)
    ]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert outs == [b"12\n"] * 3


@pytest.mark.sandbox
@needs_bwrap
def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="plain file name"):
        Sandbox().run({"../evil.py": "", "main.py": ""}, "main.py")
    with pytest.raises(ValueError, match="not among the sandbox files"):
        Sandbox().run({"main.py": ""}, "other.py")
    with pytest.raises(ValueError, match="unknown sandbox isolation"):
        _ = Sandbox(isolation="docker").isolation
    with pytest.raises(ValueError, match="wall_s must be > 0"):
        Limits(wall_s=0)


@pytest.mark.sandbox
@needs_bwrap
def test_auto_picks_bwrap_when_available():
    assert Sandbox().isolation == "bwrap"


@pytest.mark.sandbox
@needs_bwrap
def test_closing_its_pipes_does_not_end_the_run_early():
    prog = "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)\n"
    t0 = time.monotonic()
    res = Sandbox(Limits(wall_s=1.5)).run({"m.py": prog}, "m.py")
    assert res.timed_out and res.returncode is None and 1.4 < time.monotonic() - t0 < 5


# -- the sandbox interpreter ------------------------------------------------------------------------------


@pytest.mark.sandbox
@needs_bwrap
def test_sandbox_runs_the_project_interpreter_with_numpy_and_records_it():
    import numpy

    sb = Sandbox(Limits(wall_s=20, memory_mb=2048))
    env = sb.require_packages()
    assert env["python"] == sys.executable and env["isolation"] == "bwrap"
    assert env["packages"]["numpy"] == numpy.__version__ and env["numpy_loads"] is True
    assert set(interpreter.SOLUTION_PACKAGES) <= {k for k, v in env["packages"].items() if v}
    assert "numpy " + numpy.__version__ in interpreter.describe(env)
    prog = (
        "import os, sys, numpy\nprint(int(numpy.arange(5).sum()), sys.prefix == sys.base_prefix,"
        f" os.path.exists({str(ROOT / 'evals')!r}))\n"
    )
    res = sb.run({"m.py": prog}, "m.py")
    assert res.stdout.split() == [b"10", b"False", b"False"], res  # the venv, but not the project's source


@pytest.mark.sandbox
@needs_bwrap
def test_missing_solution_package_fails_loudly():
    with pytest.raises(RuntimeError, match="lacks \\['no_such_package_for_tests'\\].*interpreter.py"):
        Sandbox(Limits(wall_s=20)).require_packages(("numpy", "no_such_package_for_tests"))


# -- isolation never silently weakens ----------------------------------------------------------------------


@pytest.fixture
def no_bwrap(monkeypatch):
    """This process sees no bubblewrap (as on a machine where it is not installed): its probes of bwrap depend on
    nothing installed, so they are not the sandbox guard's to count (tests/helpers/sandbox_guard.py)."""
    monkeypatch.delenv(sandbox_guard.LOG_VAR, raising=False)
    real_which = shutil.which
    monkeypatch.setattr(runner.shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    runner._probe.cache_clear()
    yield
    runner._probe.cache_clear()


def test_auto_refuses_without_bubblewrap_naming_the_install_and_the_opt_in(no_bwrap):
    with pytest.raises(SandboxUnavailable) as err:
        _ = Sandbox(isolation="auto").isolation
    msg = str(err.value)
    assert "apt-get install -y bubblewrap" in msg and "not installed" in msg
    assert "allow_weaker=True" in msg and "eval.sandbox.allow_weaker=true" in msg and "--allow-weaker-isolation" in msg
    with pytest.raises(SandboxUnavailable, match="bubblewrap does not work here"):
        resolve_level("bwrap", interpreter.default_python(), allow_weaker=True)  # named bwrap: no fallback at all


@pytest.mark.parametrize("level", ["unshare", "process"])
def test_a_named_weaker_level_needs_the_explicit_opt_in(level):
    with pytest.raises(SandboxUnavailable, match=f"isolation '{level}' is weaker than bubblewrap.*allow_weaker"):
        _ = Sandbox(isolation=level).isolation


@pytest.mark.sandbox
def test_the_opt_in_runs_weaker_isolation_and_records_it(no_bwrap):
    sb = Sandbox(Limits(wall_s=10), isolation="auto", python=python_for("process"), allow_weaker=True)
    with pytest.warns(RuntimeWarning, match="weaker isolation level"):
        level = sb.isolation
    assert level == ("unshare" if IS_ROOT else "process")
    res = sb.run({"m.py": "print('hi')"}, "m.py")
    assert res.returncode == 0 and res.stdout == b"hi\n" and res.isolation == level


@pytest.mark.sandbox
def test_grading_cli_refuses_without_bubblewrap_unless_opted_in(tmp_path):
    """A machine without bubblewrap gets the error (exit 2), not a warning; the opt-in grades and records it."""
    tools = tmp_path / "bin"  # a PATH with util-linux but no bwrap
    tools.mkdir()
    for tool in ("prlimit", "unshare", "setpriv", "mount"):
        if found := shutil.which(tool):
            (tools / tool).symlink_to(found)
    fix = ROOT / "tests" / "fixtures" / "livecodebench"
    cmd = [sys.executable, "-m", "evals.livecodebench.grade", "--problems", str(fix)]
    cmd += ["--candidates", str(fix / "candidates.jsonl"), "--timeout", "1"]
    env = {**os.environ, "PATH": str(tools), "PYTHONPATH": str(ROOT)}
    refused = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "apt-get install -y bubblewrap" in refused.stderr and "--allow-weaker-isolation" in refused.stderr
    assert refused.stdout == ""  # nothing graded
    if not IS_ROOT and interpreter.unreachable_dirs(sys.executable):
        return  # neither weaker level could start this interpreter here
    cmd += ["--allow-weaker-isolation"] + ([] if IS_ROOT else ["--python", python_for("process")])
    allowed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert allowed.returncode == 0, allowed.stderr
    summary = json.loads(allowed.stdout)
    assert summary["sandbox"] == ("unshare" if IS_ROOT else "process") and "sandbox_warning" in summary
