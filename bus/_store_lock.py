"""One server per store: an exclusive lock on an embedded server's data directory.

nats-server does not lock its JetStream store. Two servers started on one directory
(a second `ctxbus up` on another port, say) each acknowledge writes the other later
overwrites, so acknowledged commits are lost. The lock is taken before the server is
started and handed to it, so it is held for as long as either process lives.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from bus._errors import ServerError

try:
    import fcntl
except ImportError:  # Windows: no flock; the store goes unguarded there
    fcntl = None  # type: ignore[assignment]

__all__ = ["StoreLock"]

LOCK_FILE: Final = "ctxbus.lock"


class StoreLock:
    """An exclusive `flock` on `<data dir>/ctxbus.lock`; the file says who holds it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def fd(self) -> int | None:
        """The locked file's descriptor while held (to pass on to the server process)."""
        return self._fd

    def acquire(self) -> None:
        """Take the lock.

        :raises ServerError: if another process holds it, naming that process.
        """
        if fcntl is None or self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ServerError(
                f"the NATS store {self.path.parent} is in use by another server (pid {holder}); "
                "stop it, or give this one its own directory with --data-dir"
            ) from None
        self._fd = fd

    def record(self, pid: int) -> None:
        """Write the pid of the server that now holds the lock, for the message above."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(pid).encode(), 0)

    def release(self) -> None:
        """Let go of our hold; a server process still running keeps its own."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
