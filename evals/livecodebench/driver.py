"""In-sandbox test driver (standalone, stdlib only): runs a candidate program on each test input.

Copied into the sandbox beside `solution.py` and `tests.json` (inputs only: expected outputs never enter
the sandbox, so nothing in there can know, print or fake a passing verdict). For each test it forks a
fresh child that runs the candidate with the input on fd 0 and its stdout in a capped file, waits up to
the per-test time limit, and prints one JSON record {"i", "status", "out", "t", "err"} on its own stdout,
which the grader outside compares with the expected outputs it keeps. The driver makes itself
non-dumpable first, so the candidate (same uid) cannot reach its stdout through /proc/<pid>/fd or
ptrace it.

Usage: python -I driver.py [--own-pid-namespace]
"""

import ctypes
import json
import math
import os
import resource
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ERR_TAIL = 2000
# The official runner executes candidates after star-importing these modules (and then importing each
# by name) with a recursion limit of 50000; programs that lean on those names must behave the same here.
PRELUDE_MODULES = (
    "string",
    "re",
    "datetime",
    "collections",
    "heapq",
    "bisect",
    "copy",
    "math",
    "random",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "io",
    "sys",
    "json",
    "builtins",
    "typing",
)
PRELUDE = (
    "".join(f"from {m} import *\n" for m in PRELUDE_MODULES)
    + "".join(f"import {m}\n" for m in PRELUDE_MODULES if m not in ("builtins", "typing"))
    + "sys.setrecursionlimit(50000)\n"
)


def make_undumpable():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def to_json(value):
    if isinstance(value, tuple):  # the official grader accepts tuples where lists are expected
        value = list(value)

    def fallback(obj):  # numpy scalars/arrays and similar
        for attr in ("tolist", "item"):
            if hasattr(obj, attr):
                return getattr(obj, attr)()
        raise TypeError(f"result of type {type(obj).__name__} is not JSON serialisable")

    return json.dumps(value, default=fallback)


def run_child(code, mode, func_name, test_input, result_fd):
    """Runs in the forked child; never returns."""
    status = 0
    try:
        scope = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(PRELUDE, scope)
        try:
            exec(code, scope)
        except SystemExit:  # the official runner treats an exit during a stdin program as completion
            if mode == "functional":
                raise
        if mode == "functional":
            target = scope["Solution"]() if "Solution" in scope else None
            method = getattr(target, func_name) if target is not None else scope[func_name]
            args = [json.loads(line) for line in test_input.split("\n")]
            data = to_json(method(*args)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(result_fd, view) :]
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os._exit(status)


def kill_strays(own_pid_namespace):
    """Between tests, kill every process of this run except pid 1 and the driver (own pid ns only)."""
    if not own_pid_namespace:
        return
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def run_test(code, spec, i, test_input, own_pid_namespace):
    timeout = float(spec["timeout_s"])
    paths = {k: f"/tmp/.lcb_{k}_{os.getpid()}_{i}" for k in ("in", "out", "err", "res")}
    with open(paths["in"], "w") as f:
        f.write(test_input)
    fds = {
        "in": os.open(paths["in"], os.O_RDONLY),
        "out": os.open(paths["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        "err": os.open(paths["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        "res": os.open(paths["res"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
    }
    sys.stdout.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.dup2(fds["in"], 0)
            os.dup2(fds["out"], 1)
            os.dup2(fds["err"], 2)
            os.dup2(fds["res"], 3)
            os.closerange(4, 1 << 16)
            cpu = int(math.ceil(timeout)) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        except BaseException:
            os._exit(2)
        run_child(code, spec["mode"], spec.get("func_name"), test_input, 3)
    for fd in fds.values():
        os.close(fd)
    status, wait_s = None, 0.001
    while status is None:
        done, raw = os.waitpid(pid, os.WNOHANG)
        elapsed = time.monotonic() - start
        if done:
            status = raw
        elif elapsed > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            status = "timeout"
        else:
            time.sleep(wait_s)
            wait_s = min(wait_s * 2, 0.02)
    elapsed = time.monotonic() - start
    kill_strays(own_pid_namespace)
    if status == "timeout":
        verdict = "timeout"
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        verdict = "ok"
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        verdict = "timeout"  # SIGXCPU at the soft CPU limit, SIGKILL at the hard one
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXFSZ:
        verdict = "output_limit"
    else:
        verdict = "runtime_error"
    out_key = "out" if spec["mode"] == "stdin" else "res"
    record = {"i": i, "status": verdict, "t": round(elapsed, 4), "out": "", "err": ""}
    try:
        if verdict == "ok":
            with open(paths[out_key], "rb") as f:
                record["out"] = f.read().decode("utf-8", errors="replace")
        with open(paths["err"], "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - ERR_TAIL))
            record["err"] = f.read().decode("utf-8", errors="replace")
    except OSError as exc:  # the candidate may have removed its files
        record.update(status="runtime_error" if verdict == "ok" else verdict, err=f"driver: {exc}")
    for p in paths.values():
        try:
            os.unlink(p)
        except OSError:
            pass
    return record


def main():
    make_undumpable()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    own_pid_namespace = "--own-pid-namespace" in sys.argv[1:]
    with open(os.path.join(HERE, "tests.json")) as f:
        spec = json.load(f)
    with open(os.path.join(HERE, "solution.py"), encoding="utf-8", errors="replace") as f:
        source = f.read()
    try:
        code = compile(source, "solution.py", "exec")
    except BaseException as exc:
        for i in range(len(spec["inputs"])):
            print(
                json.dumps({"i": i, "status": "compile_error", "t": 0.0, "out": "", "err": repr(exc)[-ERR_TAIL:]}),
                flush=True,
            )
        return
    exec(PRELUDE, {})  # import the prelude modules once; each test's child then only rebinds names
    for i, test_input in enumerate(spec["inputs"]):
        print(json.dumps(run_test(code, spec, i, test_input, own_pid_namespace)), flush=True)


if __name__ == "__main__":
    main()
