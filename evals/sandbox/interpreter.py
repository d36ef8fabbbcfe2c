"""Which Python runs sandboxed programs, and which packages it must provide: declared here, once.

The sandbox runs this project's own interpreter (the virtualenv that runs the harness, so the packages of
`requirements.txt`), mounted read-only. Model-written solutions import numpy and friends; the official
LiveCodeBench grader runs them in an environment that has numpy, scipy, networkx, sympy and pandas (and not
sortedcontainers), so those are the `SOLUTION_PACKAGES` the sandbox interpreter must provide. Graders check
them inside the sandbox before grading (`evals.sandbox.runner.Sandbox.environment`) and record the
interpreter, its version and the package versions with every result.

When the grader is root, sandboxed programs run as an unprivileged leased uid, which may not be allowed to
traverse to the interpreter (a virtualenv built on a pyenv Python under /root). `unreachable_dirs` names the
directories that must then be mounted for it (see `evals.sandbox.isolation`).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys

# Packages model-written solutions commonly import; the sandbox interpreter must provide every one of them.
SOLUTION_PACKAGES = ("numpy", "scipy", "networkx", "sympy", "pandas")
# Recorded too (present or absent), because a solution importing it passes or fails on that alone.
RECORDED_PACKAGES = (*SOLUTION_PACKAGES, "sortedcontainers")


def default_python() -> str:
    """This project's interpreter: the one running the harness (its virtualenv, with requirements.txt).

    The path is kept as invoked (not resolved): a virtualenv's `bin/python` is a symlink whose location is
    what makes Python pick up the virtualenv's site-packages.
    """
    if sys.executable and os.access(sys.executable, os.X_OK):
        return sys.executable
    raise RuntimeError("cannot tell which Python runs the harness (sys.executable is empty); pass python=...")


def system_python() -> str:
    """The distribution's /usr/bin/python3 (reachable at every isolation level; usually without numpy)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("no system python3 under /usr")


@functools.cache
def installation(python: str) -> dict:
    """{"prefix", "base_prefix", "executable", "version"} of an interpreter, asked from it (as the grader)."""
    code = (
        "import json, sys; print(json.dumps({'prefix': sys.prefix, 'base_prefix': sys.base_prefix, "
        "'version': sys.version.split()[0]}))"
    )
    try:
        out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True)
        info = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise RuntimeError(f"sandbox interpreter {python!r} does not run: {exc}") from exc
    return {**info, "executable": python}


def installation_dirs(python: str) -> list[str]:
    """The directories the sandbox must expose (read-only) for `python` to run with its packages: its
    virtualenv (if any) and the base installation, as named and where they really are; /usr is always there."""
    info = installation(python)
    found: list[str] = []
    for d in (info["prefix"], info["base_prefix"], os.path.dirname(os.path.abspath(python))):
        for cand in (os.path.abspath(d), os.path.realpath(d)):
            if cand != "/usr" and not cand.startswith("/usr/") and cand not in found:
                found.append(cand)
    return [d for d in found if not any(d.startswith(o + "/") for o in found if o != d)]


def reachable_by_others(path: str) -> bool:
    """Can a user who is neither owner nor group member traverse to `path` and read it?"""
    path = os.path.abspath(path)
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i]) or "/"
        try:
            st = os.stat(p)
        except OSError:
            return False
        need = stat.S_IXOTH | (stat.S_IROTH if p == path else 0)
        if stat.S_ISDIR(st.st_mode) and (st.st_mode & need) != need:
            return False
    return True


def unreachable_dirs(python: str) -> list[str]:
    """The installation dirs an unprivileged (leased) uid could not reach by their paths."""
    return [d for d in installation_dirs(python) if not reachable_by_others(d)]


# The program run inside the sandbox to describe its interpreter (stdlib only; imports numpy to prove it loads).
PROBE_PROGRAM = """
import importlib.metadata as md, json, sys
packages = {}
for name in RECORDED:
    try:
        packages[name] = md.version(name)
    except md.PackageNotFoundError:
        packages[name] = None
try:
    import numpy
    numpy_loads = True
except Exception as exc:
    numpy_loads = repr(exc)
print(json.dumps({"python": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix,
                  "packages": packages, "numpy_loads": numpy_loads}))
""".replace("RECORDED", repr(RECORDED_PACKAGES))


def describe(env: dict) -> str:
    """One line for logs and records, e.g. `/x/.venv/bin/python (Python 3.11.7; numpy 2.4.6, ...)`."""
    pk = ", ".join(f"{k} {v}" if v else f"no {k}" for k, v in env.get("packages", {}).items())
    return f"{env.get('python')} (Python {env.get('version')}; {pk})"
