"""The hygiene walk on hand-made tails: what counts, what is protected, what a delta costs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxbus.agents.nudges import (
    REDUCE_TOOL_NAME,
    Band,
    HygieneWalker,
    PartKind,
    Reminder,
    TagKind,
    TagState,
    TailPart,
    TailTag,
    ToolCategory,
    drop_placeholder,
    newest_reduce_tags,
    protected_floor,
    protection_window,
)
from ctxbus.agents.nudges._protection import MIN_PROTECTED_CALLS, PROTECTED_REDUCE_CALLS
from tests.nudges.helpers import Tail, WordCounter, words


def walk(tail: Tail, *, floor: int = 0, queued: frozenset[int] = frozenset()) -> tuple[int, int]:
    measure = HygieneWalker(WordCounter(), protected_floor=floor).measure(tail.parts, tail.tags, queued=queued)
    return measure.u, measure.t


def tools(*masses: int) -> list[TailTag]:
    return [TailTag(n, TagKind.TOOL, tokens=mass) for n, mass in enumerate(masses, start=1)]


# -- protection window --------------------------------------------------------------


def test_newest_three_tool_tags_are_protected_even_with_no_floor() -> None:
    assert protection_window(tools(10, 10, 10, 10, 10), floor=0) == {3, 4, 5}


def test_window_walks_newest_first_until_the_floor_is_reached() -> None:
    assert protection_window(tools(100, 100, 100, 100, 100), floor=400) == {2, 3, 4, 5}
    assert protection_window(tools(100, 100, 100, 100, 100), floor=401) == {1, 2, 3, 4, 5}


def calls(*masses: int) -> list[TailTag]:
    """Each mass is one tool call tagged apart: a small call tag, then its result."""
    tags = []
    for i, mass in enumerate(masses):
        tags += [
            TailTag(2 * i + 1, TagKind.TOOL, tokens=5, call=2 * i + 1),
            TailTag(2 * i + 2, TagKind.TOOL, tokens=mass, call=2 * i + 1),
        ]
    return tags


def test_the_window_counts_calls_not_tags() -> None:
    """A call and its result are one call: the minimum protects three calls (six tags)."""
    assert protection_window(calls(30_000, 30_000, 30_000, 30_000), floor=16_000) == {3, 4, 5, 6, 7, 8}


def test_a_call_is_protected_with_its_result_however_far_apart() -> None:
    tags = [
        TailTag(1, TagKind.TOOL, tokens=5, call=1),
        TailTag(2, TagKind.TOOL, tokens=5, call=2),
        TailTag(3, TagKind.TOOL, tokens=5, call=3),
        TailTag(4, TagKind.TOOL, tokens=900, call=1),
        TailTag(5, TagKind.TOOL, tokens=900, call=2),
        TailTag(6, TagKind.TOOL, tokens=900, call=3),
    ]
    assert protection_window(tags, floor=0) == {1, 2, 3, 4, 5, 6}
    # A fourth call, older than all three, stays out.
    older = [TailTag(n, TagKind.TOOL, tokens=5, call=1) for n in (1, 2)]
    later = [replace(t, number=t.number + 2, call=(t.call or 0) + 2) for t in tags]
    assert protection_window(older + later, floor=0) == set(range(3, 9))


def test_window_ignores_text_and_file_tags() -> None:
    tags = [
        TailTag(1, TagKind.TOOL, tokens=500),
        TailTag(2, TagKind.MESSAGE, tokens=10_000),
        TailTag(3, TagKind.FILE, tokens=10_000),
        TailTag(4, TagKind.TOOL, tokens=500),
    ]
    assert protection_window(tags, floor=10_000) == {1, 4}
    assert protection_window([TailTag(1, TagKind.MESSAGE, tokens=5)], floor=10) == frozenset()


def test_dropped_tool_tags_still_carry_window_mass() -> None:
    tags = [replace(tag, state=TagState.DROPPED) if tag.number == 4 else tag for tag in tools(100, 100, 100, 100)]
    assert protection_window(tags, floor=300) == {2, 3, 4}


@pytest.mark.parametrize(
    ("usable", "floor"),
    [
        (200_000, 16_000),  # 0.05 * usable = 10k is below the 16k minimum
        (100_000, 8_000),  # small windows: the minimum is 0.08 * usable
        (1_000_000, 50_000),
        (2_000_000, 64_000),  # capped
        (330_010, 16_501),  # 16500.5 rounds half up, not to even
        (0, 0),
    ],
)
def test_protected_floor(usable: int, floor: int) -> None:
    assert protected_floor(usable) == floor


def test_newest_three_active_ctx_reduce_calls() -> None:
    tags = [TailTag(n, TagKind.TOOL, tool_name=REDUCE_TOOL_NAME) for n in range(1, 6)]
    tags[4] = replace(tags[4], state=TagState.DROPPED)
    tags.append(TailTag(6, TagKind.TOOL, tool_name="bash"))
    assert newest_reduce_tags(tags) == {2, 3, 4}


def test_newest_three_ctx_reduce_calls_keep_both_their_tags() -> None:
    tags = [TailTag(n, TagKind.TOOL, tokens=5, tool_name=REDUCE_TOOL_NAME, call=n - (n - 1) % 2) for n in range(1, 9)]
    assert newest_reduce_tags(tags) == {3, 4, 5, 6, 7, 8}


class _Probe(list[TailTag]):
    """Tags that count how many of them a newest-first walk reads."""

    read = 0

    def __reversed__(self) -> Iterator[TailTag]:
        for tag in super().__reversed__():
            self.read += 1
            yield tag


def _full_scan_window(tags: list[TailTag], floor: int) -> frozenset[int]:
    """The window by its definition, reading every tag: newest first, a tool tag is in if
    its call or its number is already in, else it starts a call, taken until the floor and
    the minimum are both met."""
    members: set[int] = set()
    taken: set[int] = set()
    calls = mass = 0
    for tag in reversed(tags):
        if tag.kind is not TagKind.TOOL:
            continue
        key = tag.number if tag.call is None else tag.call
        if key not in taken and tag.number not in members:
            if mass >= floor and calls >= MIN_PROTECTED_CALLS:
                continue
            calls += 1
        taken.add(key)
        members.add(tag.number)
        mass += max(tag.tokens, 0)
    return frozenset(members)


def _full_scan_reduce(tags: list[TailTag]) -> frozenset[int]:
    """The newest three active ctx_reduce calls' tags, reading every tag."""
    keys: list[int] = []
    for tag in reversed(tags):
        if tag.tool_name == REDUCE_TOOL_NAME and tag.kind is TagKind.TOOL and tag.state is TagState.ACTIVE:
            key = tag.number if tag.call is None else tag.call
            if key not in keys:
                keys.append(key)
    chosen = set(keys[:PROTECTED_REDUCE_CALLS])
    return frozenset(
        tag.number
        for tag in tags
        if tag.tool_name == REDUCE_TOOL_NAME
        and tag.kind is TagKind.TOOL
        and tag.state is TagState.ACTIVE
        and (tag.number if tag.call is None else tag.call) in chosen
    )


@st.composite
def _tails(draw: st.DrawFn) -> list[TailTag]:
    """Tags in ascending number order, some sharing a number; a call's tags come at or
    after the call's own tag, however far."""
    tags: list[TailTag] = []
    number = 0
    for _ in range(draw(st.integers(0, 40))):
        number += draw(st.sampled_from([0, 1, 1, 1, 2])) if tags else 1
        starts = [t.number for t in tags if t.call is None or t.call == t.number] + [number]
        call = draw(st.one_of(st.none(), st.sampled_from(starts)))
        tags.append(
            TailTag(
                number,
                draw(st.sampled_from([TagKind.TOOL, TagKind.TOOL, TagKind.MESSAGE, TagKind.FILE])),
                state=draw(st.sampled_from(list(TagState))),
                tokens=draw(st.integers(-5, 400)),
                tool_name=draw(st.sampled_from([REDUCE_TOOL_NAME, "sh", None])),
                call=call,
            )
        )
    return tags


@given(_tails(), st.integers(0, 2_000))
def test_the_window_and_reduce_tags_match_a_full_scan(tags: list[TailTag], floor: int) -> None:
    assert protection_window(tags, floor) == _full_scan_window(tags, floor)
    assert newest_reduce_tags(tags) == _full_scan_reduce(tags)


def test_a_full_window_stops_reading_older_tags() -> None:
    """A tool call's cost must not grow with the session: the walk ends past the window."""
    tags = _Probe(calls(*[100] * 5_000))
    assert protection_window(tags, floor=0) == set(range(9_995, 10_001))
    assert tags.read <= 8  # the six, the call that did not fit, the one past it
    reduce = _Probe(replace(tag, tool_name=REDUCE_TOOL_NAME) for tag in calls(*[100] * 5_000))
    reduce.sort(key=lambda tag: tag.number)
    assert newest_reduce_tags(reduce) == set(range(9_995, 10_001))
    assert reduce.read <= 8


# -- what counts in T and U -----------------------------------------------------------


def test_tagged_active_unprotected_text_counts_in_both() -> None:
    tail = Tail()
    tail.text(100)
    tail.text(50, tagged=False)
    assert walk(tail) == (100, 150)


def test_protected_tool_outputs_count_in_t_only() -> None:
    tail = Tail()
    for _ in range(4):
        tail.tool("bash", 98)
    assert walk(tail, floor=0) == (100, 400)  # the three newest are protected
    assert walk(tail, floor=300) == (100, 400)  # three tags already reach the floor
    assert walk(tail, floor=301) == (0, 400)


def test_newest_ctx_reduce_calls_count_in_t_never_in_u() -> None:
    tail = Tail()
    reduce_tags = [tail.tool(REDUCE_TOOL_NAME, 8) for _ in range(4)]
    for _ in range(3):
        tail.tool("bash", 8)
    measure = HygieneWalker(WordCounter(), protected_floor=0).measure(tail.parts, tail.tags)
    assert measure.t == 70
    assert measure.u == 10  # only the oldest ctx_reduce call is reclaimable
    assert set(reduce_tags[1:]) <= measure.protected


def test_queued_drops_leave_u_at_once_and_stay_in_t() -> None:
    tail = Tail()
    first = tail.text(100)
    tail.text(60)
    assert first is not None
    assert walk(tail, queued=frozenset({first})) == (60, 160)


@pytest.mark.parametrize("state", [TagState.DROPPED, TagState.ARCHIVED])
def test_inactive_tags_are_not_reclaimable(state: TagState) -> None:
    tail = Tail()
    number = tail.text(100)
    assert number is not None
    tail.set_state(number, state)
    assert walk(tail) == (0, 100)


def test_reasoning_and_synthetic_parts_count_nowhere() -> None:
    tail = Tail()
    tail.text(100)
    tail.reasoning(5_000)
    tail.text(7_000, synthetic=True)
    assert walk(tail) == (100, 100)


def test_drop_placeholders_and_empty_text_count_nowhere() -> None:
    tail = Tail()
    tail.parts.append(TailPart(key="a", kind=PartKind.TEXT, text=drop_placeholder(4), tag=None))
    tail.parts.append(TailPart(key="b", kind=PartKind.TEXT, text="  §4§ [Truncated after 10 lines]"))
    tail.parts.append(TailPart(key="c", kind=PartKind.TEXT, text=""))
    tail.text(10)
    assert walk(tail) == (10, 10)


def test_a_dropped_output_takes_its_call_arguments_with_it() -> None:
    tail = Tail()
    number = tail.tool("read", 0, input_tokens=40, output="[dropped §1§]")
    for _ in range(3):
        tail.tool("bash", 10)
    assert number == 1
    assert walk(tail) == (0, 36)


def test_our_reminder_span_is_left_out() -> None:
    plain = Tail()
    for _ in range(4):
        plain.tool("bash", 100)
    with_reminder = Tail(parts=list(plain.parts), tags=list(plain.tags))
    reminder = Reminder(level=Band.FIRM, calm=False, outputs=3, tokens=90_000, hints=())
    last = with_reminder.parts[-1]
    with_reminder.parts[-1] = replace(last, text=last.text + reminder.text + reminder.text)
    assert walk(with_reminder) == walk(plain)


def test_fixed_token_figures_are_used_for_images() -> None:
    tail = Tail(
        parts=[TailPart(key="img", kind=PartKind.FILE, text="data:image/png;base64,AAAA", tag=1, tokens=1_200)],
        tags=[TailTag(1, TagKind.FILE, tokens=1_200)],
    )
    assert walk(tail) == (1_200, 1_200)


def test_counts_the_caller_already_has_need_no_text() -> None:
    tail = Tail(
        parts=[TailPart(key="m1", kind=PartKind.TEXT, tag=1, tokens=700)],
        tags=[TailTag(1, TagKind.MESSAGE, tokens=700)],
    )
    assert walk(tail) == (700, 700)


def test_parts_of_unknown_tags_count_in_t_only() -> None:
    tail = Tail(parts=[TailPart(key="x", kind=PartKind.TEXT, text=words(30), tag=99)])
    assert walk(tail) == (0, 30)


# -- hints and spent outputs ------------------------------------------------------------


def test_hints_prefer_misc_then_edit_search_then_read_then_age() -> None:
    tail = Tail()
    tail.tool("read", 300)  # 1
    tail.tool("grep", 300)  # 2
    tail.tool("bash", 300)  # 3
    tail.tool("mcp__fs__read_file", 300)  # 4
    tail.tool("edit", 300)  # 5
    tail.tool("pytest", 300)  # 6
    for _ in range(3):
        tail.tool("bash", 10)  # protected
    measure = HygieneWalker(WordCounter(), protected_floor=0).measure(tail.parts, tail.tags)
    assert [(h.tag, h.tool_name) for h in measure.hints] == [
        (3, "bash"),
        (6, "pytest"),
        (2, "grep"),
        (5, "edit"),
    ]
    assert measure.hints[0].category is ToolCategory.MISC
    assert measure.spent_outputs == 6


def test_hints_skip_small_outputs_ctx_tools_protected_and_queued() -> None:
    tail = Tail()
    tail.tool("bash", 248)  # 1: 248 tokens is under the hint minimum
    tail.tool("ctx_search", 900)  # 2: our own tool
    tail.tool("bash", 250)  # 3: queued
    tail.tool("bash", 250)  # 4: the only hint
    tail.tool("bash", 900)  # 5..7: protected
    tail.tool("bash", 900)
    tail.tool("bash", 900)
    measure = HygieneWalker(WordCounter(), protected_floor=0).measure(tail.parts, tail.tags, queued={3})
    assert [h.tag for h in measure.hints] == [4]
    assert measure.spent_outputs == 3


# -- incremental walking ---------------------------------------------------------------


def test_a_new_turn_costs_only_its_own_parts() -> None:
    tail = Tail()
    for _ in range(5):
        tail.text(20)
        tail.tool("bash", 50)
    counter = WordCounter()
    walker = HygieneWalker(counter, protected_floor=0)
    assert walker.measure(tail.parts, tail.tags).full
    before = sum(counter.counted.values())

    tail.text(20)
    tail.tool("bash", 50)
    measure = walker.measure(list(tail.parts), tail.tags)
    assert not measure.full
    assert sum(counter.counted.values()) - before == 3  # text, tool input, tool output
    assert (measure.u, measure.t) == walk(tail)


def test_equal_parts_rebuilt_by_value_still_extend_the_last_walk() -> None:
    tail = Tail()
    tail.text(20)
    walker = HygieneWalker(WordCounter(), protected_floor=0)
    walker.measure(tail.parts, tail.tags)
    rebuilt = [replace(part) for part in tail.parts]
    assert not walker.measure(rebuilt, tail.tags).full


def test_a_changed_prefix_triggers_a_full_remeasure_with_cached_counts() -> None:
    tail = Tail()
    first = tail.tool("bash", 500)
    for _ in range(4):
        tail.tool("bash", 50)
    counter = WordCounter()
    walker = HygieneWalker(counter, protected_floor=0)
    walker.measure(tail.parts, tail.tags)
    counted = sum(counter.counted.values())

    tail.replace_output(first, drop_placeholder(first))
    tail.set_state(first, TagState.DROPPED)
    measure = walker.measure(tail.parts, tail.tags)
    assert measure.full
    assert (measure.u, measure.t) == walk(tail)
    assert sum(counter.counted.values()) == counted  # nothing was counted twice


def test_a_shorter_tail_triggers_a_full_remeasure() -> None:
    tail = Tail()
    for _ in range(3):
        tail.text(10)
    walker = HygieneWalker(WordCounter(), protected_floor=0)
    walker.measure(tail.parts, tail.tags)
    measure = walker.measure(tail.parts[1:], tail.tags)
    assert measure.full
    assert (measure.u, measure.t) == (20, 20)


def test_a_late_placeholder_for_an_earlier_call_triggers_a_full_remeasure() -> None:
    walker = HygieneWalker(WordCounter(), protected_floor=0)
    call = TailPart(key="in", kind=PartKind.TOOL_INPUT, text=words(40), tag=1, arc="c1")
    tags = [TailTag(1, TagKind.TOOL, tokens=40, tool_name="read")]
    assert walker.measure([call], tags).t == 40
    output = TailPart(key="out", kind=PartKind.TOOL_OUTPUT, text=drop_placeholder(1), tag=1, arc="c1")
    measure = walker.measure([call, output], tags)
    assert measure.full
    assert measure.t == 0


def test_tag_changes_alone_are_seen_without_recounting() -> None:
    tail = Tail()
    first = tail.text(100)
    tail.text(10)
    counter = WordCounter()
    walker = HygieneWalker(counter, protected_floor=0)
    walker.measure(tail.parts, tail.tags)
    assert first is not None
    tail.set_state(first, TagState.DROPPED)
    measure = walker.measure(tail.parts, tail.tags)
    assert not measure.full
    assert (measure.u, measure.t) == (10, 110)
    assert max(counter.counted.values()) == 1


def test_reset_forgets_counts_and_repr_shows_live_state() -> None:
    tail = Tail()
    tail.text(10)
    counter = WordCounter()
    walker = HygieneWalker(counter, protected_floor=16_000)
    walker.measure(tail.parts, tail.tags)
    assert repr(walker) == "HygieneWalker(parts=1, t=10, tags=1, floor=16000)"
    walker.reset()
    assert repr(walker) == "HygieneWalker(parts=0, t=0, tags=0, floor=16000)"
    walker.measure(tail.parts, tail.tags)
    assert max(counter.counted.values()) == 2
