"""Channel 2: when a tool-output reminder is not enough, ask for a prune in a user turn.

A tail *cycle* is one stretch of accumulating reclaimable mass. It arms the first time
the measurement meets the Channel 2 predicate, gets at most one synthetic message (the
bus lease in `_channel2_lease` sees to that across processes), and is never armed
again. A new cycle starts only once the agent or the host has really cut the tail:

- U fell below the reclaimable floor (`NudgeFloors.reclaimable`: the agent pruned), or
- T fell below what it was when the cycle armed. Turns only ever add to T, so only a
  removal can do that: a compaction, or drops the agent made.

Cycle numbers live in the agent's persisted `NudgeState`, which all of its processes
share, so every process names the same lease and the same directive id. The message
is a `SyntheticMessage` carrying that id; the agent host receives it through its
`HostAdapter` and must be able to say later whether it already holds it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from ctxbus.agents.nudges._bands import DEFAULT_FLOORS, NudgeFloors, channel2_armed
from ctxbus.agents.nudges._hints import ReclaimHint
from ctxbus.agents.nudges._hygiene import TailMeasure
from ctxbus.agents.nudges._markers import REMINDER_CLOSE, REMINDER_OPEN
from ctxbus.agents.nudges._reminders import format_hints, spent_summary
from ctxbus.agents.nudges._state import Channel2State, NudgeStateStore
from ctxbus.agents.nudges._tail import PartKind, TailPart
from ctxbus.schemas import Domain

if TYPE_CHECKING:  # the lease module builds on the message types defined here
    from ctxbus.agents.nudges._channel2_lease import Channel2Lease, Delivery

__all__ = [
    "DIRECTIVE_PREFIX",
    "Channel2",
    "HostAdapter",
    "SyntheticMessage",
    "advance_cycle",
    "channel2_text",
    "directive_id",
]

DIRECTIVE_PREFIX: Final = "c2-"
"""Marks a directive id as a Channel 2 message's."""


def directive_id(domain: Domain, agent_id: str, cycle: int) -> str:
    """The id every process derives for one agent's Channel 2 message of one cycle.

    Hashed so the id is short and opaque, the same in every process and after every
    restart, and never leaks numbers into what a host may show.
    """
    seed = f"{domain}/{agent_id}/{cycle}".encode()
    return DIRECTIVE_PREFIX + hashlib.blake2b(seed, digest_size=10).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticMessage:
    """A user-role message written by ctxbus, not by the user.

    It never counts as a real user turn, and the hygiene walk leaves it out of T
    (`tail_part` marks it synthetic).
    """

    directive_id: str
    """Deterministic per agent and cycle; the host stores it with the message."""
    cycle: int
    text: str
    role: Literal["user"] = "user"
    synthetic: Literal[True] = True
    counts_as_user_turn: Literal[False] = False

    def tail_part(self, key: str) -> TailPart:
        """How the message appears to the hygiene walk once it is in the conversation."""
        return TailPart(key=key, kind=PartKind.TEXT, text=self.text, synthetic=True)


class HostAdapter(Protocol):
    """What Channel 2 needs from the agent host (the chat loop that owns the transcript)."""

    async def deliver(self, message: SyntheticMessage) -> None:
        """Add `message` to the conversation as a synthetic user turn.

        Return only once the host has recorded it, so that `already_delivered` answers
        True from then on, in any process.

        :raises Exception: any, when the message was not sent; the cycle goes back to
            pending and a later call tries again.
        """
        ...

    async def already_delivered(self, directive_id: str) -> bool:
        """Whether the conversation already holds the message with this directive id."""
        ...


_BODY = (
    "Before your next step, call ctx_reduce on the tool outputs you have finished with: "
    "{summary} could be released. Then carry on with your task."
)
_SYNTHETIC_OPEN = REMINDER_OPEN.lstrip("\n")
"""A whole message, not a span appended to a tool output: no leading blank line."""


def channel2_text(*, outputs: int, tokens: int, hints: Sequence[ReclaimHint]) -> str:
    """The words of the synthetic message: what could go, about how much, where to start.

    Like Channel 1, it names counts and a token figure, never percentages or window
    sizes.
    """
    body = _BODY.format(summary=spent_summary(outputs, tokens))
    named = format_hints(hints)
    if named:
        body = f"{body}\nStart with: {named}."
    return f"{_SYNTHETIC_OPEN}{body}{REMINDER_CLOSE}"


def advance_cycle(state: Channel2State, *, u: int, t: int, floors: NudgeFloors = DEFAULT_FLOORS) -> Channel2State:
    """The Channel 2 state after one measurement: start a new cycle, arm it, or keep it.

    Pure, so every process that replays the same measurements agrees on the cycle.

    :param floors: the rules' absolute figures for the agent's window.
    """
    if state.armed_t is not None and (u < floors.reclaimable or t < state.armed_t):
        state = Channel2State(cycle=state.cycle + 1)
    if state.armed_t is None and channel2_armed(u, t, floors=floors):
        state = state.model_copy(update={"armed_t": t})
    return state


class Channel2:
    """Channel 2 for one agent: tracks cycles and delivers each armed cycle's message once.

    One instance per agent process; calls to `observe` must not overlap. The store is
    read and written on the calling thread (the event loop): with no await between a
    load and its save, Channel 1 writing its section meanwhile cannot be lost.
    """

    def __init__(self, store: NudgeStateStore, lease: Channel2Lease) -> None:
        """
        :param store: the agent's nudge state (shared with Channel 1; only the
            `channel2` section is written here).
        :param lease: the agent's Channel 2 lease, with its host adapter.
        """
        self._store = store
        self._lease = lease
        self._seen: Channel2State | None = None
        """The state as last read or written here, for the repr (which must not read)."""

    def __repr__(self) -> str:
        seen = "not read yet" if self._seen is None else repr(self._seen)
        return f"Channel2({seen}, {self._lease!r})"

    @property
    def state(self) -> Channel2State:
        """The persisted Channel 2 state."""
        self._seen = self._store.load().channel2
        return self._seen

    async def observe(self, measure: TailMeasure) -> Delivery | None:
        """Advance the cycle for `measure` and deliver its message if it is due.

        Call it after each walk. Returns None when nothing was due: the predicate does
        not hold, or this cycle is already known delivered. A BUSY or FAILED delivery
        is simply tried again at the next call that is still in the band.

        :raises BusError: if the bus fails before anything was sent.
        """
        before = self.state
        state = advance_cycle(before, u=measure.u, t=measure.t, floors=measure.floors)
        delivery = None
        if measure.channel2 and not state.delivered:
            text = channel2_text(outputs=measure.spent_outputs, tokens=measure.u, hints=measure.hints)
            delivery = await self._lease.deliver(state.cycle, text=text)
            if delivery.done:
                state = state.model_copy(update={"delivered": True})
        if state != before:
            self._save(state)
        return delivery

    def _save(self, state: Channel2State) -> None:
        # Reload first: Channel 1 may have saved its section while we were delivering.
        # No await between the two, so nothing else on the loop can write in between.
        latest = self._store.load()
        self._store.save(latest.model_copy(update={"channel2": state}))
        self._seen = state
