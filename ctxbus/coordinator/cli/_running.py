"""Running a command until Ctrl-C: signals caught from the start, one-line errors.

Kept apart from `_common`, which `_app` imports before `main` runs, so that what the
command modules import stays out of the way of `main`'s Ctrl-C handling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

import anyio

from ctxbus.bus import STOP_SIGNALS
from ctxbus.schemas import first_ctxbus_error

__all__ = ["INTERRUPTED", "one_error", "until_signal"]

INTERRUPTED: Final = 130
"""Exit code of a command that a signal stopped before it was done (128 + SIGINT, as shells do)."""


async def until_signal(body: Callable[[], Awaitable[object]]) -> bool:
    """Run `body` to its end (True), or until a stop signal (False): then cancel it.

    The signals are caught before `body` starts anything, and for as long as it cleans
    up after the cancellation: a Ctrl-C while it starts a server lets it stop that
    server, where Python's KeyboardInterrupt would unwind past the cleanup and leave the
    server running. A failure of `body` is raised as itself, not inside an exception group.
    """
    failures: list[Exception] = []
    finished = False
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                nonlocal finished
                try:
                    await body()
                    finished = True
                except Exception as exc:  # raised below, outside the task group
                    failures.append(exc)
                tg.cancel_scope.cancel()

            tg.start_soon(run)
            async for _ in signals:  # later signals are caught, and ignored, until cleanup ends
                tg.cancel_scope.cancel()
                break
    if failures:
        raise failures[0]
    return finished


@contextlib.contextmanager
def one_error() -> Iterator[None]:
    """Raise a task group's `CtxbusError` in place of the group, so that the user gets
    its one-line message instead of the group's traceback."""
    try:
        yield
    except BaseExceptionGroup as group:
        found = first_ctxbus_error(group)
        if found is None:
            raise
        raise found from group
