"""What a sandboxed run may use, and what came back from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-run bounds. CPU, memory, file-size and process limits are rlimits (per process, inherited);
    wall time and output caps are enforced by the grader from outside."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024  # RLIMIT_AS of every process in the sandbox
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest file any process may write
    max_processes: int = 32  # RLIMIT_NPROC of the unprivileged sandbox user
    max_open_files: int = 64
    stdout_bytes: int = 32 << 20  # grader-side cap; exceeding it kills the run
    stderr_bytes: int = 64 << 10  # kept, not fatal: the tail beyond this is dropped
    tmp_size_mb: int = 64  # size of the private, writable /tmp (the working directory)

    def __post_init__(self):
        for name in (
            "wall_s",
            "cpu_s",
            "memory_mb",
            "file_size_mb",
            "max_processes",
            "max_open_files",
            "stdout_bytes",
            "stderr_bytes",
            "tmp_size_mb",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {getattr(self, name)!r}")


@dataclass
class SandboxResult:
    returncode: int | None  # None when the grader killed the run (time, output cap, early stop)
    stdout: bytes
    stderr: bytes
    wall_s: float
    isolation: str  # "bwrap" | "unshare" | "process": how strongly this run was isolated
    timed_out: bool = False
    output_limited: bool = False
    stopped_early: bool = False  # the caller's `stop_when` asked to end the run
    run_id: str = ""  # SANDBOX_RUN_ID set in the sandboxed environment (lets tests find stray processes)
