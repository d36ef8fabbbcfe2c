"""In-sandbox test driver (stdlib only): runs a candidate program on each test input.

Copied into the sandbox, with its sibling modules (`driver_common`, `driver_official`, `driver_strict`: stdlib
only, flat files), beside `solution.py` and `tests.json` (inputs only: expected outputs never enter
the sandbox, so nothing in there can know, print or fake a passing verdict). For each test it prints one
JSON record {"i", "status", "out", "t", "err"} on its own stdout, which the grader outside compares with
the expected outputs it keeps. The driver makes itself non-dumpable first, so the candidate (same uid)
cannot reach its stdout through /proc/<pid>/fd or ptrace it. Time limits are enforced from the driver,
outside the candidate's process.

Two ways to run the candidate (`grading` in tests.json):

- official: as the official LiveCodeBench grader runs programs, so that pass@1 means what published numbers
  mean. One child process (the runner) holds the program for all tests, in order, with the official
  grader's process state (its prelude, recursion limit 50000, its disabled functions: `quit`, `os.fork`,
  `os.kill`, `import resource`, ...). stdin programs: a final `if __name__ == '__main__':` block is unwrapped,
  top-level imports are hoisted and the rest becomes the body of a function, so top-level names are
  locals (`global` in a helper does not see them); each test calls it with an in-memory stdin (`read()`
  returns the whole input even after `readline()`, `readlines()` keeps no line ends, `sys.stdin` is not
  iterable, `sys.stdin.buffer.readline()` returns the first line every time, `open(0)` and a
  `stdin`/`stdout` bound at import time reach the real, empty descriptors) and sys.stdout replaced by an
  in-memory text buffer (no `.buffer`); `exit()`/`sys.exit()` end the test normally. Functional programs
  run against one module and one `Solution()` for every test (class-level state carries over), and
  their return values travel in a typed form so that the grader outside compares them with Python
  equality (a list of tuples is not a list of lists; a returned top-level tuple counts as a list).
- strict: a plain Python run per test: a fresh forked child with the input on a real fd 0, its stdout
  in a real file, `__name__ == "__main__"` for stdin programs; non-daemon threads are joined and atexit
  handlers run, as at interpreter exit. Functional values are compared as JSON (tuples count as lists).

In both: non-daemon threads a stdin program leaves running are waited for (within the time limit) before
its output is taken; functional programs never run as `__main__`; the int/str digit limit is 50,000, as
the official grader sets it; numerical libraries are single-threaded.

Usage: python -I driver.py [--own-pid-namespace]
"""

import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # `python -I` leaves the script's folder off sys.path: its sibling modules are here
try:
    from driver_common import ERR_TAIL, INT_MAX_STR_DIGITS, PRELUDE, kill_strays, make_undumpable
    from driver_official import Runner
    from driver_strict import run_test
finally:
    sys.path.remove(HERE)  # the candidate sees the interpreter's own sys.path


def emit(i, status, out, t, err):
    rec = {"i": i, "status": status, "t": round(t, 4), "out": out if status == "ok" else "", "err": err[-ERR_TAIL:]}
    print(json.dumps(rec), flush=True)


def run_official(source, spec, own_pid_namespace):
    timeout = float(spec["timeout_s"])
    n = len(spec["inputs"])
    runner = None
    for i in range(n):
        if runner is None:
            runner = Runner(source, spec)
            status, _, err, t = runner.request("compile", timeout)
            if status != "ok":
                runner.kill()
                kill_strays(own_pid_namespace)
                for j in range(i, n):
                    emit(j, status, "", t if j == i else 0.0, err)
                return
        status, out, err, t = runner.request(str(i), timeout)
        emit(i, status, out, t, err)
        if not runner.alive:
            runner = None
            kill_strays(own_pid_namespace)
        else:
            kill_strays(own_pid_namespace, keep=runner.pid)
    if runner is not None:
        runner.kill()


# -- strict mode: a fresh child per test -----------------------------------------------------------------


def run_strict(source, spec, own_pid_namespace):
    try:
        code = compile(source, "solution.py", "exec")
    except BaseException as exc:
        for i in range(len(spec["inputs"])):
            emit(i, "compile_error", "", 0.0, repr(exc))
        return
    exec(PRELUDE, {})  # import the prelude modules once; each test's child then only rebinds names
    for i, test_input in enumerate(spec["inputs"]):
        print(json.dumps(run_test(code, spec, i, test_input, own_pid_namespace)), flush=True)


def main():
    make_undumpable()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)
    own_pid_namespace = "--own-pid-namespace" in sys.argv[1:]
    with open(os.path.join(HERE, "tests.json")) as f:
        spec = json.load(f)
    with open(os.path.join(HERE, "solution.py"), encoding="utf-8", errors="replace") as f:
        source = f.read()
    if spec.get("grading", "official") == "official":
        run_official(source, spec, own_pid_namespace)
    else:
        run_strict(source, spec, own_pid_namespace)


if __name__ == "__main__":
    main()
