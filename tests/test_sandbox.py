"""The sandbox runner itself: capture, limits, early stop, levels, concurrency, cleanup (real subprocesses)."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from evals.sandbox import Limits, Sandbox
from evals.sandbox.runner import tagged_processes

pytestmark = pytest.mark.timeout(60)
pytestmark = [pytestmark, pytest.mark.sandbox]
HAVE_BWRAP = shutil.which("bwrap") is not None
IS_ROOT = os.geteuid() == 0
LEVELS = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not HAVE_BWRAP, reason="apt-get install -y bubblewrap")),
    pytest.param("unshare", marks=pytest.mark.skipif(not IS_ROOT, reason="unshare level needs root")),
    "process",
]


@pytest.mark.parametrize("level", LEVELS)
def test_runs_a_program_with_stdin_and_reports_its_level(level):
    prog = "import os, sys\ndata = sys.stdin.read()\nprint(data.upper(), os.getuid() != 0, sorted(os.environ))\n"
    res = Sandbox(Limits(wall_s=10), isolation=level).run({"main.py": prog}, "main.py", stdin=b"hello")
    assert res.returncode == 0 and res.isolation == level
    text = res.stdout.decode()
    assert text.startswith("HELLO True")
    assert "'SANDBOX_RUN_ID'" in text and "HOME" in text and len(eval(text.split(" ", 2)[2])) <= 5


@pytest.mark.parametrize("level", LEVELS)
def test_wall_limit_kills_and_daemons_die(level):
    prog = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\ntime.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = Sandbox(Limits(wall_s=1.0), isolation=level).run({"main.py": prog}, "main.py")
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t0 < 5
    time.sleep(0.2)
    assert tagged_processes(res.run_id) == []


def test_exit_code_stderr_and_output_cap():
    sb = Sandbox(Limits(wall_s=10, stdout_bytes=1000, stderr_bytes=10))
    res = sb.run({"main.py": "import sys\nsys.stderr.write('x' * 100)\nsys.exit(3)\n"}, "main.py")
    assert res.returncode == 3 and res.stderr == b"x" * 10
    res = sb.run({"main.py": "while True:\n    print('y' * 100)\n"}, "main.py")
    assert res.output_limited and res.returncode is None and len(res.stdout) == 1000


def test_stop_when_ends_the_run_early():
    seen = []

    def stop(line: bytes) -> bool:
        seen.append(line)
        return line == b"2"

    prog = "import time\nfor i in range(100):\n    print(i, flush=True)\n    time.sleep(0.01)\n"
    res = Sandbox(Limits(wall_s=10)).run({"main.py": prog}, "main.py", stop_when=stop)
    assert res.stopped_early and seen == [b"0", b"1", b"2"]


def test_rlimits_apply():
    prog = (
        "import resource as r\nprint(r.getrlimit(r.RLIMIT_CPU)[0], r.getrlimit(r.RLIMIT_AS)[0] >> 20, "
        "r.getrlimit(r.RLIMIT_FSIZE)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0])\n"
    )
    res = Sandbox(Limits(cpu_s=3, memory_mb=512, file_size_mb=2, max_processes=9)).run({"m.py": prog}, "m.py")
    assert res.stdout.split() == [b"3", b"512", b"2", b"9"]


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


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="plain file name"):
        Sandbox().run({"../evil.py": "", "main.py": ""}, "main.py")
    with pytest.raises(ValueError, match="not among the sandbox files"):
        Sandbox().run({"main.py": ""}, "other.py")
    with pytest.raises(ValueError, match="unknown sandbox isolation"):
        _ = Sandbox(isolation="docker").isolation
    with pytest.raises(ValueError, match="wall_s must be > 0"):
        Limits(wall_s=0)


@pytest.mark.skipif(not HAVE_BWRAP, reason="apt-get install -y bubblewrap")
def test_auto_picks_bwrap_when_available():
    assert Sandbox().isolation == "bwrap"


def test_closing_its_pipes_does_not_end_the_run_early():
    prog = "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)\n"
    t0 = time.monotonic()
    res = Sandbox(Limits(wall_s=1.5)).run({"m.py": prog}, "m.py")
    assert res.timed_out and res.returncode is None and 1.4 < time.monotonic() - t0 < 5
