"""The default Channel 2 host: the agent's own context, in its own SQLite file."""

from __future__ import annotations

from ctxbus.agents.context import LocalContext
from ctxbus.agents.nudges import SyntheticMessage

__all__ = ["ContextHost"]

_STATE_PREFIX = "channel2:"


class ContextHost:
    """Delivers a Channel 2 message by adding it to the agent's context as a synthetic
    user message, and remembers its directive id in the same store, so a process that
    takes over after a crash can tell the message is already there.

    Use it when ctxbus composes the prompt itself (the swarm runner); an MCP host that
    owns its conversation needs its own adapter.
    """

    def __init__(self, context: LocalContext) -> None:
        self._context = context

    async def deliver(self, message: SyntheticMessage) -> None:
        # On the loop's thread, like every other use of the context (see `Agent`).
        self._context.add("user", message.text, kind="synthetic")
        self._context.set_state(_STATE_PREFIX + message.directive_id, str(message.cycle))  # with the message

    async def already_delivered(self, directive_id: str) -> bool:
        return self._context.get_state(_STATE_PREFIX + directive_id) is not None
