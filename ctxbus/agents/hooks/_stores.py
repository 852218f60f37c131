"""Where the hooks keep what they record, and who else opens it.

An agent's store is `AGENT.db`; an MCP server (or `Agent`) of that name holds it for
as long as it runs. The hooks keep theirs beside it, always: `AGENT.claude-code.db`
(`hooks_store`), so a hook never waits for or races a long-running process, whichever
of them the host starts first. One writer at a time, by the store's lock
(`store_lock`): each hook process for one event, and the agent's MCP server for one
`ctx_search` or `ctx_read` (`HooksArchive`), which is how the host's model reads back
output the hooks archived.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ctxbus.agents.context import LocalContext, SearchHit, StoreError, Tokenizer, UnknownReference
from ctxbus.bus import PidLock
from ctxbus.schemas import Domain

__all__ = ["HooksArchive", "hooks_store", "set_aside", "store_lock"]

_SQLITE_FILES = ("", "-wal", "-shm")

LOCK_WAIT = 5.0
"""Seconds to wait for a store that another process has for one event or one read."""


def hooks_store(store: Path) -> Path:
    """The hooks' store of the agent whose store is `store`: `AGENT.claude-code.db` beside it."""
    return store.with_name(f"{store.stem}.claude-code{store.suffix}")


@contextlib.contextmanager
def store_lock(store: Path, *, wait: float = LOCK_WAIT) -> Iterator[None]:
    """The store's single-writer lock, waited for up to `wait` seconds: its holders
    (a hook, an MCP server reading) keep it for milliseconds.

    :raises StoreError: if it stays held, or cannot be taken.
    """
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory of agent store {store}: {exc.strerror or exc}") from exc
    lock = PidLock(store.with_name(store.name + ".lock"))
    deadline = time.monotonic() + wait
    while True:
        try:
            taken = lock.acquire()
        except OSError as exc:
            raise StoreError(f"cannot lock the agent store {store}: {exc.strerror or exc}") from exc
        if taken:
            break
        if time.monotonic() > deadline:
            raise StoreError(f"the agent store {store} is in use by process {lock.holder()} for over {wait:g} s")
        time.sleep(0.01)
    try:
        yield
    finally:
        lock.release()


class HooksArchive:
    """What Claude Code's hooks recorded for an agent, searched and read by that agent's
    MCP server: its `ctx_search` and `ctx_read` reach the host's own tool output.

    Each call opens the hooks' store for itself alone, under `store_lock` (a search
    indexes new rows first, a read counts the reference), and closes it: the hooks go
    on writing between calls. A store the hooks never wrote is an empty archive.
    """

    label = "Claude Code"
    """Where its hits come from, as the model is told."""

    def __init__(self, path: Path, domain: Domain, *, tokenizer: Tokenizer | None = None) -> None:
        self.path = path
        self._domain = domain
        self._tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"<HooksArchive {self.path}>"

    def search(self, query: str, limit: int) -> list[SearchHit]:
        """BM25-ranked hits, as `LocalContext.search` gives them; none without a store.

        :raises StoreError: if the store cannot be read.
        """
        if not self.path.is_file():
            return []
        with self._open() as context:
            return context.search(query, limit=limit)

    def read(
        self,
        ref: str,
        *,
        lines: tuple[int, int | None] | None = None,
        query: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> str:
        """A recorded message by its id, as `LocalContext.read` gives it.

        :raises UnknownReference: if the archive has no message with that id.
        :raises StoreError: if the store cannot be read.
        """
        if not self.path.is_file():
            raise UnknownReference(f"no message with id {ref!r}: the Claude Code hooks recorded nothing for this agent")
        with self._open() as context:
            return context.read(ref, lines=lines, query=query, offset=offset, limit=limit)

    @contextlib.contextmanager
    def _open(self) -> Iterator[LocalContext]:
        with store_lock(self.path), LocalContext(self.path, self._domain, tokenizer=self._tokenizer) as context:
            yield context


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
