"""ctx_reduce: parsing ``drop`` and planning against the tag rows.

That a failing request changes nothing (queue, {U, T}, Channel 1's grace) is the
Agent's promise, checked where it is kept: tests/runtime/test_drops.py."""

from __future__ import annotations

import pytest

from ctxbus.agents.nudges import (
    DropPlan,
    DropRangeTooLarge,
    DropSpecError,
    HygieneWalker,
    ReversedDropRange,
    TagKind,
    TagState,
    TailTag,
    UnknownDropTags,
    drop_placeholder,
    parse_drop_spec,
    plan_drops,
)
from ctxbus.schemas import UsageError
from tests.nudges.helpers import Tail, WordCounter


@pytest.mark.parametrize(
    ("spec", "numbers"),
    [
        ("3-5,9", (3, 4, 5, 9)),
        (" 9 , 3 - 5 ", (3, 4, 5, 9)),
        ("§3§-§5§,§9§", (3, 4, 5, 9)),
        ("3-5,4,5-6", (3, 4, 5, 6)),
        ("7", (7,)),
        ("0-0", (0,)),
    ],
)
def test_parse(spec: str, numbers: tuple[int, ...]) -> None:
    assert parse_drop_spec(spec) == numbers


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "  ",
        "3-",
        "-5",
        "a",
        "3--5",
        "3-5-7",
        "3,,5",
        ",3",
        "3,",
        "3.5",
        "0x10",
        "3 5",
        "+3",
        "§§",
        "§3",
        "3§",
        "٣",
    ],
)
def test_malformed_specs_are_usage_errors_that_name_the_spec(spec: str) -> None:
    with pytest.raises(DropSpecError) as raised:
        parse_drop_spec(spec)
    assert isinstance(raised.value, UsageError)
    assert repr(spec) in str(raised.value)
    assert not isinstance(raised.value, (ReversedDropRange, DropRangeTooLarge))


@pytest.mark.parametrize("spec", [None, 5, ["3", "4"]])
def test_a_spec_that_is_not_text_is_a_usage_error_that_says_so(spec: object) -> None:
    with pytest.raises(DropSpecError, match=f"a {type(spec).__name__} is not a list of tags"):
        parse_drop_spec(spec)  # type: ignore[arg-type]


def test_reversed_range_suggests_the_fix() -> None:
    with pytest.raises(ReversedDropRange, match=r"5-3 runs backwards \(did you mean 3-5\?\)") as raised:
        parse_drop_spec("1,5-3")
    assert (raised.value.start, raised.value.end) == (5, 3)


@pytest.mark.parametrize("spec", ["1-1000000000", "1-5001", "1-3000,4000-6001", "99999999999", "1-" + "9" * 4000])
def test_huge_ranges_are_refused_before_expanding(spec: str) -> None:
    with pytest.raises(DropRangeTooLarge):
        parse_drop_spec(spec)


def test_the_largest_accepted_request() -> None:
    assert len(parse_drop_spec("1-5000")) == 5_000


TAGS = [
    TailTag(1, TagKind.MESSAGE),
    TailTag(2, TagKind.TOOL, state=TagState.DROPPED),
    TailTag(3, TagKind.TOOL),
    TailTag(4, TagKind.TOOL),
    TailTag(5, TagKind.MESSAGE),
    TailTag(6, TagKind.TOOL, state=TagState.ARCHIVED),
    TailTag(9, TagKind.TOOL),
]
"""A tail from which tags 7 and 8 have left (summarized or pinned); tag 10 is next."""
NEXT_TAG = 10


def test_plan_sorts_every_named_tag_into_one_outcome() -> None:
    plan = plan_drops("1-9", TAGS, next_tag=NEXT_TAG, protected={9}, queued={4}, keep={5})
    assert plan == DropPlan(queued=(1, 3), deferred=(9,), skipped=(2, 4, 6), outside=(7, 8), kept=(5,))
    assert plan.summary() == (
        "queued §1§ §3§ (will be dropped); deferred §9§ (still in use; retry later); "
        "skipped §2§ §4§ §6§ (already dropped, archived or queued); "
        "not in the tail §7§ §8§ (already summarized or pinned; nothing to do); "
        "kept §5§ (final results are never dropped)"
    )


def test_tags_that_left_the_tail_are_not_unknown() -> None:
    """Once older tags are summarized, a range reaching back over them still queues the rest."""
    tail = [TailTag(n, TagKind.TOOL) for n in range(8, 13)]
    plan = plan_drops("2-12", tail, next_tag=13, protected={12})
    assert plan == DropPlan(queued=(8, 9, 10, 11), deferred=(12,), outside=(2, 3, 4, 5, 6, 7))


@pytest.mark.parametrize(("spec", "unknown"), [("3,10-11", (10, 11)), ("0,3", (0,))])
def test_tags_never_handed_out_are_an_error_and_nothing_is_planned(spec: str, unknown: tuple[int, ...]) -> None:
    shown = ", ".join(f"§{n}§" for n in unknown)
    with pytest.raises(
        UnknownDropTags, match=rf"no such tag {shown}; nothing was dropped \(the newest tag is §9§\)"
    ) as raised:
        plan_drops(spec, TAGS, next_tag=NEXT_TAG, protected=frozenset())
    assert raised.value.tags == unknown


def test_a_context_without_tags_says_so() -> None:
    with pytest.raises(UnknownDropTags, match=r"there are no tags yet"):
        plan_drops("1", [], next_tag=1, protected=frozenset())


def test_an_already_dropped_tag_is_only_reported() -> None:
    plan = plan_drops("2", TAGS, next_tag=NEXT_TAG, protected=frozenset())
    assert plan.summary() == "skipped §2§ (already dropped, archived or queued)"
    assert DropPlan().summary() == "nothing to do"


def test_queued_drops_leave_u_now_and_t_at_the_next_compose() -> None:
    tail = Tail()
    for _ in range(6):
        tail.tool("bash", 98)
    walker = HygieneWalker(WordCounter(), protected_floor=0)
    before = walker.measure(tail.parts, tail.tags)
    plan = plan_drops("1-2,6", tail.tags, next_tag=7, protected=before.protected)
    assert (plan.queued, plan.deferred) == ((1, 2), (6,))

    queued = walker.measure(tail.parts, tail.tags, queued=set(plan.queued))
    assert (queued.u, queued.t) == (before.u - 200, before.t)

    for number in plan.queued:  # the next compose renders the placeholders
        tail.replace_output(number, drop_placeholder(number))
        tail.set_state(number, TagState.DROPPED)
    composed = walker.measure(tail.parts, tail.tags)
    assert (composed.u, composed.t) == (before.u - 200, before.t - 200)


def test_a_dropped_message_leaves_exactly_its_placeholder() -> None:
    assert drop_placeholder(12) == "[dropped §12§]"
