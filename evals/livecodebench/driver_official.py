"""The in-sandbox driver's official mode (stdlib only, staged beside `driver.py`): one runner process holds the
program for all tests with the official grader's process state; see `driver.py` for the semantics."""

import ast
import fcntl
import io
import json
import os
import select
import signal
import sys
import time
import traceback
import types

if __package__:  # imported in the repository (tests)
    from evals.livecodebench.driver_common import (
        ERR_TAIL,
        MODULE_NAME,
        PRELUDE,
        error_tail,
        exit_verdict,
        typed,
        wait_for_threads,
    )
else:  # in the sandbox: flat files beside driver.py, which puts their folder on sys.path
    from driver_common import ERR_TAIL, MODULE_NAME, PRELUDE, error_tail, exit_verdict, typed, wait_for_threads

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
