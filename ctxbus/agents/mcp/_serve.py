"""Running one agent's MCP server over stdio, from connect to a clean close."""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence

import anyio
from anyio import TASK_STATUS_IGNORED, CancelScope
from anyio.abc import TaskStatus

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.mcp._host import McpHost
from ctxbus.agents.mcp._server import build_server
from ctxbus.agents.mcp._stdio import run_stdio
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.tools import Archive
from ctxbus.bus import STOP_SIGNALS, BusConfig, close_quietly, connect
from ctxbus.schemas import first_ctxbus_error

__all__ = ["host_context", "serve_stdio"]

log = logging.getLogger(__name__)


def host_context(window: int) -> ContextConfig:
    """Context settings that mirror an MCP host with a `window`-token model.

    The host keeps every tool result whole in its transcript, so nothing is shown in
    compact form (the archive threshold is the window); the full text is still
    searchable and readable.
    """
    return ContextConfig(window=window, archive_threshold=window)


async def serve_stdio(bus: BusConfig, config: AgentConfig, *, archives: Sequence[Archive] = ()) -> None:
    """Serve the agent of `config` on stdin/stdout until the client hangs up or a stop
    signal (SIGINT, SIGTERM, SIGHUP) comes.

    :param archives: the agent's other stores that ctx_search and ctx_read reach too.

    Nothing is written to stdout but MCP messages; logs go to stderr.

    :raises BusUnavailable: if NATS cannot be reached.
    :raises CtxbusError: if the agent cannot join its domain (the first one, when
        several tasks fail together).
    """
    client = await connect(bus)
    try:
        async with Agent.open(client, config, host_for=McpHost) as agent:
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(_cancel_on_signal, tg.cancel_scope)
                    log.info("serving %s on %s over stdio", agent.id, agent.domain)
                    await run_stdio(build_server(agent, archives=archives))
                    tg.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                found = first_ctxbus_error(group)
                if found is None:
                    raise
                raise found from group
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)


async def _cancel_on_signal(scope: CancelScope, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s: stopping", signal.Signals(signum).name)
            scope.cancel()
            return
