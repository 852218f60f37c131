"""Per-tag bookkeeping behind U: which tags are reclaimable, how much, and which to hint.

A tail has hundreds of tags and a walk happens after every tool call, so summing
over all of them each time would cost more than measuring the new turn. The ledger
keeps the running sums for active tags and is told which tags changed; protected and
queued tags, always a handful, are subtracted at read time.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence, Set
from dataclasses import dataclass

from ctxbus.agents.nudges._hints import (
    HINT_LIMIT,
    HINT_MIN_OUTPUT_TOKENS,
    ReclaimHint,
    ToolCategory,
    is_ctx_tool,
    tool_category,
)
from ctxbus.agents.nudges._tail import TagKind, TagState, TailTag

__all__ = ["Reclaimable", "TagLedger", "Tally"]


@dataclass(slots=True)
class Tally:
    """Eligible tokens one tag owns in the current render."""

    tokens: int = 0
    outputs: int = 0
    """Tool-output parts with at least one token: what a reminder calls spent outputs."""
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class _Entry:
    """What one active tag adds to the sums; `hint` is None if it is never suggested."""

    tokens: int
    outputs: int
    hint: ReclaimHint | None


@dataclass(frozen=True, slots=True)
class Reclaimable:
    """The ledger's answer for one walk."""

    u: int
    spent_outputs: int
    hints: tuple[ReclaimHint, ...]


class TagLedger:
    """Running sums over active tags, updated per changed tag instead of per walk."""

    def __init__(self) -> None:
        self._rows: list[TailTag] = []
        self._by_number: dict[int, TailTag] = {}
        self._entries: dict[int, _Entry] = {}
        self._candidates: tuple[list[int], ...] = tuple([] for _ in ToolCategory)
        self._u = 0
        self._spent = 0

    def sync(self, tags: Sequence[TailTag], tallies: dict[int, Tally], changed: Set[int]) -> None:
        """Bring the sums up to date with the tag rows and the tallies.

        :param tags: tag rows, ascending by number.
        :param changed: tags whose tally changed since the last sync.
        """
        old = self._rows
        if len(tags) < len(old) or not self._restate(old, tags, tallies):
            self.rebuild(tags, tallies)
            return
        for tag in tags[len(old) :]:
            self._by_number[tag.number] = tag
            self._update(tag, tallies.get(tag.number))
        for number in changed:
            row = self._by_number.get(number)
            if row is not None:
                self._update(row, tallies.get(number))
        self._rows = list(tags)

    def _restate(self, old: list[TailTag], tags: Sequence[TailTag], tallies: dict[int, Tally]) -> bool:
        """Apply rows that changed in place (a state flip); False if the rows were renumbered."""
        # Identity first: an adapter that reuses its row objects pays almost nothing.
        if all(map(operator.is_, old, tags)):
            return True
        for before, after in zip(old, tags, strict=False):
            if before is after or before == after:
                continue
            if before.number != after.number:
                return False
            self._by_number[after.number] = after
            self._update(after, tallies.get(after.number))
        return True

    def reclaimable(self, excluded: Set[int]) -> Reclaimable:
        """U, spent outputs and hints, leaving out `excluded` (protected or queued) tags."""
        u, spent = self._u, self._spent
        for number in excluded:
            entry = self._entries.get(number)
            if entry is not None:
                u -= entry.tokens
                spent -= entry.outputs
        return Reclaimable(u=u, spent_outputs=spent, hints=self._hints(excluded))

    def _hints(self, excluded: Set[int]) -> tuple[ReclaimHint, ...]:
        # Candidates are sorted by category, then by age: the first few that are not
        # excluded are the answer, and excluded ones are the newest, so this stays short.
        hints: list[ReclaimHint] = []
        for numbers in self._candidates:
            for number in numbers:
                hint = self._entries[number].hint
                if hint is not None and number not in excluded:
                    hints.append(hint)
                    if len(hints) == HINT_LIMIT:
                        return tuple(hints)
        return tuple(hints)

    def rebuild(self, tags: Sequence[TailTag], tallies: dict[int, Tally]) -> None:
        """Recompute everything, e.g. after the tallies were rebuilt from scratch."""
        self._rows = list(tags)
        self._by_number = {tag.number: tag for tag in tags}
        self._entries = {}
        self._candidates = tuple([] for _ in ToolCategory)
        self._u = self._spent = 0
        for tag in tags:
            self._update(tag, tallies.get(tag.number))

    def _update(self, tag: TailTag, tally: Tally | None) -> None:
        number = tag.number
        old = self._entries.pop(number, None)
        if old is not None:
            self._u -= old.tokens
            self._spent -= old.outputs
            if old.hint is not None:
                numbers = self._candidates[old.hint.category]
                del numbers[bisect.bisect_left(numbers, number)]
        if tally is None or tag.state is not TagState.ACTIVE:
            return
        entry = _Entry(tally.tokens, tally.outputs, _hint(tag, tally))
        self._entries[number] = entry
        self._u += entry.tokens
        self._spent += entry.outputs
        if entry.hint is not None:
            bisect.insort(self._candidates[entry.hint.category], number)


def _hint(tag: TailTag, tally: Tally) -> ReclaimHint | None:
    """The hint this tag would make: a tool output big enough to matter, not one of ours."""
    if tag.kind is not TagKind.TOOL or tally.output_tokens < HINT_MIN_OUTPUT_TOKENS:
        return None
    name = tag.tool_name or "tool"
    if is_ctx_tool(name):
        return None
    return ReclaimHint(tool_category(name), tag.number, name)
