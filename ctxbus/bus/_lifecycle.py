"""Sync and async context-manager plumbing for things we start and stop as processes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

import anyio
import anyio.to_thread

__all__ = ["ProcessGroup"]


class ProcessGroup(ABC):
    """Something with blocking `start()`/`stop()`, usable with `with` and `async with`.

    The async forms (`astart`, `async with`) run the blocking calls in a worker thread,
    and stop under a shield so a cancelled test still leaves no process behind.
    """

    @abstractmethod
    def start(self) -> Self:
        """Start and wait until ready."""

    @abstractmethod
    def stop(self) -> None:
        """Stop and clean up."""

    async def astart(self) -> Self:
        """`start()` for async code: in a worker thread, so the event loop runs on."""
        return await anyio.to_thread.run_sync(self.start)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)
