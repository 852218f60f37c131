"""Channel 2 for an MCP host: the message rides on the tool result being returned."""

from __future__ import annotations

from ctxbus.agents.context import LocalContext
from ctxbus.agents.nudges import SyntheticMessage
from ctxbus.agents.runtime import ContextHost

__all__ = ["McpHost"]


class McpHost:
    """A `HostAdapter` for a host that owns its conversation.

    An MCP server cannot add a user message to the client's transcript; the only text
    it can put in front of the model is a tool result. So a delivered Channel 2 message
    is recorded in the agent's own context (as `ContextHost` does, so that a process
    taking over after a crash sees it there) and queued for the result of the tool call
    in progress, which `take` empties.

    The `Agent` builds its context itself, so it builds its host too: pass the class
    as the agent's host factory, `Agent.open(client, config, host_for=McpHost)`.
    """

    def __init__(self, context: LocalContext) -> None:
        """:param context: the agent's own context, where deliveries are recorded."""
        self._record = ContextHost(context)
        self._outbox: list[str] = []

    def __repr__(self) -> str:
        return f"<McpHost queued={len(self._outbox)}>"

    async def deliver(self, message: SyntheticMessage) -> None:
        await self._record.deliver(message)
        self._outbox.append(message.text)

    async def already_delivered(self, directive_id: str) -> bool:
        return await self._record.already_delivered(directive_id)

    def take(self) -> list[str]:
        """The messages delivered since the last call, oldest first."""
        taken, self._outbox = self._outbox, []
        return taken
