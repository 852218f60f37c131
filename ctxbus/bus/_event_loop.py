"""The event loop every ctxbus process runs on: asyncio, through uvloop where installed.

nats-py is asyncio-only, so asyncio it is. On the 2-core machines we measure on, every
proposal and every log entry wakes several processes, and the cost of one trip through
the loop shows directly in commits per second; uvloop's loop makes that trip cheaper
(`docs/ARCHITECTURE.md` §7 has the figures). Set `CTXBUS_NO_UVLOOP=1` to run on the
standard loop, to rule uvloop out when chasing a problem.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, TypeVarTuple

import anyio

__all__ = ["NO_UVLOOP_ENV", "STOP_SIGNALS", "anyio_backend", "event_loop_name", "run_async", "uses_uvloop"]

NO_UVLOOP_ENV: Final = "CTXBUS_NO_UVLOOP"
"""Environment variable: set to a non-empty value other than `0` to keep the standard loop."""

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
"""What stops a ctxbus process cleanly: Ctrl-C, a service manager, and a terminal that
went away (whose SIGHUP would otherwise kill it before it closes what it holds)."""

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def uses_uvloop() -> bool:
    """Whether ctxbus runs on uvloop here: installed, and not turned off."""
    if os.environ.get(NO_UVLOOP_ENV, "") not in ("", "0"):
        return False
    return importlib.util.find_spec("uvloop") is not None


def anyio_backend() -> tuple[str, dict[str, Any]]:
    """anyio's backend name and options, for `anyio.run` and anyio's pytest plugin."""
    return "asyncio", {"use_uvloop": uses_uvloop()}


def run_async(func: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """`anyio.run(func, *args)` on ctxbus's event loop.

    Typed like `anyio.run`, so a type checker matches `args` against `func`'s parameters:
    the CLI's commands pass their options through here, and a mismatch is caught there.
    """
    backend, options = anyio_backend()
    return anyio.run(func, *args, backend=backend, backend_options=options)


def event_loop_name() -> str:
    """`'uvloop'` or `'asyncio'`: the loop running now, for logs and status."""
    loop_module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if loop_module.partition(".")[0] == "uvloop" else "asyncio"
