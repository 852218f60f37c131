"""Serving MCP over stdio so that a signal stops the server at once.

The MCP SDK reads stdin in a worker thread; see `run_stdio`.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

__all__ = ["run_stdio"]

_STDIN = 0


async def run_stdio(server: MCPServer[Any]) -> None:
    """`server.run_stdio_async()`, which a cancellation (a signal) ends at once.

    The MCP SDK reads stdin in a worker thread, and nothing interrupts a thread blocked
    in `read`: cancelled, the server would wait for the client's next line or hang-up.
    So when stdin may stay silent for good (a pipe, a socket, a terminal), fd 0 becomes
    the read end of a pipe of ours, fed from the real stdin by a task that waits in the
    event loop. Cancelled, or at the real end of file, the task closes the pipe, and
    the SDK's thread reads an end of file. A file or /dev/null ends by itself: left as is.
    """
    if sys.platform == "win32" or not _may_stay_silent(_STDIN):
        await server.run_stdio_async()
        return
    wire = os.dup(_STDIN)
    read_end, write_end = os.pipe()
    writing = True

    def hang_up() -> None:
        nonlocal writing
        if writing:
            writing = False
            os.close(write_end)

    try:
        os.dup2(read_end, _STDIN)
        os.close(read_end)
        os.set_blocking(write_end, False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_copy, wire, write_end, hang_up)
            await server.run_stdio_async()
            tg.cancel_scope.cancel()
    finally:
        hang_up()
        os.dup2(wire, _STDIN)  # the real stdin back in place
        os.close(wire)


def _may_stay_silent(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


async def _copy(source: int, sink: int, hang_up: Callable[[], None]) -> None:
    """Copy `source` into the non-blocking `sink` until end of file; then, or when
    cancelled, `hang_up()`."""
    try:
        while True:
            await anyio.wait_readable(source)
            try:
                chunk = memoryview(os.read(source, 65536))  # readable: returns without blocking
            except OSError:  # EIO: the terminal went away
                return
            if not chunk:
                return
            while chunk:
                await anyio.wait_writable(sink)
                try:
                    chunk = chunk[os.write(sink, chunk) :]
                except BlockingIOError:  # the SDK's reader took less than we were told
                    continue
    finally:
        hang_up()
