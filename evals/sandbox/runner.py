"""Run one untrusted Python program under bubblewrap isolation and capture its output.

The grader side of the sandbox: it writes the program's files into a fresh private directory, starts the
isolated interpreter, enforces the wall-clock limit and the output cap from outside, kills everything
the program started when the run ends (however it ends), and removes the directory. Verdicts are never
computed here: callers judge the captured stdout themselves.

Isolation never silently weakens: when bubblewrap cannot run here, `auto` raises `SandboxUnavailable`
(naming the install command and the opt-in) instead of falling back, and the weaker levels (`unshare`,
`process`) run only with the explicit `allow_weaker=True`; every result records the level it ran at.
"""

from __future__ import annotations

import functools
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping

from evals.sandbox import interpreter, isolation
from evals.sandbox.limits import Limits, SandboxResult
from evals.sandbox.uids import lease_uid

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_AFTER_EXIT_GRACE_S = 1.0  # how long pipes may stay open after the main process exited

INSTALL_HINT = "install bubblewrap (the one system package the sandbox needs): apt-get install -y bubblewrap"
OPT_IN_HINT = (
    "to run model-written code with weaker isolation anyway, opt in explicitly: allow_weaker=True "
    "(eval.sandbox.allow_weaker=true; grading CLI: --allow-weaker-isolation)"
)


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be provided here (and weaker isolation was not explicitly allowed)."""


class Sandbox:
    """Reusable runner: `Sandbox(limits, isolation="auto").run(files, entry)`; one fresh sandbox per call.

    `python`: the interpreter run inside (default: this project's own, `evals.sandbox.interpreter`).
    `allow_weaker`: the explicit opt-in to run below the bubblewrap level (`unshare`, `process`).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        isolation: str = "auto",
        python: str | None = None,
        allow_weaker: bool = False,
    ):
        self.limits = limits or Limits()
        self.python = python or interpreter.default_python()
        self.requested_isolation = isolation
        self.allow_weaker = bool(allow_weaker)
        self._level: str | None = None

    @property
    def isolation(self) -> str:
        if self._level is None:
            self._level = resolve_level(self.requested_isolation, self.python, self.allow_weaker)
        return self._level

    def environment(self) -> dict:
        """The interpreter as programs see it inside this sandbox: path, version, `RECORDED_PACKAGES`
        versions (None: absent), and the isolation level. Probed once per (interpreter, level)."""
        return {**_environment(self.python, self.isolation), "isolation": self.isolation}

    def require_packages(self, packages=interpreter.SOLUTION_PACKAGES) -> dict:
        """`environment()`, after checking that every one of `packages` is there (numpy also imports);
        raises RuntimeError naming what is missing otherwise."""
        env = self.environment()
        missing = [p for p in packages if not env["packages"].get(p)]
        if missing or ("numpy" in packages and env.get("numpy_loads") is not True):
            why = f"lacks {missing}" if missing else f"cannot import numpy ({env.get('numpy_loads')})"
            raise RuntimeError(
                f"the sandbox interpreter {self.python} {why} inside the sandbox; model-written solutions "
                f"need {list(packages)} (declared in evals/sandbox/interpreter.py): install requirements.txt "
                f"into it, or pass another python="
            )
        return env

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
        self._stage_roots: list[str] = []
        try:
            with lease_uid() as uid:
                code_dir, work_dir = self._prepare(root, files, level, uid)
                argv, drops = self._command(level, root, code_dir, entry, list(args), run_id, uid)
                return self._execute(argv, level, root, work_dir, stdin, stop_when, run_id, None if drops else uid)
        finally:
            shutil.rmtree(root, ignore_errors=True)
            for stage_root in self._stage_roots:  # empty mount points outside the namespace
                shutil.rmtree(stage_root, ignore_errors=True)

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
        self, level: str, root: str, code_dir: str, entry: str, args: list[str], run_id: str, uid: int | None
    ) -> tuple[list[str], bool]:
        """(argv, drops_privileges): whether the command itself switches to `uid` (else Popen does)."""
        prefix = isolation.prlimit_prefix(self.limits)
        dirs = interpreter.installation_dirs(self.python)
        unreachable = interpreter.unreachable_dirs(self.python) if uid is not None else []
        staged = {}
        for i, d in enumerate(unreachable):
            staged[d] = os.path.join(root, f"python{i}")
            os.mkdir(staged[d], 0o755)
        if level == "bwrap":
            argv = isolation.bwrap_command(self.limits, self.python, code_dir, entry, args, run_id, dirs, staged)
            if staged:
                return prefix + isolation.staged_bwrap_command(argv, staged, uid), True
            return prefix + argv, False
        if level == "unshare":
            if uid is None:
                raise RuntimeError("the unshare sandbox level needs root")
            hidden = [d for d in dirs if isolation.under_private_tmp(d) and d not in staged]
            if hidden:  # the private /tmp would hide them: stage them outside every private tmp dir
                stage_root = tempfile.mkdtemp(prefix="sandbox-py-", dir="/run")
                self._stage_roots.append(stage_root)
                for i, d in enumerate(hidden):
                    staged[d] = os.path.join(stage_root, f"python{i}")
                    os.mkdir(staged[d], 0o755)
            argv = isolation.unshare_command(self.limits, self.python, code_dir, entry, args, run_id, uid, staged)
            return prefix + argv, True
        if unreachable:
            raise RuntimeError(
                f"the sandbox interpreter {self.python} lives in {unreachable}, which the unprivileged sandbox "
                f"user cannot reach, and the 'process' level cannot mount it; use bubblewrap, or pass a python= "
                f"that other users can read"
            )
        return prefix + isolation.process_command(self.python, code_dir, entry, args), False

    # -- run -----------------------------------------------------------------------------------------

    def _execute(self, argv, level, root, work_dir, stdin, stop_when, run_id, uid) -> SandboxResult:
        lim = self.limits
        popen_kw = _popen_kwargs(level, work_dir, run_id, uid)
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


def _popen_kwargs(level: str, work_dir: str | None, run_id: str, uid: int | None) -> dict:
    """`subprocess.Popen`'s session, user, working directory and (minimal) environment for one run."""
    popen_kw: dict = {"start_new_session": True, "close_fds": True, "cwd": work_dir or "/"}
    if uid is not None:  # else root starts the command, which mounts and then drops to the uid itself
        popen_kw.update(user=uid, group=uid, extra_groups=[])
    if level == "process":
        popen_kw["env"] = {
            "PATH": isolation.ENV_PATH,
            "HOME": work_dir,
            "LANG": "C.UTF-8",
            "SANDBOX_RUN_ID": run_id,
            **isolation.THREAD_ENV,
        }
    else:
        popen_kw["env"] = {"PATH": isolation.ENV_PATH}
    return popen_kw


# -- choosing the isolation level ---------------------------------------------------------------------


_probe_lock = threading.Lock()


@functools.cache
def _probe(level: str, python: str) -> tuple[bool, str]:
    """Can this level start a trivial program with `python` here? (ok, why not). Probed once per process."""
    if level == "bwrap" and not shutil.which("bwrap"):
        return False, "bubblewrap (`bwrap`) is not installed"
    if level == "unshare" and (
        os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "mount"))) or not os.path.isdir("/mnt")
    ):
        return False, "the unshare level needs root and util-linux's unshare, setpriv and mount"
    why = ""
    for _ in range(2):  # one retry: a busy machine should not cost the run its isolation
        try:
            probe = Sandbox(Limits(wall_s=20, cpu_s=5), isolation=level, python=python, allow_weaker=True)
            probe._level = level
            res = probe.run({"probe.py": "print('ok')"}, "probe.py")
        except (OSError, RuntimeError) as exc:
            why = str(exc)
            continue
        if res.returncode == 0 and res.stdout.strip() == b"ok":
            return True, ""
        why = f"its probe program failed: rc={res.returncode} stderr={res.stderr[-300:]!r}"
    return False, why


def level_works(level: str, python: str) -> bool:
    with _probe_lock:  # graders run candidates in threads: probe once, not once per thread
        return _probe(level, python)[0]


def level_problem(level: str, python: str) -> str:
    """Why `level` does not work here ("" when it does)."""
    with _probe_lock:
        return _probe(level, python)[1]


def resolve_level(requested: str, python: str, allow_weaker: bool = False) -> str:
    """The isolation level to run at; never silently below bubblewrap.

    `auto` is bubblewrap when it works here. Otherwise, and for an explicitly named weaker level, it raises
    `SandboxUnavailable` unless `allow_weaker` is set; then it takes the strongest level that works and warns
    (every result records the level).
    """
    if requested != "auto" and requested not in isolation.LEVELS:
        raise ValueError(f"unknown sandbox isolation {requested!r}; choose auto or one of {isolation.LEVELS}")
    if requested in ("auto", "bwrap") and level_works("bwrap", python):
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable(
            f"sandbox isolation 'bwrap' was requested but bubblewrap does not work here: "
            f"{level_problem('bwrap', python)}; {INSTALL_HINT}; {OPT_IN_HINT}"
        )
    if not allow_weaker:
        reason = (
            f"bubblewrap does not work here ({level_problem('bwrap', python)})"
            if requested == "auto"
            else f"isolation {requested!r} is weaker than bubblewrap (a hostile program can write outside its "
            f"directory, leave daemons behind or reach the network)"
        )
        raise SandboxUnavailable(f"refusing to run model-written code: {reason}; {INSTALL_HINT}; {OPT_IN_HINT}")
    candidates = [lv for lv in isolation.LEVELS[1:] if requested == "auto" or lv == requested]
    for level in candidates:
        if level_works(level, python):
            warnings.warn(
                f"sandbox running at the weaker isolation level {level!r} (explicitly allowed); results record "
                f"it. {INSTALL_HINT}",
                RuntimeWarning,
                stacklevel=2,
            )
            return level
    problems = "; ".join(f"{lv}: {level_problem(lv, python)}" for lv in candidates)
    raise SandboxUnavailable(f"no sandbox isolation level works here ({problems}); {INSTALL_HINT}")


@functools.cache
def _environment(python: str, level: str) -> dict:
    probe = Sandbox(Limits(wall_s=60, cpu_s=30, memory_mb=4096), isolation=level, python=python, allow_weaker=True)
    probe._level = level
    res = probe.run({"probe.py": interpreter.PROBE_PROGRAM}, "probe.py")
    try:
        env = json.loads(res.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise RuntimeError(
            f"the sandbox interpreter {python} does not start at level {level!r}: rc={res.returncode} "
            f"stderr={res.stderr[-500:]!r}"
        ) from exc
    env["python"] = python  # as invoked (a virtualenv path), not sys.executable's resolution
    return env


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
