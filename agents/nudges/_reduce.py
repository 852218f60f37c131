"""ctx_reduce: the agent names tags to forget, as in ``drop="3-5,9"``.

Planning is pure: it reads the tag rows and the current protected and queued sets and
returns what to queue, so a bad request can never leave half of itself applied. The
context engine applies the queued drops at its next compose, rendering each one as
`drop_style` says. Errors are `UsageError`s: the agent made a mistake it can fix, and
the message tells it how.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Set
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from agents.nudges._tail import TagKind, TagState, TailTag
from schemas import UsageError

__all__ = [
    "KEEP_ARGUMENTS_MAX_BYTES",
    "KEEP_ARGUMENTS_NEWEST_CALLS",
    "MAX_DROP_IDS",
    "MAX_TAG_DIGITS",
    "DropPlan",
    "DropRangeTooLarge",
    "DropSpecError",
    "DropStyle",
    "ReversedDropRange",
    "UnknownDropTags",
    "drop_style",
    "parse_drop_spec",
    "plan_drops",
]

MAX_DROP_IDS = 5_000
"""Most tags one ctx_reduce call may name; far above any real request, far below a typo."""
MAX_TAG_DIGITS = 9
KEEP_ARGUMENTS_NEWEST_CALLS = 20
"""A dropped call this recent keeps its (small) arguments, so the agent remembers what it did."""
KEEP_ARGUMENTS_MAX_BYTES = 1024

_NUMBER = r"(?:§([0-9]+)§|([0-9]+))"
_ITEM = re.compile(rf"{_NUMBER}(?:\s*-\s*{_NUMBER})?")


class DropSpecError(UsageError):
    """Raised when a ``drop`` spec is not a comma-separated list of tags and ranges."""

    def __init__(self, spec: str, problem: str) -> None:
        self.spec = spec
        super().__init__(f'ctx_reduce drop={spec!r}: {problem}; write it like drop="3-5,9"')


class ReversedDropRange(DropSpecError):
    """Raised when a range ends before it starts, as in ``5-3``."""

    def __init__(self, spec: str, start: int, end: int) -> None:
        self.start = start
        self.end = end
        super().__init__(spec, f"range {start}-{end} runs backwards (did you mean {end}-{start}?)")


class DropRangeTooLarge(DropSpecError):
    """Raised when a spec names more tags, or a larger tag number, than ctx_reduce accepts."""


class UnknownDropTags(UsageError):
    """Raised when a spec names tags that do not exist; nothing is dropped."""

    def __init__(self, tags: Iterable[int]) -> None:
        self.tags = tuple(sorted(tags))
        shown = ", ".join(f"§{n}§" for n in self.tags[:10])
        more = f" and {len(self.tags) - 10} more" if len(self.tags) > 10 else ""
        super().__init__(f"ctx_reduce: no such tag {shown}{more}; nothing was dropped")


def parse_drop_spec(spec: str) -> tuple[int, ...]:
    """The tag numbers a ``drop`` spec names, ascending and without repeats.

    Items are tag numbers or inclusive ranges, optionally written as ``§N§``.

    :raises DropSpecError: if an item is empty or not a number or range.
    :raises ReversedDropRange: if a range runs backwards.
    :raises DropRangeTooLarge: if it names more than `MAX_DROP_IDS` tags or a number
        longer than `MAX_TAG_DIGITS` digits.
    """
    if not spec.strip():
        raise DropSpecError(spec, "no tags named")
    numbers: set[int] = set()
    for raw in spec.split(","):
        item = raw.strip()
        match = _ITEM.fullmatch(item)
        if match is None:
            what = "an empty item" if not item else f"{item!r} is not a tag number or range"
            raise DropSpecError(spec, what)
        start = _tag_number(spec, match[1] or match[2])
        last = match[3] or match[4]
        end = start if last is None else _tag_number(spec, last)
        if end < start:
            raise ReversedDropRange(spec, start, end)
        if end - start + 1 > MAX_DROP_IDS:
            raise DropRangeTooLarge(spec, f"range {start}-{end} names more than {MAX_DROP_IDS} tags")
        numbers.update(range(start, end + 1))
        if len(numbers) > MAX_DROP_IDS:
            raise DropRangeTooLarge(spec, f"names more than {MAX_DROP_IDS} tags")
    return tuple(sorted(numbers))


def _tag_number(spec: str, digits: str) -> int:
    if len(digits) > MAX_TAG_DIGITS:
        raise DropRangeTooLarge(spec, f"tag number {digits[:12]}... is too large")
    return int(digits)


class DropPlan(BaseModel):
    """What one ctx_reduce call does; every named tag lands in exactly one field."""

    model_config = ConfigDict(frozen=True)

    queued: tuple[int, ...] = ()
    """Dropped at the next compose; they leave U at once."""
    deferred: tuple[int, ...] = ()
    """Protected right now (recent, or a recent ctx_reduce call); drop them once they
    leave protection."""
    skipped: tuple[int, ...] = ()
    """Already dropped, archived or queued: nothing to do."""
    kept: tuple[int, ...] = ()
    """Never removed: the final result of a request."""

    def summary(self) -> str:
        """A one-line report for the tool output."""
        lines = [
            ("queued", self.queued, "will be dropped"),
            ("deferred", self.deferred, "still in use; retry later"),
            ("skipped", self.skipped, "already dropped or queued"),
            ("kept", self.kept, "final results are never dropped"),
        ]
        parts = [f"{label} {_tag_list(tags)} ({why})" for label, tags, why in lines if tags]
        return "; ".join(parts) if parts else "nothing to do"


def _tag_list(tags: tuple[int, ...]) -> str:
    return " ".join(f"§{n}§" for n in tags)


def plan_drops(
    spec: str,
    tags: Iterable[TailTag],
    *,
    protected: Set[int],
    queued: Set[int] = frozenset(),
    keep: Set[int] = frozenset(),
) -> DropPlan:
    """Plan a ctx_reduce call without changing anything.

    :param spec: the ``drop`` argument, e.g. ``"3-5,9"``.
    :param tags: every tag row of the context.
    :param protected: tags that may not be dropped yet (`TailMeasure.protected`).
    :param queued: tags already queued for dropping.
    :param keep: tags that are never dropped (final results of requests).
    :raises DropSpecError: if the spec is malformed (see `parse_drop_spec`).
    :raises UnknownDropTags: if it names a tag that does not exist.
    """
    wanted = parse_drop_spec(spec)
    by_number = {tag.number: tag for tag in tags}
    unknown = [n for n in wanted if n not in by_number]
    if unknown:
        raise UnknownDropTags(unknown)
    queue: list[int] = []
    deferred: list[int] = []
    skipped: list[int] = []
    kept: list[int] = []
    for number in wanted:
        if by_number[number].state is not TagState.ACTIVE or number in queued:
            skipped.append(number)
        elif number in keep:
            kept.append(number)
        elif number in protected:
            deferred.append(number)
        else:
            queue.append(number)
    return DropPlan(queued=tuple(queue), deferred=tuple(deferred), skipped=tuple(skipped), kept=tuple(kept))


class DropStyle(StrEnum):
    """How a queued drop is rendered at the next compose."""

    PLACEHOLDER = "placeholder"
    """The content is replaced by exactly ``[dropped §N§]``."""
    KEEP_ARGUMENTS = "keep_arguments"
    """A recent tool call keeps its small arguments; its output becomes the placeholder."""
    WHOLE_CALL = "whole_call"
    """An older tool call loses both its call and its result to the placeholder."""


def drop_style(tag: TailTag, *, newer_tool_calls: int, argument_bytes: int) -> DropStyle:
    """How to render `tag` once dropped.

    :param newer_tool_calls: how many tool tags are newer than this one.
    :param argument_bytes: UTF-8 size of the call's rendered arguments.
    """
    if tag.kind is not TagKind.TOOL:
        return DropStyle.PLACEHOLDER
    recent = newer_tool_calls < KEEP_ARGUMENTS_NEWEST_CALLS
    if recent and argument_bytes <= KEEP_ARGUMENTS_MAX_BYTES:
        return DropStyle.KEEP_ARGUMENTS
    return DropStyle.WHOLE_CALL
