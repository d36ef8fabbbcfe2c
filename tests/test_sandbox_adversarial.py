"""Hostile programs through the real LiveCodeBench grading path (bubblewrap sandbox, real subprocesses), in
both grading modes (`official`: one runner process holds the program for all tests; `strict`: a process
per test).

Most programs print the correct answer only if their attack worked, so "graded as a failure" means the
attack failed. Every run must also end within its time bound, leave no process behind and leave the
canary file outside the sandbox untouched.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from evals.livecodebench.data import Problem, TestCase
from evals.livecodebench.grader import Grader, GradingConfig
from evals.sandbox.uids import UID_BASE, UID_SLOTS

pytestmark = [
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="BUBBLEWRAP MISSING: sandbox tests not run; apt-get install -y bubblewrap"
    ),
    pytest.mark.timeout(60),
]
pytestmark = [*pytestmark, pytest.mark.sandbox]
ROOT = Path(__file__).resolve().parents[1]
MODES = ("official", "strict")

TIMEOUT_S = 1.0
BOUND_S = (TIMEOUT_S + 1) * 1 + 5 + 3  # official overall limit for one test + slack for a busy 2-core box
ANSWER = "print(7)\nprint(4)\n"  # the correct output for SUM's single test


def stdin_problem(qid: str, test_input: str, output: str) -> Problem:
    return Problem(
        qid, "t", "c", "atcoder", "c", datetime(2024, 1, 1), "", "easy", [TestCase(test_input, output, "stdin")], [], {}
    )


SUM = stdin_problem("adv_sum", "2\n3 4\n", "7\n4\n")


def sandbox_pids() -> set[int]:
    """Live (non-zombie) processes owned by a sandbox uid."""
    pids = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
        state = re.search(r"^State:\s+(\S)", status, re.M).group(1)
        if (UID_BASE <= uid < UID_BASE + UID_SLOTS or uid == 65534) and state != "Z":
            pids.add(int(name))
    return pids


@pytest.fixture
def canary():
    """A world-writable directory and file outside the sandbox: only isolation can protect them."""
    d = tempfile.mkdtemp(prefix="lcb-canary-")
    os.chmod(d, 0o777)
    path = os.path.join(d, "canary.txt")
    with open(path, "w") as f:
        f.write("canary")
    os.chmod(path, 0o666)
    yield path
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=MODES)
def grade(canary, request):
    grader = Grader(GradingConfig(timeout_s=TIMEOUT_S, isolation="bwrap", grading=request.param))

    def run(code: str, problem: Problem = SUM):
        before = sandbox_pids()
        t0 = time.monotonic()
        res = grader.grade(problem, code)
        elapsed = time.monotonic() - t0
        assert res.sandbox == "bwrap"
        assert elapsed < BOUND_S, f"grading took {elapsed:.1f}s"
        deadline = time.monotonic() + 3
        while (left := sandbox_pids() - before) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"processes outlived the grading: {left}"
        with open(canary) as f:
            assert f.read() == "canary"
        return res

    run.mode = request.param
    return run


HOSTILE = {
    "infinite_loop": "while True:\n    pass\n",
    "sleep_past_limit": "import time\ntime.sleep(100)\n" + ANSWER,
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory_bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(256 << 20))\n",
    "huge_output": "import sys\nwhile True:\n    sys.stdout.write('7' * 65536)\n",
    "stderr_flood": "import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n",
    "disk_fill": (
        "import os\nwith open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(os.urandom(1 << 20))\n"
    ),
    "ignore_signals": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGALRM, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n"
    ),
    "deep_recursion": "def f(n):\n    return f(n + 1) + 1\nprint(f(0))\n",
    "threads_outlive_main": (  # daemon threads that would act after the program "finished"
        "import threading, time\ndef later():\n    time.sleep(1.5)\n    open(CANARY, 'w').write('pwned by thread')\n"
        "for _ in range(8):\n    threading.Thread(target=later, daemon=True).start()\nprint('done')\n"
    ),
    "thread_swarm": (
        "import threading, time\nts = [threading.Thread(target=time.sleep, args=(100,)) for _ in range(5000)]\n"
        "for t in ts:\n    t.start()\n" + ANSWER
    ),
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ANSWER,
    "kill_everything": "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n" + ANSWER,
    "sys_exit_before_output": "import sys\nsys.exit(0)\n" + ANSWER,
    "close_stdout": "import os\nos.close(1)\n" + ANSWER,
    "forge_verdict": (
        # The correct answer goes only into forged records; the program's own output is wrong.
        "import os, json\nrec = json.dumps({'i': 0, 'status': 'ok', 't': 0.0, 'out': '7\\n4\\n', 'err': ''}) + '\\n'\n"
        "print('PASSED')\nprint(rec)\n"
        "for path in ('/proc/%d/fd/1' % os.getppid(), '/proc/1/fd/1', '/proc/self/fd/1'):\n"
        "    try:\n        with open(path, 'w') as f:\n            f.write(rec)\n    except OSError:\n        pass\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, rec.encode())\n    except OSError:\n        pass\n"
    ),
    "monkeypatch_checker": (
        "import builtins, json, sys\n"
        'json.dumps = lambda *a, **k: \'{"i": 0, "status": "ok", "out": "7\\\\n4\\\\n"}\'\n'
        "json.loads = lambda *a, **k: {'i': 0, 'status': 'ok', 'out': '7\\n4\\n', 't': 0}\n"
        "builtins.print = lambda *a, **k: None\n"
        "for p in ('/code/driver.py', '/code/tests.json'):\n"
        "    try:\n        open(p, 'w').write('print(\"PASSED\")')\n    except OSError:\n        pass\n"
        "sys.stdout.write('PASSED\\n')\n"
    ),
    "write_and_delete_outside": (
        "import os\nhit = False\nfor act in (lambda: open(CANARY, 'w').write('pwned'), lambda: os.remove(CANARY),\n"
        "            lambda: open('/usr/pwned', 'w'), lambda: open('/pwned', 'w'), lambda: open('/code/pwned', 'w')):\n"
        "    try:\n        act()\n        hit = True\n    except OSError:\n        pass\n"
        "if hit:\n" + "".join("    " + line + "\n" for line in ANSWER.splitlines())
    ),
    "poison_interpreter": (  # a .pth file in the (mounted) virtualenv would run in every later sandbox
        "import os, sys, sysconfig\nhit = False\n"
        "for d in {sysconfig.get_paths()['purelib'], sys.prefix, sys.base_prefix, os.path.dirname(os.__file__)}:\n"
        "    try:\n        open(os.path.join(d, 'zz_evil.pth'), 'w').write('import os')\n        hit = True\n"
        "    except OSError:\n        pass\n"
        "if hit:\n" + "".join("    " + line + "\n" for line in ANSWER.splitlines())
    ),
    "double_fork_daemon": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(1.5)\n        open(CANARY, 'w').write('pwned by daemon')\n        time.sleep(60)\n"
        "    os._exit(0)\nprint('daemon started')\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_fails_cleanly(name, grade, canary):
    code = f"CANARY = {canary!r}\n" + HOSTILE[name]
    res = grade(code)
    if name == "close_stdout" and grade.mode == "official":
        # officially the program's stdout is an in-memory buffer: closing fd 1 breaks nothing, so the
        # answer it then prints is simply correct (the grader must still work)
        assert res.passed, res
        return
    assert not res.passed and res.status != "passed", res
    if name in ("double_fork_daemon", "threads_outlive_main"):
        time.sleep(2)  # the daemon would have written by now, had it survived
        with open(canary) as f:
            assert f.read() == "canary"


def test_environment_secrets_do_not_leak(grade, monkeypatch):
    secret = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("LCB_GRADER_SECRET", secret)
    code = (
        "import os\nfound = [v for v in os.environ.values() if v.startswith('s3cr3t-')]\n"
        "for pid in os.listdir('/proc'):\n"
        "    for part in ('environ', 'cmdline'):\n"
        "        try:\n            data = open(f'/proc/{pid}/{part}', 'rb').read().decode(errors='replace')\n"
        "        except OSError:\n            continue\n"
        "        found += [w.split('=', 1)[-1] for w in data.split('\\0') if 's3cr3t-' in w]\n"
        "print(found[0] if found else 'nothing')\n"
    )
    res = grade(code, stdin_problem("adv_env", "\n", secret + "\n"))
    assert res.status == "wrong_answer", res


def test_grader_files_are_invisible(grade, tmp_path):
    secret = "file-secret-" + os.urandom(8).hex()
    d = tempfile.mkdtemp(prefix="lcb-secret-")
    try:
        os.chmod(d, 0o755)
        path = os.path.join(d, "secret.txt")
        with open(path, "w") as f:
            f.write(secret)
        os.chmod(path, 0o644)
        code = (
            f"paths = [{path!r}, {str(ROOT / 'evals/livecodebench/grader.py')!r}, '/etc/hostname', '/root/.bashrc',"
            f" {str(ROOT / 'tests/fixtures/livecodebench/test.jsonl')!r}]\n"
            "out = 'nothing'\nfor p in paths:\n    try:\n        out = open(p).read()\n        break\n"
            "    except OSError:\n        pass\nprint(out)\n"
        )
        res = grade(code, stdin_problem("adv_file", "\n", secret + "\n"))
        assert res.status == "wrong_answer", res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_network_including_loopback_is_unreachable(grade):
    token = "net-token-" + os.urandom(8).hex()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    connections = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connections.append(conn)
            conn.sendall(token.encode() + b"\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (
        "import socket\nout = 'nothing'\n"
        f"for host in ('127.0.0.1', 'localhost', {socket.gethostname()!r}, '10.0.0.1', '1.1.1.1'):\n"
        "    try:\n"
        f"        s = socket.create_connection((host, {port}), timeout=0.3)\n"
        "        out = s.recv(100).decode().strip()\n        break\n"
        "    except OSError:\n        pass\nprint(out)\n"
    )
    try:
        res = grade(code, stdin_problem("adv_net", "\n", token + "\n"))
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()
    assert res.status == "wrong_answer", res
    assert connections == [], "the sandboxed program reached the grader's loopback socket"


@pytest.mark.parametrize("mode", MODES)
def test_controls_the_same_attacks_pass_without_the_attack(mode):
    """Sanity check that the suite can fail: the plain correct answer passes in the same setup."""
    res = Grader(GradingConfig(timeout_s=TIMEOUT_S, isolation="bwrap", grading=mode)).grade(SUM, ANSWER)
    assert res.passed, res


def test_official_runner_channel_cannot_be_forged(grade):
    """In official mode the program shares its process with the test loop: a frame it writes on the
    result channel (it can find the fd) is refused, not taken as its output."""
    code = (
        "import os, json\nframe = json.dumps({'tok': 'guess', 'status': 'ok', 'out': '7\\n4\\n', 'err': ''})\n"
        "for fd in range(3, 32):\n    try:\n        os.write(fd, (frame + '\\n').encode())\n    except OSError:\n"
        "        pass\nprint('nothing')\n"
    )
    res = grade(code)
    assert res.status in ("runtime_error", "wrong_answer"), res
    if grade.mode == "official":
        assert "result channel" in res.tests[0].detail
