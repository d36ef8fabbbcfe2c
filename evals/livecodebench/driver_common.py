"""The in-sandbox driver's shared pieces (stdlib only, staged beside `driver.py`): the limits and prelude both
grading modes share, error tails, thread joins, exit verdicts, stray-process cleanup and the encodings of
returned values (`to_json` for strict mode, `typed` for official mode)."""

import ctypes
import json
import os
import signal
import threading
import traceback

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


def exit_verdict(raw):
    if os.WIFEXITED(raw) and os.WEXITSTATUS(raw) == 0:
        return "ok"
    if os.WIFSIGNALED(raw) and os.WTERMSIG(raw) in (signal.SIGXCPU, signal.SIGKILL):
        return "timeout"  # SIGXCPU at the soft CPU limit, SIGKILL at the hard one
    if os.WIFSIGNALED(raw) and os.WTERMSIG(raw) == signal.SIGXFSZ:
        return "output_limit"
    return "runtime_error"


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
