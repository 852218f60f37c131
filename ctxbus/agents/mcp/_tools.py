"""The six tools an MCP client gets: `agents.tools`' bodies, each run as a recorded call.

The bodies (`BuiltinTools`) are shared with the agent loop; here each is wrapped so the
MCP SDK sees the same signature (its parameters' schemas, its docstring) and every call
goes through `ToolCalls`, which records it and returns a tagged `CallToolResult`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from mcp.types import CallToolResult

from ctxbus.agents.mcp._calls import ToolCalls
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import BUILTIN_TOOLS, PROPOSE_DEADLINE, Archive, BuiltinTools

__all__ = ["AgentTools", "MCP_PROPOSE_DEADLINE"]

MCP_PROPOSE_DEADLINE: Final = PROPOSE_DEADLINE
"""Seconds `brief_propose` waits for a coordinator: shorter than the agent's own
`agents.brief.DEFAULT_PROPOSE_DEADLINE`, to stay well inside clients' tool timeouts."""

Tool = Callable[..., Awaitable[CallToolResult]]


class AgentTools:
    """The built-in tool bodies bound to one `Agent`, each run through `ToolCalls`."""

    brief_get: Tool
    brief_propose: Tool
    ctx_search: Tool
    ctx_read: Tool
    ctx_reduce: Tool
    ctx_status: Tool

    def __init__(
        self,
        agent: Agent,
        calls: ToolCalls,
        *,
        propose_deadline: float = MCP_PROPOSE_DEADLINE,
        archives: Sequence[Archive] = (),
    ) -> None:
        self._agent = agent
        self._bodies = BuiltinTools(agent, propose_deadline=propose_deadline, archives=archives)
        for name in BUILTIN_TOOLS:
            setattr(self, name, _recorded(name, getattr(self._bodies, name), calls))

    def __repr__(self) -> str:
        return f"<AgentTools of {self._agent!r}>"

    def brief_text(self) -> str:
        """The brief as the pinned context block renders it, with its hash."""
        return self._bodies.brief_text()


def _recorded(name: str, body: Callable[..., Awaitable[str]], calls: ToolCalls) -> Tool:
    """`body` as an MCP tool: the same parameters and description, run by `calls`."""
    signature = inspect.signature(body, eval_str=True)

    async def tool(*args: Any, **kwargs: Any) -> CallToolResult:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return await calls.run(name, dict(bound.arguments), lambda: body(*bound.args, **bound.kwargs))

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = body.__doc__
    tool.__signature__ = signature.replace(return_annotation=CallToolResult)  # type: ignore[attr-defined]
    return tool
