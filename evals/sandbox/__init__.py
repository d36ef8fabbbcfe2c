"""Run hostile, model-written programs: rlimits + namespaces (bubblewrap) + grader-side time/output caps, with
this project's interpreter (`interpreter`); below bubblewrap only by explicit opt-in (`SandboxUnavailable`)."""

from evals.sandbox.limits import Limits, SandboxResult
from evals.sandbox.runner import Sandbox, SandboxUnavailable

__all__ = ["Limits", "Sandbox", "SandboxResult", "SandboxUnavailable"]
