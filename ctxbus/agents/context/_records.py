"""The engine's in-memory records: messages with their layer, summary entries, pins.

`Message` (in `schemas`) is the public, validated shape. Internally the engine moves
messages between layers thousands of times per session, so it keeps a mutable slotted
record and builds a `Message` only at its edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ctxbus.agents.context._calls import EMPTY_ARGUMENTS, Call
from ctxbus.schemas import Message

__all__ = [
    "ChatMessage",
    "ConstraintRecord",
    "Entry",
    "ReadOnly",
    "Layer",
    "Shown",
    "SummaryEntry",
    "drop_placeholder",
    "eviction_value",
    "LOW_VALUE_KINDS",
]

Layer = Literal["pinned", "authored", "rolling", "summary", "gone"]
"""Where a message is: one of the layers, or out of the prompt for good ("gone").
"authored" holds what the user wrote once the rolling layer let it go
(`agents.context._authored`)."""

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
    note: str = ""
    """Text the host appended to what the model is shown of this message (a Channel 1
    reminder on a tool result). Shown after the content, or after the compact form; a
    drop placeholder replaces both."""
    note_tokens: int = 0
    """Tokens of `note` (with one for the join); counted in the prompt, never in the tail."""
    calls: tuple[Call, ...] = ()
    """The calls this assistant turn made, in order; their tokens are in `tokens`."""
    shown_tokens: int = field(default=0, init=False)
    """Tokens of `shown` (calls included), kept in step with `compact` and `note` (a plain
    attribute: compose sums it over thousands of messages). Set by whoever builds the
    entry; see `sync_tokens`."""
    keys: tuple[str, ...] = field(default=(), init=False)
    """The id each call goes out under: its own, or one made up when it has none or an
    earlier call took it (`ContextState` assigns them, in history order)."""
    answers: str | None = field(default=None, init=False)
    """On a tool result: the key of the call it answers; None if it answers none."""
    view: Shown | None = field(default=None, init=False, repr=False)
    """The cached rendering view; None until first rendered or after the shown text changed."""

    def sync_tokens(self) -> Entry:
        """Set `shown_tokens` from the stored fields (after loading a row)."""
        base = self.compact_tokens if self.compact is not None else self.tokens
        self.shown_tokens = base if self.state == "dropped" else base + self.note_tokens
        return self

    @property
    def tail_tokens(self) -> int:
        """What tail hygiene counts of this message: all it shows but the host's note."""
        return self.shown_tokens if self.state == "dropped" else self.shown_tokens - self.note_tokens

    @property
    def shown(self) -> str:
        """The text this message contributes to the prompt."""
        if self.compact is not None:
            return self.compact if self.state == "dropped" else self.compact + self.note
        return f"§{self.tag}§ {self.content}{self.note}"

    def set_compact(self, text: str, tokens: int) -> None:
        """Show `text` (counted as `tokens`) instead of the content from now on."""
        self.compact = text
        self.compact_tokens = tokens
        self.sync_tokens()
        self.view = None

    def add_note(self, text: str, tokens: int) -> None:
        """Append `text` (counted as `tokens`) to what the model is shown of this message."""
        self.note += text
        self.note_tokens += tokens
        self.sync_tokens()
        self.view = None

    def chat_message(self) -> ChatMessage:
        """This entry as a neutral `{role, content}` message (results also carry
        `tool_call_id`): built once, shared read-only by composes."""
        return self.shown_view().chat

    def shown_view(self) -> Shown:
        """What a rendering needs of this entry, built once per shown text."""
        if self.view is None:
            self.view = Shown(self)
        return self.view

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
            tool_calls=tuple(call.to_tool_call() for call in self.calls),
            importance=self.importance,
            ttl=self.ttl,
            created_at=self.created_at,
            tokens=self.tokens,
            state=self.state,
        )


class ReadOnly:
    """Refuses every change to the dict it is mixed into (put it first in the bases)."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("composed messages are shared and read-only; copy one with dict(message) to change it")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _refuse


class ChatMessage(ReadOnly, dict[str, str]):  # type: ignore[misc]
    """A composed message. Read-only because composes share it: copy with `dict(m)` to edit.

    A plain `dict` subclass, so JSON encoders and chat clients take it as is; sharing
    spares a compose one allocation per message of a long history.
    """

    __slots__ = ()


class Shown:
    """One message as the renderings need it, as shown at one state of its entry.

    Built once per shown text and shared by every compose that shows it, like the
    `ChatMessage` it holds: a composition keeps these rather than its entries, so a
    later drop or note cannot change a prompt already composed. The provider forms
    are cached here by the renderings (`agents.context._wire`), built on first use.
    """

    __slots__ = ("tag", "role", "kind", "text", "calls", "answers", "chat", "wire")

    def __init__(self, entry: Entry) -> None:
        self.tag = entry.tag
        self.role = entry.role
        self.kind = entry.kind
        self.text = entry.shown
        dropped = entry.state == "dropped"
        self.calls: tuple[tuple[str, str, str], ...] = tuple(
            (key, call.name, EMPTY_ARGUMENTS if dropped else call.arguments)
            for key, call in zip(entry.keys, entry.calls, strict=True)
        )
        """(key, name, arguments) of each call; a dropped call keeps its id and name only."""
        self.answers = entry.answers
        """The key of the call a tool result answers, or None."""
        fields = {"role": entry.role, "content": self.text}
        if entry.role == "tool" and entry.call_id:
            fields["tool_call_id"] = entry.call_id
        self.chat = ChatMessage(fields)
        self.wire: dict[str, Any] = {}
        """Provider forms by name, filled by the renderings."""

    @classmethod
    def said(cls, tag: int, text: str) -> Shown:
        """A user message the engine itself adds to the tail (a brief delta); `tag` is
        negative, so it is never a message's."""
        shown = cls.__new__(cls)
        shown.tag, shown.role, shown.kind, shown.text = tag, "user", "synthetic", text
        shown.calls, shown.answers = (), None
        shown.chat = ChatMessage({"role": "user", "content": text})
        shown.wire = {}
        return shown

    def __repr__(self) -> str:
        return f"<Shown §{self.tag}§ {self.role} {len(self.calls)} calls>"


@dataclass(frozen=True, slots=True)
class SummaryEntry:
    """One entry of the summary layer, covering messages `first_tag`..`last_tag`.

    A value: a fold or merge makes a new entry (`widened`), so a plan never changes an
    entry the state holds."""

    id: int
    first_tag: int
    last_tag: int
    text: str
    tokens: int

    def widened(self, text: str, tokens: int, first_tag: int, last_tag: int) -> SummaryEntry:
        """This entry with `text` (counted as `tokens`) instead, covering `first_tag`..`last_tag`
        too. Entries follow eviction order, not tag order, so merged ranges may overlap."""
        return SummaryEntry(self.id, min(self.first_tag, first_tag), max(self.last_tag, last_tag), text, tokens)


@dataclass(frozen=True, slots=True)
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
