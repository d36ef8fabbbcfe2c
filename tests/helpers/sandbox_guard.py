"""Which tests reach the sandbox: the conftest fails every one that does without the `sandbox` mark (issue 54: an
unmarked test that builds a grading eval goes red wherever bubblewrap is missing, and CI, which has it, never shows).

"Reaching" is what depends on this machine's isolation: choosing a level by probing it (`level_works`,
`level_problem`: `auto`, `bwrap`, or a weaker level allowed by `allow_weaker`) or running a program (`Sandbox.run`).
A refusal that needs no probe (a weaker level without the opt-in) is not reaching it. The wrappers go in in-process
(`install`, from the conftest) and in Python subprocesses whose environment keeps `SITE_DIR` on PYTHONPATH and
`LOG_VAR` (`app_env()`, and any `{**os.environ, ...}`), where `SITE_DIR/sitecustomize.py` installs them. Either way
each reach appends a line to the file `LOG_VAR` names, a fresh one per test, which the conftest reads after each
phase of the test. A test that hides bubblewrap from the sandbox itself (tests/test_sandbox.py's `no_bwrap`) depends
on nothing installed: it unsets `LOG_VAR`, and says so.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

LOG_VAR = "DG_SANDBOX_GUARD_LOG"
SITE_DIR = Path(__file__).with_name("guard_site")
UNMARKED = "reached the sandbox ({}) but is not marked `sandbox`: mark it @pytest.mark.sandbox (it needs bubblewrap)"


def install() -> None:
    """Wrap the sandbox's probes and its run (once per process) so that each call is logged first (`reached`)."""
    from evals.sandbox import runner

    if getattr(runner, "_guard_installed", False):
        return
    runner._guard_installed = True

    def wrap(owner, name: str, what: Callable[..., str]) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def wrapped(*args, **kwargs):
            reached(what(*args))
            return inner(*args, **kwargs)

        setattr(owner, name, wrapped)

    wrap(runner, "level_works", lambda level, *_: f"probes isolation {level!r}")
    wrap(runner, "level_problem", lambda level, *_: f"probes isolation {level!r}")
    wrap(runner.Sandbox, "run", lambda box, *_: "Sandbox.run")


def reached(what: str) -> None:
    """Append the reach to the file `LOG_VAR` names (the running test's; nothing outside a test)."""
    if path := os.environ.get(LOG_VAR):
        with open(path, "a") as f:
            f.write(what + "\n")
