"""`ctxbus mcp`: one agent's tools for an MCP client (Claude Code, Cursor, ...), over stdio.

stdout carries the MCP protocol, so this command prints nothing there: logs and errors
go to stderr.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Annotated

import typer

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.mcp import host_context, serve_stdio
from ctxbus.agents.runtime import AgentConfig
from ctxbus.bus import run_async
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import (
    DEFAULT_NATS_URL,
    DomainOption,
    NatsOption,
    agent_store,
    bus_config,
    parse_agent_name,
)

__all__ = ["commands"]

commands = command_set()

_DEFAULT_WINDOW = ContextConfig().window


@commands.command()
def mcp(
    domain: DomainOption,
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            "-a",
            envvar="CTXBUS_AGENT",
            callback=parse_agent_name,
            help=(
                "This agent's name on the task (ASCII letters, digits, '_', '-'). Give each server its own: "
                "a second one on the same store is refused, but two stores under one name are not detected."
            ),
        ),
    ],
    nats: NatsOption = DEFAULT_NATS_URL,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            dir_okay=False,
            help="The agent's SQLite file \\[default: STATE_DIR/agents/USER/SESSION/TASK/AGENT.db].",
        ),
    ] = None,
    window: Annotated[
        int, typer.Option("--window", min=8_192, metavar="TOKENS", help="The client model's context window.")
    ] = _DEFAULT_WINDOW,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help=(
                "Carry on the agent's last session (its context, tags and nudge state). Without it, each start "
                "is a new session with an empty context; the last one's store is kept as AGENT.YYYYMMDDTHHMMSS.db."
            ),
        ),
    ] = False,
) -> None:
    """Serve an agent's brief and context tools to an MCP client over stdio.

    Add it to the client's config as a command, e.g. `ctxbus mcp -d alice/s1/t1 -a claude`.
    Every server on the same domain shares one brief; a coordinator (`ctxbus up`) must run.

    What MCP alone gives: the shared brief, and search and read of what these tools
    returned. The server sees only calls to its own tools, never the host's conversation,
    files or other tools; for Claude Code, `ctxbus hook install` adds that (the user's
    rules kept through compaction, reminders measured on the host's own transcript), and
    with the hooks under the same CTXBUS_DOMAIN and CTXBUS_AGENT, ctx_search and ctx_read
    reach every tool output the hooks recorded.
    """
    from ctxbus.agents.hooks import HooksArchive, hooks_store, set_aside

    bus = bus_config(nats, name=f"ctxbus-mcp-{agent}", domain=domain)
    path = store or agent_store(domain, agent)
    if not resume:
        kept = set_aside(path, time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
        if kept is not None:
            logging.getLogger(__name__).info("new session: the last one's store is kept as %s", kept)
    config = AgentConfig(
        agent_id=agent,
        domain=domain,
        store=path,
        context=host_context(window),
        trusted_signers=bus.credentials.trusted_signers if bus.credentials else (),
    )
    # What Claude Code's hooks record for this agent (`CTXBUS_DOMAIN` / `CTXBUS_AGENT` as
    # these) is beside its default store, whatever `--store` says.
    hooks = HooksArchive(hooks_store(agent_store(domain, agent)), domain)
    run_async(functools.partial(serve_stdio, bus, config, archives=[hooks]))
