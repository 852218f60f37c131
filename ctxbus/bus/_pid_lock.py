"""One process per file: an exclusive lock whose file names the process holding it.

Two things must have a single owner and do not lock themselves. nats-server does not
lock its JetStream store: two servers started on one directory (a second `ctxbus up`
on another port, say) each acknowledge writes the other later overwrites. And an
agent's context store: two `ctxbus mcp` under one agent name would write the same tags.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; the files go unguarded there
    fcntl = None  # type: ignore[assignment]

__all__ = ["PidLock"]


class PidLock:
    """An exclusive `flock` on `path`; the file holds the pid of its holder, for the
    message of whoever finds it taken. Released when the descriptor closes, so a
    process that dies lets go at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def fd(self) -> int | None:
        """The locked file's descriptor while held (to pass on to a child process)."""
        return self._fd

    def acquire(self) -> bool:
        """Take the lock and record our pid in it; False if another process holds it
        (`holder()` then says which)."""
        if fcntl is None or self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        self.record(os.getpid())
        return True

    def holder(self) -> str:
        """The pid the lock file names ("unknown" if it names none)."""
        try:
            return self.path.read_text(errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"

    def record(self, pid: int) -> None:
        """Name `pid` as the holder: a child process the lock was passed on to."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(pid).encode(), 0)

    def release(self) -> None:
        """Let go of our hold; a child process it was passed on to keeps its own."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
