"""Run hostile, model-written programs: rlimits + namespaces (bubblewrap) + grader-side time/output caps."""

from evals.sandbox.limits import Limits, SandboxResult
from evals.sandbox.runner import Sandbox

__all__ = ["Limits", "Sandbox", "SandboxResult"]
