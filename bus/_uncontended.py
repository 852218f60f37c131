"""Taking an anyio lock or limiter without a trip through the event loop when it is free.

`Lock.acquire()` and `CapacityLimiter.acquire()` always yield to the event loop (a
checkpoint), even when nothing holds them. Every trip costs a loop iteration and its
`epoll` call; on the proposal path, which takes a limiter and a lock per message, those
trips were a measurable share of the coordinator's time per commit.
"""

from __future__ import annotations

from typing import Protocol

import anyio

__all__ = ["acquire_uncontended"]


class _Acquirable(Protocol):
    def acquire_nowait(self) -> None: ...

    async def acquire(self) -> None: ...


async def acquire_uncontended(primitive: _Acquirable) -> None:
    """`await primitive.acquire()`, minus the checkpoint when it can be taken at once.

    The caller releases it as usual. Cancellation is still honoured while waiting.
    """
    try:
        primitive.acquire_nowait()
    except anyio.WouldBlock:
        await primitive.acquire()
