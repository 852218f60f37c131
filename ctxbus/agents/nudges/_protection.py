"""Which tags the agent may not reclaim yet: the recent tool window and its own ctx_reduce calls.

The newest tool outputs are what the agent is working with right now; nudging it to
drop them would be counter-productive, so their mass counts in T but never in U.
The window is measured in persisted tag tokens (`TailTag.tokens`), not in rendered
tokens, so it does not move when a render changes.

Both rules count tool calls, not tags: where a call and its result are tagged apart
(`TailTag.call`), counting tags would protect half as many calls as intended, and
each ctx_reduce call would push an output the agent just read out of the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from ctxbus.agents.nudges._bands import scale_half_up
from ctxbus.agents.nudges._tail import TagKind, TagState, TailTag

__all__ = [
    "MIN_PROTECTED_CALLS",
    "PROTECTED_FLOOR_CAP",
    "PROTECTED_FLOOR_MIN_RATIO",
    "PROTECTED_FLOOR_MIN_TOKENS",
    "PROTECTED_FLOOR_RATIO",
    "PROTECTED_REDUCE_CALLS",
    "REDUCE_TOOL_NAME",
    "newest_reduce_tags",
    "protected_floor",
    "protection_window",
]

REDUCE_TOOL_NAME = "ctx_reduce"
MIN_PROTECTED_CALLS = 3
"""The newest tool calls are always protected, however small they are."""
PROTECTED_REDUCE_CALLS = 3
"""The newest ctx_reduce calls stay in T but never in U: dropping them helps nobody."""
PROTECTED_FLOOR_RATIO = Fraction("0.05")
PROTECTED_FLOOR_MIN_RATIO = Fraction("0.08")
PROTECTED_FLOOR_MIN_TOKENS = 16_000
PROTECTED_FLOOR_CAP = 64_000


def protected_floor(usable_tokens: int) -> int:
    """Default token floor of the protection window for a usable context size.

    clamp(round(0.05 * usable), min(16000, round(0.08 * usable)), 64000), rounding
    halves up: small windows still protect a useful share, large ones stay bounded.
    """
    usable = max(usable_tokens, 0)
    low = min(PROTECTED_FLOOR_MIN_TOKENS, scale_half_up(usable, PROTECTED_FLOOR_MIN_RATIO))
    return max(low, min(scale_half_up(usable, PROTECTED_FLOOR_RATIO), PROTECTED_FLOOR_CAP))


def protection_window(tags: Sequence[TailTag], floor: int) -> frozenset[int]:
    """Tool tags protected by recency: the newest calls until their mass reaches `floor`.

    Every tool tag takes part whatever its state, so dropping recent outputs does not
    pull older ones into the window. Text and file tags are never window members. A
    call's tags, and tags sharing a number, are taken together before the floor is
    tested, however far apart they sit.

    :param tags: tag rows in ascending tag-number order; a call's tags are numbered
        from the call's own (`TailTag.call`) up, as a result never precedes its call.
    """
    members: set[int] = set()
    taken: set[int] = set()
    oldest = 0  # the smallest key in `taken`
    calls = 0
    cumulative = 0
    full = False
    tool = TagKind.TOOL
    for tag in reversed(tags):
        if tag.kind is not tool:
            continue
        if full and tag.number < oldest:
            # A call's tags are numbered from its own tag up, so no older tag belongs to
            # a call taken or shares a member's number: stop, rather than walk them all.
            break
        key = _call_of(tag)
        if key not in taken and tag.number not in members:
            # A new call starts, so the newer ones are complete: stop taking calls once
            # the mass floor and the recency minimum are both met. Keep scanning, for
            # the older tags of calls already taken.
            full = full or (cumulative >= floor and calls >= MIN_PROTECTED_CALLS)
            if full:
                continue
            calls += 1
        if key not in taken:
            oldest = key if not taken else min(oldest, key)
            taken.add(key)
        members.add(tag.number)
        cumulative += max(tag.tokens, 0)
    return frozenset(members)


def newest_reduce_tags(tags: Sequence[TailTag]) -> frozenset[int]:
    """The active tags of the newest ctx_reduce calls, which are never reclaimable.

    :param tags: tag rows in ascending tag-number order; a call's tags are numbered
        from the call's own (`TailTag.call`) up.
    """
    found: set[int] = set()
    taken: set[int] = set()
    oldest: int | None = None  # the smallest key in `taken`, once it is full
    tool, active = TagKind.TOOL, TagState.ACTIVE
    for tag in reversed(tags):
        if oldest is not None and tag.number < oldest:
            break  # as in `protection_window`: no older tag belongs to a call taken
        if tag.tool_name == REDUCE_TOOL_NAME and tag.kind is tool and tag.state is active:
            key = _call_of(tag)
            if key not in taken:
                if len(taken) == PROTECTED_REDUCE_CALLS:
                    continue
                taken.add(key)
                if len(taken) == PROTECTED_REDUCE_CALLS:
                    oldest = min(taken)
            found.add(tag.number)
    return frozenset(found)


def _call_of(tag: TailTag) -> int:
    """What makes tags one call: the call's tag, else the tag itself."""
    return tag.number if tag.call is None else tag.call
