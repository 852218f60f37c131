"""Each MCP tool call, as the Agent's context sees it: a call, a tagged result, nudges."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

import anyio
from mcp.types import CallToolResult, TextContent

from ctxbus.agents.mcp._host import McpHost
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import ToolFailure
from ctxbus.schemas import CtxbusError

__all__ = ["ToolCalls", "ToolFailure"]

log = logging.getLogger(__name__)

ToolBody = Callable[[], Awaitable[str]]


class ToolCalls:
    """Runs tool bodies as tool calls of one `Agent`.

    Every call is recorded in the agent's context as an assistant tool call followed by
    its result, so {U, T} grow with what the host's model has read from us. The result
    goes through `Agent.tool_result`, which appends a Channel 1 reminder when one is
    due; a Channel 2 message delivered meanwhile (see `McpHost`) is appended after it.
    Results start with their tag (`§12§`), the handle `ctx_reduce` and `ctx_read` take.

    Caller mistakes and refusals (`CtxbusError`, `ValueError`) become error results;
    anything else is recorded as an internal error and re-raised for the SDK to log.
    """

    def __init__(self, agent: Agent, host: McpHost) -> None:
        self._agent = agent
        self._host = host
        self._finishing = anyio.Lock()

    def __repr__(self) -> str:
        return f"<ToolCalls of {self._agent!r}>"

    async def run(self, name: str, arguments: Mapping[str, object], body: ToolBody) -> CallToolResult:
        """Run `body`, record the call and its result, return the result as the model sees it."""
        agent = self._agent
        # A new call means the host's model ran since our last result: that is the
        # compose at which drops queued by ctx_reduce take effect.
        agent.compose()
        call_id = uuid.uuid4().hex[:16]
        failed = False
        try:
            output = await body()
        except (CtxbusError, ValueError) as exc:
            log.info("%s failed: %s", name, exc)
            output, failed = f"error: {exc}", True
        except Exception:
            self._record_call(name, arguments, call_id)
            agent.context.add("tool", "error: internal error", tool_name=name, call_id=call_id)
            raise
        text = await self._finish(name, arguments, call_id, output)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=failed)

    def _record_call(self, name: str, arguments: Mapping[str, object], call_id: str) -> None:
        call = {"id": call_id, "name": name, "arguments": json.dumps(arguments, default=str)}
        self._agent.assistant("", tool_calls=[call])

    async def _finish(self, name: str, arguments: Mapping[str, object], call_id: str, output: str) -> str:
        # One call at a time from here: the call sits right before its result, the tag
        # read here is the one `tool_result` assigns, and a Channel 2 message rides on
        # the result that delivered it. The call is recorded only now, once the body
        # ran, so ctx_search does not find the call asking it.
        async with self._finishing:
            self._record_call(name, arguments, call_id)
            tag = self._agent.context.next_tag
            text = (await self._agent.tool_result(name, output, call_id=call_id)).text
            delivered = self._host.take()
        return "\n\n".join([f"§{tag}§ {text}", *delivered])
