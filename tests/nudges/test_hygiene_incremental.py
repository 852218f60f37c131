"""Property: however the tail evolves, the incremental walk agrees with a fresh one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbus.agents.nudges import REDUCE_TOOL_NAME, HygieneWalker, TagState, drop_placeholder
from tests.nudges.helpers import Tail, WordCounter


class Step(Protocol):
    def apply(self, tail: Tail, queued: set[int]) -> None: ...


@dataclass(frozen=True)
class AddText:
    tokens: int
    tagged: bool

    def apply(self, tail: Tail, queued: set[int]) -> None:
        tail.text(self.tokens, tagged=self.tagged)


@dataclass(frozen=True)
class AddTool:
    name: str
    tokens: int

    def apply(self, tail: Tail, queued: set[int]) -> None:
        tail.tool(self.name, self.tokens)


@dataclass(frozen=True)
class AddReasoning:
    tokens: int

    def apply(self, tail: Tail, queued: set[int]) -> None:
        tail.reasoning(self.tokens)


@dataclass(frozen=True)
class Extend:
    """A later part for an existing tag, as when a tool result arrives after its call."""

    pick: int
    tokens: int

    def apply(self, tail: Tail, queued: set[int]) -> None:
        if tail.tags:
            tail.extend(tail.tags[self.pick % len(tail.tags)].number, self.tokens)


@dataclass(frozen=True)
class Change:
    """Drop (re-rendered as a placeholder), archive or queue an existing tag."""

    pick: int
    how: str

    def apply(self, tail: Tail, queued: set[int]) -> None:
        if not tail.tags:
            return
        number = tail.tags[self.pick % len(tail.tags)].number
        if self.how == "drop":
            tail.replace_output(number, drop_placeholder(number))
            tail.set_state(number, TagState.DROPPED)
        elif self.how == "archive":
            tail.set_state(number, TagState.ARCHIVED)
        else:
            queued.add(number)


@dataclass(frozen=True)
class Rebuild:
    """The adapter built new objects equal to the old ones."""

    def apply(self, tail: Tail, queued: set[int]) -> None:
        tail.parts = [replace(part) for part in tail.parts]
        tail.tags = [replace(tag) for tag in tail.tags]


steps = st.one_of(
    st.builds(AddText, st.integers(0, 400), st.booleans()),
    st.builds(
        AddTool,
        st.sampled_from(("bash", "read", "grep", REDUCE_TOOL_NAME, "ctx_search")),
        st.integers(0, 700),
    ),
    st.builds(AddReasoning, st.integers(1, 300)),
    st.builds(Extend, st.integers(0, 50), st.integers(0, 400)),
    st.builds(Change, st.integers(0, 50), st.sampled_from(("drop", "archive", "queue"))),
    st.just(Rebuild()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(steps, min_size=1, max_size=25), st.integers(0, 2_000))
def test_incremental_walk_matches_a_fresh_walk(plan: list[Step], floor: int) -> None:
    tail = Tail()
    queued: set[int] = set()
    walker = HygieneWalker(WordCounter(), protected_floor=floor)
    for step in plan:
        step.apply(tail, queued)
        got = walker.measure(tail.parts, tail.tags, queued=queued)
        fresh = HygieneWalker(WordCounter(), protected_floor=floor).measure(tail.parts, tail.tags, queued=queued)
        assert replace(got, full=True) == fresh
