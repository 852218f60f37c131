"""The engine's in-memory records: messages with their layer, summary entries, pins.

`Message` (in `schemas`) is the public, validated shape. Internally the engine moves
messages between layers thousands of times per session, so it keeps a mutable slotted
record and builds a `Message` only at its edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from schemas import Message

__all__ = [
    "ChatMessage",
    "ConstraintRecord",
    "Entry",
    "Layer",
    "SummaryEntry",
    "drop_placeholder",
    "eviction_value",
    "LOW_VALUE_KINDS",
]

Layer = Literal["pinned", "rolling", "summary", "gone"]
"""Where a message is: one of the three layers, or out of the prompt for good ("gone")."""

_KIND_VALUE: Final = {
    "conclusion": 1.0,
    "task_state": 0.9,
    "knowledge": 0.9,
    "chat": 0.6,
    "tool_call": 0.4,
    "tool_result": 0.35,
    "reasoning": 0.2,
    "synthetic": 0.05,
}
LOW_VALUE_KINDS: Final = frozenset({"chat", "reasoning", "synthetic"})
"""Kinds that are dropped outright, not summarized, once expired with low importance."""


def drop_placeholder(tag: int) -> str:
    """What a dropped message shows instead of its content: exactly ``[dropped §N§]``.

    Defined once, here: the tail walk (`agents.nudges`) must recognise it byte for byte.
    """
    return f"[dropped §{tag}§]"


@dataclass(slots=True, eq=False)
class Entry:
    """One message plus where it lives; see `Message` for the field meanings."""

    tag: int
    id: str
    role: str
    kind: str
    content: str
    tool_name: str | None
    call_id: str | None
    importance: float
    ttl: float | None
    created_at: float
    tokens: int
    state: str = "active"
    layer: Layer = "rolling"
    unit: int = 0
    """Tag of the first message of its tool call/result unit (its own tag if alone)."""
    pin: str = ""
    """"" (not pinned), "soft" (may be demoted) or "hard" (a constraint, pinned whole)."""
    compact: str | None = None
    """What the prompt shows instead of the content when archived or dropped."""
    compact_tokens: int = 0
    refs: int = 0
    """How often later turns, reads or searches referred to this message."""
    shown_tokens: int = field(default=0, init=False)
    """Tokens of `shown`, kept in step with `compact` (a plain attribute: compose sums it
    over thousands of messages). Set by whoever builds the entry; see `sync_tokens`."""
    chat: ChatMessage | None = field(default=None, init=False, repr=False)
    """The cached chat message; None until first rendered or after `set_compact`."""

    def sync_tokens(self) -> Entry:
        """Set `shown_tokens` from the stored fields (after loading a row)."""
        self.shown_tokens = self.compact_tokens if self.compact is not None else self.tokens
        return self

    @property
    def shown(self) -> str:
        """The text this message contributes to the prompt."""
        if self.compact is not None:
            return self.compact
        return f"§{self.tag}§ {self.content}"

    def set_compact(self, text: str, tokens: int) -> None:
        """Show `text` (counted as `tokens`) instead of the content from now on."""
        self.compact = text
        self.compact_tokens = self.shown_tokens = tokens
        self.chat = None

    def chat_message(self) -> ChatMessage:
        """This entry as an OpenAI-style message: built once, shared read-only by composes."""
        if self.chat is None:
            fields = {"role": self.role, "content": self.shown}
            if self.role == "tool" and self.call_id:
                fields["tool_call_id"] = self.call_id
            self.chat = ChatMessage(fields)
        return self.chat

    def expired(self, now: float) -> bool:
        """Whether the message's ttl has run out at `now`."""
        return self.ttl is not None and self.created_at + self.ttl <= now

    def to_message(self) -> Message:
        """The public model of this message (fields already validated at ingest)."""
        return Message.model_construct(
            id=self.id,
            tag=self.tag,
            role=self.role,
            kind=self.kind,
            content=self.content,
            tool_name=self.tool_name,
            call_id=self.call_id,
            importance=self.importance,
            ttl=self.ttl,
            created_at=self.created_at,
            tokens=self.tokens,
            state=self.state,
        )


class ChatMessage(dict[str, str]):
    """A composed message. Read-only because composes share it: copy with `dict(m)` to edit.

    A plain `dict` subclass, so JSON encoders and chat clients take it as is; sharing
    spares a compose one allocation per message of a long history.
    """

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("composed messages are shared and read-only; copy one with dict(message) to change it")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]


@dataclass(slots=True, eq=False)
class SummaryEntry:
    """One entry of the summary layer, covering messages `first_tag`..`last_tag`."""

    id: int
    first_tag: int
    last_tag: int
    text: str
    tokens: int


@dataclass(slots=True, eq=False)
class ConstraintRecord:
    """The constraint sentences of one message, verbatim, kept in the pinned layer.

    Used when the message itself is not pinned whole: it was too long, or it was
    demoted under pressure. Hard constraints are never dropped silently.
    """

    source_tag: int
    text: str
    tokens: int

    @property
    def shown(self) -> str:
        """The text the pinned layer shows."""
        return self.text


def eviction_value(entry: Entry, newest_tag: int) -> float:
    """How much keeping `entry` in rolling is worth: kind, importance, references, age."""
    if entry.state == "dropped":
        return 0.0
    value = _KIND_VALUE.get(entry.kind, 0.5) * (0.5 + entry.importance) + 0.3 * min(entry.refs, 3)
    if entry.role == "user":
        value += 0.2
    return value / (1.0 + (newest_tag - entry.tag) / 500.0)
