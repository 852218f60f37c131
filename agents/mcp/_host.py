"""Channel 2 for an MCP host: the message rides on the tool result being returned."""

from __future__ import annotations

from agents.context import LocalContext
from agents.nudges import SyntheticMessage
from agents.runtime import ContextHost
from schemas import UsageError

__all__ = ["McpHost"]


class McpHost:
    """A `HostAdapter` for a host that owns its conversation.

    An MCP server cannot add a user message to the client's transcript; the only text
    it can put in front of the model is a tool result. So a delivered Channel 2 message
    is recorded in the agent's own context (as `ContextHost` does, so that a process
    taking over after a crash sees it there) and queued for the result of the tool call
    in progress, which `take` empties.

    The `Agent` builds its context itself, so the host is attached after construction.
    """

    def __init__(self) -> None:
        self._record: ContextHost | None = None
        self._outbox: list[str] = []

    def __repr__(self) -> str:
        return f"<McpHost attached={self._record is not None} queued={len(self._outbox)}>"

    def attach(self, context: LocalContext) -> None:
        """Record deliveries in `context` (the agent's own)."""
        self._record = ContextHost(context)

    async def deliver(self, message: SyntheticMessage) -> None:
        await self._recorder().deliver(message)
        self._outbox.append(message.text)

    async def already_delivered(self, directive_id: str) -> bool:
        return await self._recorder().already_delivered(directive_id)

    def take(self) -> list[str]:
        """The messages delivered since the last call, oldest first."""
        taken, self._outbox = self._outbox, []
        return taken

    def _recorder(self) -> ContextHost:
        if self._record is None:
            raise UsageError("McpHost is not attached to the agent's context; call attach() first")
        return self._record
