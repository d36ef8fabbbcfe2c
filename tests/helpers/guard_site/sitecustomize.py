"""Python imports this at startup in test subprocesses (tests/helpers/sandbox_guard.py puts this folder on PYTHONPATH):
under a test, the sandbox's probes and runs are recorded for the conftest's unmarked-test check."""

import os

if os.environ.get("DG_SANDBOX_GUARD_LOG"):
    try:
        from tests.helpers import sandbox_guard
    except ImportError:  # a subprocess without the repo on its path cannot reach the project's sandbox either
        pass
    else:
        sandbox_guard.install()
