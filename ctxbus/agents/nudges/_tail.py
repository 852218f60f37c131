"""What the hygiene walk reads: the rendered tail as parts, and the tag rows behind them.

These types are deliberately ours, not the context engine's. An adapter turns whatever
the engine holds into a sequence of `TailPart` (in render order) and a sequence of
`TailTag` (ascending tag number), so the walk never depends on engine internals and
the conformance suite can build the same shapes from the reference vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

__all__ = ["PartKind", "TagKind", "TagState", "TailPart", "TailTag", "TokenCounter"]


class PartKind(StrEnum):
    """What a rendered part is, which decides whether and how it counts."""

    TEXT = "text"
    """Prose from the user or the assistant."""
    TOOL_INPUT = "tool_input"
    """The arguments of a tool call, as rendered to the model."""
    TOOL_OUTPUT = "tool_output"
    """What a tool returned; Channel 1 reminders are appended here."""
    FILE = "file"
    """An attached file or image; images carry a fixed token figure."""
    REASONING = "reasoning"
    """Thinking, redacted thinking or a signature: never counted."""


class TagKind(StrEnum):
    """The kind of a tag row; only tool tags take part in the protection window."""

    MESSAGE = "message"
    TOOL = "tool"
    FILE = "file"


class TagState(StrEnum):
    """Life cycle of a tag; only active tags can still be reclaimed."""

    ACTIVE = "active"
    DROPPED = "dropped"
    ARCHIVED = "archived"


@dataclass(frozen=True, slots=True)
class TailTag:
    """One tag row (§N§): the unit the agent names when it calls ctx_reduce."""

    number: int
    """The tag number N of §N§; newer tags have larger numbers."""
    kind: TagKind
    state: TagState = TagState.ACTIVE
    tokens: int = 0
    """Persisted token mass of the tag; the protection window sums this, not the render."""
    tool_name: str | None = None
    """Name of the tool for tool tags; drives ctx_reduce protection and hint ordering."""
    call: int | None = None
    """The tool call this tag belongs to (the call's tag), shared by a call's tag and its
    result's where the host tags them apart: protection counts calls, not tags. None for
    a tag that stands alone (or covers both)."""


@dataclass(frozen=True, slots=True)
class TailPart:
    """One part of the rendered tail, in the order the model sees it.

    Drop placeholders and reminder spans are recognised from `text`, so the adapter
    passes the text exactly as rendered. Parts are compared by value (and first by
    identity) to detect a changed prefix, so reusing the same objects across turns
    keeps the incremental walk cheap.
    """

    key: str
    """Stable identity, e.g. message id and part index; part of the prefix check."""
    kind: PartKind
    text: str = ""
    tag: int | None = None
    """Number of the tag that owns this part, or None for untagged content."""
    arc: str | None = None
    """Identity of the tool call this part belongs to, for hosts where dropping an
    output removes the call's input too (one tag covers both, as in the reference
    vectors): input and output share it, so a dropped output also takes its input out
    of the count. Leave None where the input stays rendered."""
    synthetic: bool = False
    """Injected by us (memory carriers, Channel 2 messages): never counted."""
    tokens: int | None = None
    """A count to use instead of counting `text`: for images, or when the caller already
    caches counts. It must leave out reminder spans; `text` may then be empty, except
    for drop placeholders, which are recognised from their text."""


class TokenCounter(Protocol):
    """Anything that counts tokens in text; `agents.context.Tokenizer` fits."""

    def count(self, text: str) -> int:
        """Number of tokens in `text`."""
        ...
