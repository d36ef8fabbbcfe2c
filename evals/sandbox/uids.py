"""One unprivileged uid per concurrent sandbox run (when the grader is root).

RLIMIT_NPROC counts every process of a uid system-wide, user namespaces included. With one shared uid
(e.g. nobody) a fork bomb in one sandbox would starve every other sandbox running at the same time and
fail correct programs there. So each run leases its own uid from a dedicated range, held with an
advisory lock file, for as long as it runs; inside the bwrap sandbox it still appears as 65534. A uid
whose processes from an earlier run are still being torn down is skipped: they would count too.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

UID_BASE = 1_900_000  # far above any login or system account and the usual /etc/subuid ranges
UID_SLOTS = 512


def _lock_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), "sandbox-uid-locks")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def uid_has_processes(uid: int) -> bool:
    """Any process (zombies included) owned by `uid`? /proc/<pid> belongs to the process's effective uid."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    return True
            except OSError:
                continue
    return False


@contextmanager
def lease_uid() -> Iterator[int | None]:
    """Yields a uid no other sandbox holds (root), or None (not root: the sandbox runs as the grader's user)."""
    if os.geteuid() != 0:
        yield None
        return
    lock_dir = _lock_dir()
    for slot in range(UID_SLOTS):
        uid = UID_BASE + slot
        fd = os.open(os.path.join(lock_dir, str(uid)), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if uid_has_processes(uid):
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)  # releases the lock
        return
    raise RuntimeError(f"all {UID_SLOTS} sandbox uids are in use; too many concurrent sandbox runs")
