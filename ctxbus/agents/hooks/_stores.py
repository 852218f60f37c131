"""Starting an agent afresh: its store set aside, not deleted."""

from __future__ import annotations

import os
from pathlib import Path

from ctxbus.agents.context import StoreError
from ctxbus.bus import PidLock

__all__ = ["set_aside"]

_SQLITE_FILES = ("", "-wal", "-shm")


def set_aside(store: Path, label: str) -> Path | None:
    """Move the agent store `store` (with its WAL files) to `STEM.<label>.db` beside it,
    so the next open starts empty; returns where it went, or None if there was none.

    :raises StoreError: if a process has the store open (its lock is held), or the
        files cannot be moved.
    """
    if not store.is_file():
        return None
    lock = PidLock(store.with_name(store.name + ".lock"))
    try:
        if not lock.acquire():
            raise StoreError(f"the store {store} is in use by process {lock.holder()}: stop it first")
        kept = store.with_name(f"{store.stem}.{label}{store.suffix}")
        for suffix in _SQLITE_FILES:
            old = Path(f"{store}{suffix}")
            if old.exists():
                os.replace(old, Path(f"{kept}{suffix}"))
        return kept
    except OSError as exc:
        raise StoreError(f"cannot set the store {store} aside: {exc.strerror or exc}") from exc
    finally:
        lock.release()
