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

The interpreter is this project's own (`evals.sandbox.interpreter`), mounted read-only at its own paths. When
the grader is root and the leased uid cannot reach it by path (a pyenv Python under /root), its directories
are first bind-mounted onto world-traversable stage directories in a private mount namespace made by root
(`unshare --mount`), and privileges are dropped (`setpriv`) before bubblewrap starts; at the `unshare` level
a small tmpfs covers the unreachable ancestor (e.g. /root) and the directories are bound back at their paths.
The `process` level cannot do either and refuses such an interpreter.

This module only builds the commands; choosing a level (`auto`) starts a probe program, so that lives with
the runner (`evals.sandbox.runner.resolve_level`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping

from evals.sandbox.limits import Limits

LEVELS = ("bwrap", "unshare", "process")
NOBODY = 65534
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
TOP_LEVEL_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Numerical libraries start one thread per core on import; on a many-core machine that alone would exceed
# RLIMIT_NPROC. One thread each, at every level (the official grader also sets OMP_NUM_THREADS=1).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def _python_binds(dirs: list[str], staged: Mapping[str, str]) -> list[str]:
    """Read-only binds of the interpreter's installation dirs at their own paths (from a stage if staged)."""
    out = []
    for d in dirs:
        out += ["--ro-bind", staged.get(d, d), d]
    return out


def staging_commands(staged: Mapping[str, str]) -> list[str]:
    """Shell commands (root, private mount namespace) binding each dir read-only onto its stage directory."""
    cmds = []
    for src, stage in staged.items():
        cmds += [
            f"mount --bind {shlex.quote(src)} {shlex.quote(stage)}",
            f"mount -o remount,bind,ro {shlex.quote(stage)}",
        ]
    return cmds


def setpriv_prefix(uid: int) -> list[str]:
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def staged_bwrap_command(bwrap_argv: list[str], staged: Mapping[str, str], uid: int) -> list[str]:
    """Root only: stage the unreachable interpreter dirs in a private mount namespace, then drop to `uid`
    and start bubblewrap (which binds the stages back at the dirs' own paths)."""
    script = " && ".join([*staging_commands(staged), "exec " + shlex.join(setpriv_prefix(uid) + bwrap_argv)])
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]


# Each sandbox gets private tmpfs mounts over these; an interpreter living below one must be bound back.
PRIVATE_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def under_private_tmp(path: str) -> bool:
    p = os.path.abspath(path)
    return any(p == d or p.startswith(d + "/") for d in PRIVATE_TMP_DIRS)


def blocking_ancestor(path: str) -> str | None:
    """The highest directory on the way to `path` that other users cannot traverse (None: all traversable)."""
    parts = os.path.abspath(path).split("/")
    for i in range(2, len(parts)):
        p = "/".join(parts[:i])
        try:
            if not os.stat(p).st_mode & 0o001:
                return p
        except OSError:
            return p
    return None


def bwrap_command(
    limits: Limits,
    python: str,
    code_dir: str,
    entry: str,
    args: list[str],
    run_id: str,
    python_dirs: list[str] = (),
    staged: Mapping[str, str] | None = None,
) -> list[str]:
    staged = staged or {}
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
    ]
    # after the private /tmp: an interpreter living under /tmp (a checkout there) stays visible at its path
    cmd += _python_binds(list(python_dirs), staged)
    cmd += [
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
        *[x for k, v in THREAD_ENV.items() for x in ("--setenv", k, v)],
        "--",
        python,
        "-I",
        f"/code/{entry}",
        *args,
    ]
    return cmd


def unshare_command(
    limits: Limits,
    python: str,
    code_dir: str,
    entry: str,
    args: list[str],
    run_id: str,
    uid: int,
    staged: Mapping[str, str] | None = None,
) -> list[str]:
    """Root only: namespaces via unshare, private tmpfs dirs via mount, then drop to `uid` with setpriv.

    `staged` dirs (unreachable by `uid`) are bound onto their stages first; a small tmpfs then hides each
    blocking ancestor (e.g. /root) and the dirs are bound back, read-only, at their own paths."""
    size = limits.tmp_size_mb << 20
    staged = staged or {}
    covers = sorted({a for d in staged if (a := blocking_ancestor(d))})
    reveal, reveal_after_tmp = [], []
    for d, stage in staged.items():
        q = shlex.quote(d)
        cmds = [f"mkdir -p {q}", f"mount --bind {shlex.quote(stage)} {q}", f"mount -o remount,bind,ro {q}"]
        (reveal_after_tmp if under_private_tmp(d) else reveal).extend(cmds)
    inner = " && ".join(
        [
            *staging_commands(staged),
            *(f"mount -t tmpfs -o size=1m,mode=755 tmpfs {shlex.quote(a)}" for a in covers),
            *reveal,
            f"mount --bind {shlex.quote(code_dir)} /mnt",
            "mount -o remount,bind,ro /mnt",
            *(f"mount -t tmpfs -o size={size},mode=1777 tmpfs {d}" for d in PRIVATE_TMP_DIRS),
            *reveal_after_tmp,  # an interpreter under /tmp (e.g. a checkout there), staged outside it
            "cd /tmp",
            "exec "
            + shlex.join(
                [
                    *setpriv_prefix(uid),
                    "env",
                    "-i",
                    f"PATH={ENV_PATH}",
                    "HOME=/tmp",
                    "LANG=C.UTF-8",
                    f"SANDBOX_RUN_ID={run_id}",
                    *(f"{k}={v}" for k, v in THREAD_ENV.items()),
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
