"""One message of an agent's history, as the local context engine stores and serves it.

The engine keeps its hot copy in a lighter record and builds these models at its edges
(returns from `add`, `tail`, stored-row round trips), so validation runs where data comes in
or leaves, not on every internal move.
"""

from __future__ import annotations

import hashlib
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Message",
    "ToolCall",
    "MessageKind",
    "MessageRole",
    "MessageState",
    "MESSAGE_KINDS",
    "MESSAGE_ROLES",
    "MESSAGE_STATES",
    "content_hash",
    "message_id",
]

MessageRole = Literal["system", "user", "assistant", "tool"]
"""Who spoke, in OpenAI chat terms."""

MessageKind = Literal[
    "chat",
    "task_state",
    "conclusion",
    "knowledge",
    "tool_call",
    "tool_result",
    "reasoning",
    "synthetic",
]
"""What the message is for; drives eviction value and mode projection."""

MessageState = Literal["active", "dropped", "archived"]
"""Lifecycle: shown whole, replaced by a `[dropped §N§]` placeholder, or shown compact."""

MESSAGE_ROLES: tuple[str, ...] = get_args(MessageRole)
MESSAGE_KINDS: tuple[str, ...] = get_args(MessageKind)
MESSAGE_STATES: tuple[str, ...] = get_args(MessageState)


def content_hash(content: str) -> str:
    """16 hex digits of BLAKE2b over the UTF-8 content: stable across processes and runs."""
    return hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def message_id(content: str, tag: int) -> str:
    """The stable id `<content hash>-<tag>`: the hash dedupes, the tag orders and traces."""
    return f"{content_hash(content)}-{tag}"


class ToolCall(BaseModel):
    """One call an assistant turn makes: which tool, with what, under which id.

    Kept as the model produced it, so a rendering for a provider can give it back
    exactly: `arguments` is the raw argument string (usually JSON), not a parsed object,
    since a model may produce arguments that do not parse and the call still happened.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """The call id the model gave it (`call_…`, `toolu_…`); results name it. May be empty
    for hosts whose calls carry no ids; a rendering then makes one up from the tag."""
    name: str = Field(min_length=1)
    """The tool called."""
    arguments: str = "{}"
    """The arguments exactly as the model wrote them, usually a JSON object."""


class Message(BaseModel):
    """A message with everything the context engine knows about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{16}-[1-9][0-9]*$")
    """`<content hash>-<tag>`; see `message_id`. Unique within one agent's store."""
    tag: int = Field(ge=1)
    """The `§N§` number: monotonic per agent, never reused, survives restarts."""
    role: MessageRole
    """Who spoke."""
    kind: MessageKind
    """What the message is for."""
    content: str
    """The full text, verbatim; large tool output is still stored whole here."""
    tool_name: str | None = None
    """Tool that answered (on a result), or that was called (on a call: its first call's;
    every call is in `tool_calls`)."""
    call_id: str | None = None
    """The call a result answers, or a call's id (its first call's; see `tool_calls`)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Every call of an assistant turn, in order; empty on any other message."""
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    """0-1; at 0.8 or more the message is pinned."""
    ttl: float | None = Field(default=None, gt=0)
    """Seconds after `created_at` when the message expires; `None` never expires."""
    created_at: float
    """Unix epoch seconds when the message was recorded."""
    tokens: int = Field(ge=0)
    """Tokens the message costs in the prompt: its content plus its `§N§ ` prefix and its
    calls, counted once at ingest."""
    state: MessageState = "active"
    """Lifecycle state; see `MessageState`."""

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The call ids of a call (one message may make several calls), or the one a result
        answers. A `call_id` stored comma-joined (before `tool_calls`) is split."""
        if self.tool_calls:
            return tuple(call.id for call in self.tool_calls if call.id)
        if not self.call_id:
            return ()
        return tuple(part.strip() for part in self.call_id.split(",") if part.strip())
