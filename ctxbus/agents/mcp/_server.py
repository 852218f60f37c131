"""The MCP server object: tools, the brief resource, and what the client's model is told."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from ctxbus.agents.mcp._calls import ToolCalls
from ctxbus.agents.mcp._host import McpHost
from ctxbus.agents.mcp._tools import MCP_PROPOSE_DEADLINE, AgentTools
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import Archive
from ctxbus.schemas import UsageError, describe_validation_error

__all__ = ["brief_uri", "build_server"]

_INSTRUCTIONS = """\
You are agent {agent} on task {domain}, one of possibly several agents sharing one task brief.
Read the brief (brief_get, or the resource {uri}) before you start and whenever you need
the goal, constraints, decisions or rejected options. Record what others must know with
brief_propose: decisions, rejected options with the reason, constraints, progress.
Results of these tools start with a tag like §12§. When a result carries a
<system-reminder> about releasable output, call ctx_reduce with the tags you are done with;
ctx_search and ctx_read bring anything back."""

_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
"""brief_get, ctx_search, ctx_read, ctx_status change nothing but the agent's own bookkeeping."""

_PROPOSE = ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False)
"""brief_propose can destroy: `close` makes the coordinator refuse every later op on the
task, for every agent, and `remove_constraint` takes a constraint out of the shared
brief. A client that confirms destructive calls must confirm these. Not idempotent:
without a key, the same op sent twice is two proposals."""


class _Server(MCPServer[Any]):
    """The SDK's server, with its one argument check we cannot move into the tool bodies
    (a required argument left out) said in one sentence rather than pydantic's dump."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            return CallToolResult(
                content=[TextContent(type="text", text=_one_sentence(name, exc.__cause__))], is_error=True
            )


def _one_sentence(tool: str, exc: ValidationError) -> str:
    missing = sorted({str(error["loc"][-1]) for error in exc.errors() if error["type"] == "missing" and error["loc"]})
    if missing:
        names = " and ".join(repr(name) for name in missing)
        return f"error: {tool} needs the argument{'s' if len(missing) > 1 else ''} {names}"
    return f"error: bad arguments to {tool}: {describe_validation_error(exc, show_input=False)}"


def brief_uri(agent: Agent) -> str:
    """`ctxbus://brief/user/session/task`: the brief of the agent's domain."""
    return f"ctxbus://brief/{agent.domain}"


def build_server(
    agent: Agent, *, propose_deadline: float = MCP_PROPOSE_DEADLINE, archives: Sequence[Archive] = ()
) -> MCPServer[Any]:
    """An MCP server whose tools act as `agent`, which must have been built with
    `host_for=McpHost` (Channel 2 messages ride on the tool results).

    :param propose_deadline: seconds `brief_propose` waits for a coordinator.
    :param archives: the agent's other stores that ctx_search and ctx_read reach too
        (what the host's hooks recorded: `agents.hooks.HooksArchive`).
    :raises UsageError: if the agent's host is not an `McpHost`.
    """
    host = agent.host
    if not isinstance(host, McpHost):
        raise UsageError(f"an MCP server needs an agent built with host_for=McpHost, not host {host!r}")
    uri = brief_uri(agent)
    tools = AgentTools(agent, ToolCalls(agent, host), propose_deadline=propose_deadline, archives=archives)
    server: MCPServer[Any] = _Server(
        name="ctxbus",
        title=f"ctxbus agent {agent.id} on {agent.domain}",
        instructions=_INSTRUCTIONS.format(agent=agent.id, domain=agent.domain, uri=uri),
        version=_version(),
    )
    for tool, hints in (
        (tools.brief_get, _READ_ONLY),
        (tools.brief_propose, _PROPOSE),
        (tools.ctx_search, _READ_ONLY),
        (tools.ctx_read, _READ_ONLY),
        (tools.ctx_reduce, ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False)),
        (tools.ctx_status, _READ_ONLY),
    ):
        server.add_tool(tool, description=inspect.getdoc(tool), annotations=hints)

    @server.resource(uri, name="brief", title=f"Task brief of {agent.domain}", mime_type="text/plain")
    def brief() -> str:
        """The shared brief as every agent on the task holds it (read-only; change it with brief_propose)."""
        return tools.brief_text()

    return server


def _version() -> str:
    try:
        return version("ctxbus")
    except PackageNotFoundError:
        return "0"
