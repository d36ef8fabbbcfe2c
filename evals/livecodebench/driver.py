"""In-sandbox test driver (standalone, stdlib only): runs a candidate program on each test input.

Copied into the sandbox beside `solution.py` and `tests.json` (inputs only: expected outputs never enter
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

import ast
import ctypes
import fcntl
import io
import json
import math
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ERR_TAIL = 2000
INT_MAX_STR_DIGITS = 50000  # the official grader raises Python's int<->str digit limit (4,300) to this
MODULE_NAME = "solution"  # the candidate module's __name__ whenever it is not a plain script run
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
# What the official grader's process has switched off before it runs a candidate (set to None there).
OFFICIAL_DISABLED = {
    "builtins": ("quit", "help"),
    "os": (
        "kill",
        "system",
        "putenv",
        "remove",
        "removedirs",
        "rmdir",
        "fchdir",
        "setuid",
        "fork",
        "forkpty",
        "killpg",
        "rename",
        "renames",
        "truncate",
        "replace",
        "unlink",
        "fchmod",
        "fchown",
        "chmod",
        "chown",
        "chroot",
        "lchflags",
        "lchmod",
        "lchown",
        "getcwd",
        "chdir",
    ),
    "shutil": ("rmtree", "move", "chown"),
    "subprocess": ("Popen",),
}
OFFICIAL_BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")  # `import` of these fails
# The official grader's process has imported numpy before it switches functions off, so numpy (and what
# builds on it) imports there; importing it afterwards would fail on the disabled os.putenv. The runner
# imports it first when the program may use it.
NUMPY_USERS = ("numpy", "scipy", "pandas", "sklearn", "networkx", "sympy", "torch")
REQUEST_FD, RESULT_FD = 3, 4  # the official-mode runner's channel to the driver


def make_undumpable():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def error_tail(exc):
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:
        text = repr(exc)
    return text[-ERR_TAIL:]


def wait_for_threads():
    """Join every non-daemon thread, as the interpreter does before it exits (threads may start threads)."""
    me = threading.current_thread()
    while True:
        pending = [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]
        if not pending:
            return
        for t in pending:
            t.join()


# -- returned values -----------------------------------------------------------------------------------


def to_json(value):
    """strict: plain JSON (tuples become lists, numpy values via tolist/item)."""
    if isinstance(value, tuple):  # the official grader accepts tuples where lists are expected
        value = list(value)

    def fallback(obj):  # numpy scalars/arrays and similar
        for attr in ("tolist", "item"):
            if hasattr(obj, attr):
                return getattr(obj, attr)()
        raise TypeError(f"result of type {type(obj).__name__} is not JSON serialisable")

    return json.dumps(value, default=fallback)


def typed(value, depth=0):
    """official: a JSON form of a returned value that keeps what Python equality tells apart (tuples vs
    lists, sets, dict key types, Fraction/Decimal), decoded outside by `compare.decode_typed`."""
    if depth > 5000:
        raise ValueError("returned value is nested too deeply (or contains itself)")
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        value = int(value)
        return value if value.bit_length() < 100000 else {"~": "hexint", "v": hex(value)}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [typed(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"~": "tuple", "v": [typed(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"~": "dict", "v": [[typed(k, depth + 1), typed(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"~": "frozenset" if isinstance(value, frozenset) else "set", "v": [typed(v, depth + 1) for v in value]}
    module = getattr(kind, "__module__", "") or ""
    if module == "numpy" and kind.__name__ == "ndarray":
        return {"~": "ndarray", "size": int(value.size), "v": typed(value.tolist(), depth + 1)}
    if module == "numpy" and hasattr(value, "item"):
        return typed(value.item(), depth + 1)
    if module in ("fractions", "decimal") and kind.__name__ in ("Fraction", "Decimal"):
        return {"~": kind.__name__, "v": str(value)}
    return {"~": "other", "type": f"{module}.{getattr(kind, '__qualname__', kind.__name__)}"}


# -- official mode: the runner (one process for all tests) ---------------------------------------------


class OutputLimit(BaseException):
    """The program printed more than any expected output could need."""


class CapturedStdout(io.StringIO):
    """sys.stdout during an official-mode stdin test: an in-memory text buffer, as officially (no `.buffer`,
    no `fileno()`; its `close` takes one argument there, so `sys.stdout.close()` raises TypeError)."""

    def __init__(self, cap):
        super().__init__()
        self._cap = cap
        self._size = 0

    def write(self, s):
        n = super().write(s)
        self._size += n
        if self._size > self._cap:
            raise OutputLimit()
        return n

    def close(self, _unused):
        return 1


class MockStdinBuffer:
    """`sys.stdin.buffer` during an official-mode test: `read()` gives the whole input as bytes; `readline()`
    gives the first line, every time it is called."""

    def __init__(self, text):
        self._data = text.encode("utf-8")

    def read(self, *args):
        return self._data

    def readline(self, *args):
        return self._data.split(b"\n")[0] + b"\n"


class MockStdin:
    """`sys.stdin` during an official-mode test. `read()` always returns the whole input (even after
    `readline()`), `readline()` reads line by line, `readlines()` is the input split on "\\n" (no line ends,
    a final "" after a trailing newline); other attributes come from an in-memory text stream. It defines
    no `__iter__`, so `for line in sys.stdin` raises TypeError, as officially."""

    def __init__(self, text):
        self._text = text
        self._stream = io.StringIO(text)
        self.buffer = MockStdinBuffer(text)

    def read(self, *args):
        return self._text

    def readline(self, *args):
        return self._stream.readline(*args)

    def readlines(self, *args):
        return self._text.split("\n")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def official_stdin_source(source):
    """The stdin program as the official grader runs it: a final `if __name__ == '__main__':` block is
    replaced by its body, top-level imports stay at module level, everything else becomes the body of
    `wrapped_function()`. Unparsable source is returned unchanged (its compile error is the verdict)."""
    try:
        tree = ast.parse(source)
        body = list(tree.body)
        last = body[-1] if body else None
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            body = body[:-1] + list(last.body)
        imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        fields = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
        func = ast.FunctionDef(
            name="wrapped_function",
            args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=rest,
            decorator_list=[],
            returns=None,
            lineno=1,
            **fields,
        )
        return ast.unparse(imports) + "\n" + ast.unparse(func)
    except Exception:
        return source


class OfficialProgram:
    """The candidate as the official grader holds it: compiled once into one module; functional programs
    get one `Solution()` for all tests."""

    def __init__(self, source, spec):
        from unittest.mock import mock_open

        self.source = source
        self.mode = spec["mode"]
        self.func_name = spec.get("func_name")
        self.output_cap = int(spec.get("output_cap_bytes", 64 << 20))
        self.call = None
        self._mock_open = mock_open
        self._loads = json.loads

    def compile(self):
        if self.mode == "stdin":
            text, name = PRELUDE + "\n" + official_stdin_source(self.source), "wrapped_function"
        else:
            text, name = PRELUDE + "\n\n" + self.source, self.func_name
        module = types.ModuleType(MODULE_NAME, "")
        exec(compile(text, "solution.py", "exec"), module.__dict__)
        holder = module.Solution() if "class Solution" in text else module
        self.call = getattr(holder, name, None)
        if self.call is None:
            raise AttributeError(f"the program defines no {name!r} to call")

    def run_stdin(self, text):
        import builtins

        captured = CapturedStdout(self.output_cap)
        real_stdin, real_stdout, real_open = sys.stdin, sys.stdout, builtins.open
        lines = iter(text.split("\n"))
        # The real stdin object (what `from sys import stdin` bound) reads the test input too while it runs.
        overrides = {
            "read": lambda *a: text,
            "readline": lambda *a: next(lines),
            "readlines": lambda *a: text.split("\n"),
        }
        shadowed = {}
        for name, fn in overrides.items():
            try:
                shadowed[name] = vars(real_stdin).get(name)
                setattr(real_stdin, name, fn)
            except (AttributeError, TypeError):
                pass
        builtins.open = self._mock_open(read_data=text)
        sys.stdin, sys.stdout = MockStdin(text), captured
        try:
            try:
                self.call()
            except SystemExit:
                pass
            wait_for_threads()
        finally:
            sys.stdin, sys.stdout, builtins.open = real_stdin, real_stdout, real_open
            for name, old in shadowed.items():
                try:
                    if old is None:
                        delattr(real_stdin, name)
                    else:
                        setattr(real_stdin, name, old)
                except (AttributeError, TypeError):
                    pass
        return captured.getvalue()

    def run_functional(self, text):
        args = [self._loads(line) for line in text.split("\n")]
        value = self.call(*args)
        if isinstance(value, tuple):  # the official grader lets a returned tuple stand for a list
            value = list(value)
        return typed(value)


def apply_official_guard():
    """Switch off what the official grader's process switches off before it runs a candidate."""
    import shutil  # noqa: F401  (imported to be disabled, as officially)
    import subprocess  # noqa: F401

    os.environ["OMP_NUM_THREADS"] = "1"
    for module_name, names in OFFICIAL_DISABLED.items():
        module = sys.modules[module_name]
        for name in names:
            setattr(module, name, None)
    for name in OFFICIAL_BLOCKED_MODULES:
        sys.modules[name] = None


def runner_main(source, spec, token):
    """The runner process: answers requests ("compile" or a test index) on REQUEST_FD with one JSON line
    each on RESULT_FD. Never returns."""
    encode = json.JSONEncoder(ensure_ascii=True).encode  # bound before the candidate can touch `json`
    write, read, exit_now = os.write, os.read, os._exit
    program = OfficialProgram(source, spec)
    if any(name in source for name in NUMPY_USERS):
        try:
            import numpy  # noqa: F401
        except ImportError:
            pass
    apply_official_guard()
    inputs = spec["inputs"]
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = read(REQUEST_FD, 4096)
            if not chunk:
                exit_now(0)
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        request = line.decode()
        frame = {"tok": token, "status": "ok", "out": "", "err": ""}
        try:
            if request == "compile":
                program.compile()
            elif program.mode == "stdin":
                frame["out"] = program.run_stdin(inputs[int(request)])
            else:
                frame["out"] = encode(program.run_functional(inputs[int(request)]))
        except OutputLimit:
            frame.update(status="output_limit", out="", err="output beyond the limit")
        except SyntaxError as exc:  # also IndentationError, TabError
            frame.update(status="compile_error" if request == "compile" else "runtime_error", err=error_tail(exc))
        except BaseException as exc:
            frame.update(status="runtime_error", out="", err=error_tail(exc))
        try:
            data = (encode(frame) + "\n").encode()
        except BaseException as exc:
            data = (encode({"tok": token, "status": "runtime_error", "out": "", "err": repr(exc)}) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[write(RESULT_FD, view) :]


def _high_dup(fd):
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)  # above RESULT_FD, below RLIMIT_NOFILE


class Runner:
    """The driver's handle on one official-mode runner process."""

    def __init__(self, source, spec):
        self.token = os.urandom(16).hex()
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)
                fds = [_high_dup(fd) for fd in (req_r, res_w, err_w)]
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                os.dup2(fds[2], 2)
                os.dup2(fds[0], REQUEST_FD)
                os.dup2(fds[1], RESULT_FD)
                os.closerange(RESULT_FD + 1, 1 << 16)
            except BaseException:
                os._exit(2)
            try:
                runner_main(source, spec, self.token)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(3)
        self.pid = pid
        self.alive = True
        for fd in (req_r, res_w, err_w):
            os.close(fd)
        self.pending = bytearray()
        self.err_open = True

    def request(self, what, timeout):
        """(status, out, err, seconds) for one request; status "timeout"/... when the runner had to die."""
        start = time.monotonic()
        err = bytearray()
        try:
            os.write(self.req_w, f"{what}\n".encode())
        except OSError:
            return self._died(start, err)
        scanned = 0
        while (nl := self.pending.find(b"\n", scanned)) < 0:
            scanned = len(self.pending)
            left = start + timeout - time.monotonic()
            if left <= 0:
                self.kill()
                return "timeout", "", bytes(err).decode("utf-8", "replace"), time.monotonic() - start
            watch = [self.res_r] + ([self.err_r] if self.err_open else [])
            ready, _, _ = select.select(watch, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if fd == self.err_r:
                    if not chunk:
                        self.err_open = False
                    err += chunk
                    del err[:-ERR_TAIL]
                elif chunk:
                    self.pending += chunk
                else:
                    return self._died(start, err)
        elapsed = time.monotonic() - start
        line = bytes(self.pending[:nl])
        del self.pending[: nl + 1]
        try:
            frame = json.loads(line)
            ok = isinstance(frame, dict) and frame.get("tok") == self.token and not self.pending
            status, out, frame_err = str(frame["status"]), str(frame["out"]), str(frame.get("err", ""))
        except (ValueError, KeyError, TypeError, RecursionError):
            ok = False
        if not ok:
            self.kill()
            return "runtime_error", "", "the program wrote to the grader's result channel", elapsed
        return status, out, frame_err or bytes(err).decode("utf-8", "replace"), elapsed

    def _died(self, start, err):
        _, raw = os.waitpid(self.pid, 0)
        self.alive = False
        self.kill()
        return exit_verdict(raw), "", bytes(err).decode("utf-8", "replace"), time.monotonic() - start

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the runner and whatever it started in its group
        except OSError:
            pass
        if self.alive:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.alive = False
        for fd in (self.req_w, self.res_r, self.err_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.req_w = self.res_r = self.err_r = -1


def exit_verdict(raw):
    if os.WIFEXITED(raw) and os.WEXITSTATUS(raw) == 0:
        return "ok"
    if os.WIFSIGNALED(raw) and os.WTERMSIG(raw) in (signal.SIGXCPU, signal.SIGKILL):
        return "timeout"  # SIGXCPU at the soft CPU limit, SIGKILL at the hard one
    if os.WIFSIGNALED(raw) and os.WTERMSIG(raw) == signal.SIGXFSZ:
        return "output_limit"
    return "runtime_error"


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


def run_child(code, mode, func_name, test_input, result_fd):
    """Runs in the forked child; never returns."""
    status = 0
    try:
        scope = {"__name__": "__main__" if mode == "stdin" else MODULE_NAME, "__builtins__": __builtins__}
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


def kill_strays(own_pid_namespace, keep=None):
    """Kill every process of this run except pid 1, the driver and `keep` (own pid namespace only)."""
    if not own_pid_namespace:
        return
    spared = {1, os.getpid(), keep}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in spared:
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
    verdict = "timeout" if status == "timeout" else exit_verdict(status)
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
