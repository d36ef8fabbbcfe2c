"""The in-sandbox driver's strict mode (stdlib only, staged beside `driver.py`): a plain Python run per test in
a fresh forked child; see `driver.py` for the semantics."""

import builtins
import json
import math
import os
import resource
import signal
import sys
import time
import traceback

if __package__:  # imported in the repository (tests)
    from evals.livecodebench.driver_common import (
        ERR_TAIL,
        MODULE_NAME,
        PRELUDE,
        exit_verdict,
        kill_strays,
        to_json,
        wait_for_threads,
    )
else:  # in the sandbox: flat files beside driver.py, which puts their folder on sys.path
    from driver_common import ERR_TAIL, MODULE_NAME, PRELUDE, exit_verdict, kill_strays, to_json, wait_for_threads


def run_child(code, mode, func_name, test_input, result_fd):
    """Runs in the forked child; never returns."""
    status = 0
    try:
        # __builtins__ is the module, as it was when this ran in __main__ (a plain script run)
        scope = {"__name__": "__main__" if mode == "stdin" else MODULE_NAME, "__builtins__": builtins}
        exec(PRELUDE, scope)
        try:
            exec(code, scope)
        except SystemExit:  # an exit during a stdin program is treated as completion
            if mode == "functional":
                raise
        if mode == "stdin":
            import atexit

            wait_for_threads()  # as the interpreter does at exit; then its atexit handlers
            atexit._run_exitfuncs()
        else:
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


def wait_or_kill(pid, start, timeout):
    """The child's raw wait status, or "timeout" once it has run past `timeout` (its process group is killed)."""
    wait_s = 0.001
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            return raw
        if time.monotonic() - start > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(wait_s)
        wait_s = min(wait_s * 2, 0.02)


def read_outputs(record, out_path, err_path):
    """Fill `record`'s out (only when the run was ok) and err tail from the child's files."""
    try:
        if record["status"] == "ok":
            with open(out_path, "rb") as f:
                record["out"] = f.read().decode("utf-8", errors="replace")
        with open(err_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - ERR_TAIL))
            record["err"] = f.read().decode("utf-8", errors="replace")
    except OSError as exc:  # the candidate may have removed its files
        record.update(status="runtime_error" if record["status"] == "ok" else record["status"], err=f"driver: {exc}")


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
    status = wait_or_kill(pid, start, timeout)
    elapsed = time.monotonic() - start
    kill_strays(own_pid_namespace)
    verdict = "timeout" if status == "timeout" else exit_verdict(status)
    out_key = "out" if spec["mode"] == "stdin" else "res"
    record = {"i": i, "status": verdict, "t": round(elapsed, 4), "out": "", "err": ""}
    read_outputs(record, paths[out_key], paths["err"])
    for p in paths.values():
        try:
            os.unlink(p)
        except OSError:
            pass
    return record
