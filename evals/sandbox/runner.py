"""Run one untrusted Python program under the strongest isolation available and capture its output.

The grader side of the sandbox: it writes the program's files into a fresh private directory, starts the
isolated interpreter, enforces the wall-clock limit and the output cap from outside, kills everything
the program started when the run ends (however it ends), and removes the directory. Verdicts are never
computed here: callers judge the captured stdout themselves.
"""

from __future__ import annotations

import functools
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Mapping

from evals.sandbox import isolation
from evals.sandbox.isolation import default_python
from evals.sandbox.limits import Limits, SandboxResult
from evals.sandbox.uids import lease_uid

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_AFTER_EXIT_GRACE_S = 1.0  # how long pipes may stay open after the main process exited


class Sandbox:
    """Reusable runner: `Sandbox(limits, isolation="auto").run(files, entry)`; one fresh sandbox per call."""

    def __init__(self, limits: Limits | None = None, isolation: str = "auto", python: str | None = None):
        self.limits = limits or Limits()
        self.python = python or default_python()
        self.requested_isolation = isolation
        self._level: str | None = None

    @property
    def isolation(self) -> str:
        if self._level is None:
            self._level = resolve_level(self.requested_isolation, self.python)
        return self._level

    def run(
        self,
        files: Mapping[str, str | bytes],
        entry: str,
        args: list[str] | tuple[str, ...] = (),
        stdin: bytes = b"",
        stop_when: Callable[[bytes], bool] | None = None,
    ) -> SandboxResult:
        """Run `python -I <entry> *args` with `files` (flat names) read-only beside it.

        `stop_when(line)` sees each complete stdout line as it arrives; returning True ends the run at
        once (e.g. the first failed test), reported as `stopped_early`.
        """
        if entry not in files:
            raise ValueError(f"entry {entry!r} is not among the sandbox files {sorted(files)}")
        level = self.isolation
        run_id = uuid.uuid4().hex
        root = tempfile.mkdtemp(prefix="sandbox-")
        try:
            with lease_uid() as uid:
                code_dir, work_dir = self._prepare(root, files, level, uid)
                argv = self._command(level, code_dir, entry, list(args), run_id, uid)
                return self._execute(argv, level, root, work_dir, stdin, stop_when, run_id, uid)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # -- setup ---------------------------------------------------------------------------------------

    def _prepare(
        self, root: str, files: Mapping[str, str | bytes], level: str, uid: int | None
    ) -> tuple[str, str | None]:
        """Files go in root/code (read-only to the program); `process` also gets a writable root/work."""
        os.chmod(root, 0o711)  # the unprivileged sandbox user may traverse, not list
        code_dir = os.path.join(root, "code")
        os.mkdir(code_dir)
        for name, content in files.items():
            if not _SAFE_NAME.match(name) or name in (".", ".."):
                raise ValueError(f"sandbox file name {name!r} must be a plain file name")
            data = content.encode() if isinstance(content, str) else bytes(content)
            path = os.path.join(code_dir, name)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o444)
        os.chmod(code_dir, 0o555)
        work_dir = None
        if level == "process":
            work_dir = os.path.join(root, "work")
            os.mkdir(work_dir, 0o700)
            if uid is not None:
                os.chown(work_dir, uid, uid)
        return code_dir, work_dir

    def _command(
        self, level: str, code_dir: str, entry: str, args: list[str], run_id: str, uid: int | None
    ) -> list[str]:
        prefix = isolation.prlimit_prefix(self.limits)
        if level == "bwrap":
            return prefix + isolation.bwrap_command(self.limits, self.python, code_dir, entry, args, run_id)
        if level == "unshare":
            if uid is None:
                raise RuntimeError("the unshare sandbox level needs root")
            return prefix + isolation.unshare_command(self.limits, self.python, code_dir, entry, args, run_id, uid)
        return prefix + isolation.process_command(self.python, code_dir, entry, args)

    # -- run -----------------------------------------------------------------------------------------

    def _execute(self, argv, level, root, work_dir, stdin, stop_when, run_id, uid) -> SandboxResult:
        lim = self.limits
        popen_kw: dict = {"start_new_session": True, "close_fds": True, "cwd": work_dir or "/"}
        if uid is not None and level in ("bwrap", "process"):  # `unshare` needs root to mount; setpriv drops later
            popen_kw.update(user=uid, group=uid, extra_groups=[])
        if level == "process":
            popen_kw["env"] = {
                "PATH": isolation.ENV_PATH,
                "HOME": work_dir,
                "LANG": "C.UTF-8",
                "SANDBOX_RUN_ID": run_id,
            }
        else:
            popen_kw["env"] = {"PATH": isolation.ENV_PATH}
        stdin_f = None
        if stdin:
            stdin_path = os.path.join(root, "stdin")
            with open(stdin_path, "wb") as f:
                f.write(stdin)
            stdin_f = open(stdin_path, "rb")  # closed below; a file, not a pipe: no deadlock on big input
        out, err = bytearray(), bytearray()
        timed_out = output_limited = stopped = False
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=stdin_f or subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_kw
        )
        try:
            if stdin_f:
                stdin_f.close()
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ, "out")
            sel.register(proc.stderr, selectors.EVENT_READ, "err")
            deadline = t0 + lim.wall_s
            exited_at = None
            scanned = 0
            while sel.get_map():
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > _AFTER_EXIT_GRACE_S:
                    break  # a stray process holds the pipes open; it is killed below
                for key, _ in sel.select(timeout=min(0.05, deadline - now)):
                    chunk = os.read(key.fileobj.fileno(), 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                    elif key.data == "err":
                        err += chunk[: max(0, lim.stderr_bytes - len(err))]
                    else:
                        out += chunk
                        if len(out) > lim.stdout_bytes:
                            output_limited = True
                            del out[lim.stdout_bytes :]
                        elif stop_when is not None:
                            while (nl := out.find(b"\n", scanned)) >= 0:
                                line, scanned = bytes(out[scanned:nl]), nl + 1
                                if stop_when(line):
                                    stopped = True
                                    break
                if output_limited or stopped:
                    break
            sel.close()
            if not (timed_out or output_limited or stopped):  # pipes closed; the program may still run
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            killed = _kill_run(proc, run_id)
            proc.stdout.close()
            proc.stderr.close()
        finished = not (timed_out or output_limited or stopped)
        return SandboxResult(
            returncode=proc.returncode if finished and not killed else None,
            stdout=bytes(out),
            stderr=bytes(err),
            wall_s=time.monotonic() - t0,
            isolation=level,
            timed_out=timed_out,
            output_limited=output_limited,
            stopped_early=stopped,
            run_id=run_id,
        )


# -- choosing the isolation level ---------------------------------------------------------------------


@functools.cache
def level_works(level: str, python: str) -> bool:
    """Probe once per process: can this level start a trivial program here?"""
    if level == "bwrap" and not shutil.which("bwrap"):
        return False
    if level == "unshare" and (
        os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "mount"))) or not os.path.isdir("/mnt")
    ):
        return False
    for _ in range(2):  # one retry: a busy machine should not silently cost the run its isolation
        probe = Sandbox(Limits(wall_s=20, cpu_s=5), isolation=level, python=python)
        res = probe.run({"probe.py": "print('ok')"}, "probe.py")
        ok = res.returncode == 0 and res.stdout.strip() == b"ok"
        if ok:
            break
    if not ok:
        warnings.warn(
            f"sandbox level {level!r} failed its probe: rc={res.returncode} stderr={res.stderr[-300:]!r}",
            RuntimeWarning,
            stacklevel=2,
        )
    return ok


def resolve_level(requested: str, python: str) -> str:
    """`auto` picks the strongest level that works here and warns when that is not bwrap."""
    if requested != "auto":
        if requested not in isolation.LEVELS:
            raise ValueError(f"unknown sandbox isolation {requested!r}; choose auto or one of {isolation.LEVELS}")
        return requested
    for level in isolation.LEVELS:
        if level == "process" or level_works(level, python):
            if level != "bwrap":
                warnings.warn(
                    f"bubblewrap sandbox unavailable (apt-get install -y bubblewrap); "
                    f"falling back to weaker isolation {level!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return level
    raise AssertionError("unreachable")


def _kill_run(proc: subprocess.Popen, run_id: str) -> bool:
    """Kill the launcher's process group and every process carrying this run's id; True if the main
    process had to be killed. bwrap/unshare runs also die with their pid namespace; the id hunt is what
    catches daemons at the `process` level (and anything that slipped out anywhere)."""
    killed = proc.poll() is None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for _ in range(3):  # a forking daemon may spawn while we scan: repeat until none is found
        if not kill_tagged_processes(run_id):
            break
    return killed


def tagged_processes(run_id: str) -> list[int]:
    """Pids whose environment carries SANDBOX_RUN_ID=<run_id> (readable for our own or, as root, any user)."""
    needle = f"SANDBOX_RUN_ID={run_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def kill_tagged_processes(run_id: str) -> int:
    pids = tagged_processes(run_id)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(pids)
