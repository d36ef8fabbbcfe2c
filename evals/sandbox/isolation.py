"""How a sandboxed program is started at each isolation level, strongest first.

- "bwrap": bubblewrap run as an unprivileged user (a leased uid when the grader is root, see `uids`;
  else the grader's own user), seen as 65534 inside, in fresh user/pid/net/ipc/uts/mount namespaces: the
  root is a read-only skeleton holding only /usr (the interpreter), the program's files read-only at
  /code, a fresh /proc for its own pid namespace, a minimal /dev and a size-capped private /tmp (its
  working directory). No network, not even the host's loopback. When the run ends its pid namespace dies,
  taking daemons with it.
- "unshare": util-linux `unshare` (root only) for pid/net/ipc/uts/mount namespaces, tmpfs over /tmp,
  /var/tmp and /dev/shm, the files bound read-only at /mnt, then `setpriv` to the leased uid. The rest of the
  filesystem stays visible (world-readable files can be read).
- "process": rlimits, a new session, a clean environment and uid 65534 (when root) only. Network and
  world-readable files are reachable; daemons are hunted by their SANDBOX_RUN_ID afterwards.

The rlimits (`prlimit`) apply at every level; RLIMIT_NPROC only binds because the program never runs as
root (it does not bind root).

This module only builds the commands; choosing a level (`auto`) starts a probe program, so that lives with
the runner (`evals.sandbox.runner.resolve_level`).
"""

from __future__ import annotations

import os
import shlex
import shutil

from evals.sandbox.limits import Limits

LEVELS = ("bwrap", "unshare", "process")
NOBODY = 65534
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
TOP_LEVEL_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def default_python() -> str:
    """The system interpreter (/usr/bin/python3) when present: it lives under /usr, which every level can
    expose to an unprivileged user; the grader's own interpreter may sit in a private home directory."""
    for cand in ("/usr/bin/python3", shutil.which("python3") or ""):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("no python3 interpreter found for the sandbox; pass python=... explicitly")


def prlimit_prefix(limits: Limits) -> list[str]:
    prlimit = shutil.which("prlimit")
    if not prlimit:
        raise RuntimeError("the sandbox needs `prlimit` (util-linux): apt-get install -y util-linux")
    mb = 1 << 20
    return [
        prlimit,
        f"--cpu={limits.cpu_s}",
        f"--as={limits.memory_mb * mb}",
        f"--fsize={limits.file_size_mb * mb}",
        f"--nproc={limits.max_processes}",
        f"--nofile={limits.max_open_files}",
        "--core=0",
        "--",
    ]


def _python_binds(python: str) -> list[str]:
    """Read-only bind of the interpreter's installation when it lives outside /usr."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return []
    prefix = os.path.dirname(os.path.dirname(real))
    return ["--ro-bind", prefix, prefix]


def bwrap_command(limits: Limits, python: str, code_dir: str, entry: str, args: list[str], run_id: str) -> list[str]:
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for d in TOP_LEVEL_SYSTEM_DIRS:
        if os.path.islink(d):
            cmd += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            cmd += ["--ro-bind", d, d]
    cmd += _python_binds(python)
    cmd += [
        "--ro-bind",
        code_dir,
        "/code",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(limits.tmp_size_mb << 20),
        "--tmpfs",
        "/tmp",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--clearenv",
        "--setenv",
        "PATH",
        ENV_PATH,
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "SANDBOX_RUN_ID",
        run_id,
        "--",
        python,
        "-I",
        f"/code/{entry}",
        *args,
    ]
    return cmd


def unshare_command(
    limits: Limits, python: str, code_dir: str, entry: str, args: list[str], run_id: str, uid: int
) -> list[str]:
    """Root only: namespaces via unshare, private tmpfs dirs via mount, then drop to `uid` with setpriv."""
    size = limits.tmp_size_mb << 20
    inner = " && ".join(
        [
            f"mount --bind {shlex.quote(code_dir)} /mnt",
            "mount -o remount,bind,ro /mnt",
            *(f"mount -t tmpfs -o size={size},mode=1777 tmpfs {d}" for d in ("/tmp", "/var/tmp", "/dev/shm")),
            "cd /tmp",
            "exec "
            + shlex.join(
                [
                    "setpriv",
                    f"--reuid={uid}",
                    f"--regid={uid}",
                    "--clear-groups",
                    "--inh-caps=-all",
                    "--bounding-set=-all",
                    "--no-new-privs",
                    "--",
                    "env",
                    "-i",
                    f"PATH={ENV_PATH}",
                    "HOME=/tmp",
                    "LANG=C.UTF-8",
                    f"SANDBOX_RUN_ID={run_id}",
                    python,
                    "-I",
                    f"/mnt/{entry}",
                    *args,
                ]
            ),
        ]
    )
    return [
        "unshare",
        "--fork",
        "--pid",
        "--mount-proc",
        "--net",
        "--ipc",
        "--uts",
        "--mount",
        "--propagation",
        "private",
        "--kill-child",
        "--",
        "/bin/sh",
        "-c",
        inner,
    ]


def process_command(python: str, code_dir: str, entry: str, args: list[str]) -> list[str]:
    return [python, "-I", os.path.join(code_dir, entry), *args]
