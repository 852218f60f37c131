"""ctx_reduce: the agent names tags to forget, as in ``drop="3-5,9"``.

Planning is pure: it reads the tag rows and the current protected and queued sets and
returns what to queue, so a bad request can never leave half of itself applied. The
context engine applies the queued drops at its next compose, replacing each named
message, and only that message, by its ``[dropped §N§]`` placeholder. Errors are
`UsageError`s: the agent made a mistake it can fix, and the message tells it how.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Set

from pydantic import BaseModel, ConfigDict

from ctxbus.agents.nudges._tail import TagState, TailTag
from ctxbus.schemas import UsageError

__all__ = [
    "MAX_DROP_IDS",
    "MAX_TAG_DIGITS",
    "DropPlan",
    "DropRangeTooLarge",
    "DropSpecError",
    "ReversedDropRange",
    "UnknownDropTags",
    "parse_drop_spec",
    "plan_drops",
]

MAX_DROP_IDS = 5_000
"""Most tags one ctx_reduce call may name; far above any real request, far below a typo."""
MAX_TAG_DIGITS = 9
_FIRST_TAG = 1
"""Tags are numbered from 1; 0 never names a message."""

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
    """Raised when a spec names tags that were never handed out; nothing is dropped."""

    def __init__(self, tags: Iterable[int], *, next_tag: int) -> None:
        self.tags = tuple(sorted(tags))
        self.next_tag = next_tag
        shown = ", ".join(f"§{n}§" for n in self.tags[:10])
        more = f" and {len(self.tags) - 10} more" if len(self.tags) > 10 else ""
        newest = f"the newest tag is §{next_tag - 1}§" if next_tag > _FIRST_TAG else "there are no tags yet"
        super().__init__(f"ctx_reduce: no such tag {shown}{more}; nothing was dropped ({newest})")


def parse_drop_spec(spec: str) -> tuple[int, ...]:
    """The tag numbers a ``drop`` spec names, ascending and without repeats.

    Items are tag numbers or inclusive ranges, optionally written as ``§N§``.

    :raises DropSpecError: if an item is empty or not a number or range.
    :raises ReversedDropRange: if a range runs backwards.
    :raises DropRangeTooLarge: if it names more than `MAX_DROP_IDS` tags or a number
        longer than `MAX_TAG_DIGITS` digits.
    """
    if not isinstance(spec, str):
        raise DropSpecError(spec, f"a {type(spec).__name__} is not a list of tags")
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
    """Protected right now (recent, or a recent ctx_reduce call). Not queued, so nothing
    is dropped behind the agent's back: the reply asks it to retry once they age out."""
    skipped: tuple[int, ...] = ()
    """In the tail but already dropped, archived (shown compact) or queued: nothing to do."""
    outside: tuple[int, ...] = ()
    """Existing tags no longer in the rolling tail (summarized, pinned, or dropped and
    evicted): the engine already moved them out, so there is nothing to drop."""
    kept: tuple[int, ...] = ()
    """Never removed: the final result of a request."""

    def summary(self) -> str:
        """A one-line report for the tool output."""
        lines = [
            ("queued", self.queued, "will be dropped"),
            ("deferred", self.deferred, "still in use; retry later"),
            ("skipped", self.skipped, "already dropped, archived or queued"),
            ("not in the tail", self.outside, "already summarized or pinned; nothing to do"),
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
    next_tag: int,
    protected: Set[int],
    queued: Set[int] = frozenset(),
    keep: Set[int] = frozenset(),
) -> DropPlan:
    """Plan a ctx_reduce call without changing anything.

    The tail is not the whole history: a tag the engine has since summarized or pinned
    is still a real tag, so only numbers never handed out are an error.

    :param spec: the ``drop`` argument, e.g. ``"3-5,9"``.
    :param tags: the tag rows of the rolling tail.
    :param next_tag: the number the next tag will get; every number from 1 below it
        names a message.
    :param protected: tags that may not be dropped yet (`TailMeasure.protected`).
    :param queued: tags already queued for dropping.
    :param keep: tags that are never dropped (final results of requests).
    :raises DropSpecError: if the spec is malformed (see `parse_drop_spec`).
    :raises UnknownDropTags: if it names a tag that was never handed out.
    """
    wanted = parse_drop_spec(spec)
    unknown = [n for n in wanted if not _FIRST_TAG <= n < next_tag]
    if unknown:
        raise UnknownDropTags(unknown, next_tag=next_tag)
    in_tail = {tag.number: tag for tag in tags}
    queue: list[int] = []
    deferred: list[int] = []
    skipped: list[int] = []
    outside: list[int] = []
    kept: list[int] = []
    for number in wanted:
        tag = in_tail.get(number)
        if tag is None:
            outside.append(number)
        elif tag.state is not TagState.ACTIVE or number in queued:
            skipped.append(number)
        elif number in keep:
            kept.append(number)
        elif number in protected:
            deferred.append(number)
        else:
            queue.append(number)
    return DropPlan(
        queued=tuple(queue),
        deferred=tuple(deferred),
        skipped=tuple(skipped),
        outside=tuple(outside),
        kept=tuple(kept),
    )
