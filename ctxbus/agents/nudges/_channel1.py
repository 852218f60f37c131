"""Channel 1: a reminder appended to the output of the tool call that just ended.

The aim is to be heard without nagging:

- a rise above the highest band announced so far fires the full reminder for it;
- the same band fires again only as a calm one-liner, and only once U has grown by
  `refire_growth(T)` since the last reminder and the user has spoken at least
  `REFIRE_MIN_USER_TURNS` times (a long autonomous run is not a reason to repeat);
- a fall to a lower band is recorded silently, and the re-fire cadence then counts
  from the lower of the last reminder's U and U at the fall; climbing back to a band
  already announced is the same band firing again (at most the calm re-fire), so a
  tail that flaps across a boundary is not told twice in full, while one that fell
  far (a compaction) and regrew is told again;
- a quiet band resets everything but a running grace, so the next band speaks in full;
- after ctx_reduce the agent has just complied: stay quiet until U regrows by the
  same cadence above its post-reduce value, or the band climbs above the one seen
  before the reduce; the cadence then counts from the post-reduce value, and only the
  band seen then (no higher than before the reduce) counts as announced.

`decide` is a pure function of the persisted state and one measurement; `Channel1`
wires it to the store and the reminder text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ctxbus.agents.nudges._bands import DEFAULT_FLOORS, Band, NudgeFloors, channel1_band, refire_growth
from ctxbus.agents.nudges._hygiene import TailMeasure
from ctxbus.agents.nudges._protection import REDUCE_TOOL_NAME
from ctxbus.agents.nudges._reminders import Reminder
from ctxbus.agents.nudges._state import Channel1State, NudgeState, NudgeStateStore, PostReduceGrace

__all__ = [
    "REFIRE_MIN_USER_TURNS",
    "Channel1",
    "Channel1Decision",
    "Channel1Outcome",
    "Verdict",
    "decide",
    "start_grace",
]

REFIRE_MIN_USER_TURNS = 5
"""Real user turns that must pass before the same band may be mentioned again."""


class Verdict(StrEnum):
    """Why Channel 1 did or did not speak."""

    RISE = "rise"
    """Fired: the band rose, full reminder."""
    REFIRE = "refire"
    """Fired: same band, enough growth and turns, calm one-liner."""
    QUIET = "quiet"
    """Held: the tail is healthy; the state is reset, except a running grace."""
    DOWNGRADE = "downgrade"
    """Held: the band fell; recorded so a later rise speaks again."""
    CADENCE = "cadence"
    """Held: same band, U has not grown enough since the last reminder."""
    TURNS = "turns"
    """Held: same band and enough growth, but too few real user turns."""
    GRACE = "grace"
    """Held: the agent reduced recently and U has not regrown."""
    SKIPPED = "skipped"
    """Held: the tool was ctx_reduce itself, which never carries a reminder."""


_FIRED = frozenset({Verdict.RISE, Verdict.REFIRE})


@dataclass(frozen=True, slots=True)
class Channel1Decision:
    """The verdict for one tool call and the state to persist after it."""

    verdict: Verdict
    band: Band
    """The Channel 1 band measured (never CHANNEL2)."""
    state: Channel1State

    @property
    def fire(self) -> bool:
        """Whether a reminder is appended."""
        return self.verdict in _FIRED

    @property
    def calm(self) -> bool:
        """Whether the reminder is the one-line re-fire."""
        return self.verdict is Verdict.REFIRE


def decide(
    state: Channel1State, u: int, t: int, *, user_turn: int, floors: NudgeFloors = DEFAULT_FLOORS
) -> Channel1Decision:
    """Decide whether the tool call that just ended gets a reminder.

    :param state: the persisted state before this call.
    :param u: reclaimable tokens now.
    :param t: eligible tail tokens now.
    :param user_turn: how many real user turns the conversation has had; synthetic
        messages never count.
    :param floors: the rules' absolute figures for the agent's window.
    """
    band = channel1_band(u, t, floors=floors)
    growth = refire_growth(t, floors=floors)

    if band is Band.QUIET:
        # The grace outlives a quiet dip: the drops or a compaction often take T under
        # its floor right after a reduce, which says nothing about U regrowing since.
        return Channel1Decision(Verdict.QUIET, band, Channel1State(grace=state.grace))

    if state.grace is not None:
        before = state.grace.pre_reduce_level
        baseline = state.grace.baseline_u
        regrown = u - baseline >= growth
        escalated = band.rank > before.rank
        if not regrown and not escalated:
            return Channel1Decision(Verdict.GRACE, band, state)
        # The re-fire cadence counts from what the reduce left, not from before it. The
        # reduce answered the reminders before it: a band above the one the tail is in
        # now, or above the one before the reduce, speaks in full again.
        announced = min(band, before, state.announced, key=lambda b: b.rank)
        state = state.model_copy(update={"grace": None, "last_u": baseline, "announced": announced})

    if band.rank < state.level.rank:
        # Growth counts from the low point: a tail that fell far (a compaction) and
        # regrew past the cadence hears the band again, though U is still below the
        # last reminder's. A small flap across a boundary barely lowers it.
        fell = {"level": band, "last_u": min(state.last_u, u)}
        return Channel1Decision(Verdict.DOWNGRADE, band, state.model_copy(update=fell))

    if band.rank > state.announced.rank:
        rise = {"level": band, "announced": band, "last_u": u, "last_fire_turn": user_turn}
        return Channel1Decision(Verdict.RISE, band, state.model_copy(update=rise))
    # The same band, or back up to one already announced: at most the calm re-fire.
    fired = state.model_copy(update={"level": band, "last_u": u, "last_fire_turn": user_turn})
    held = state.model_copy(update={"level": band}) if band is not state.level else state
    if u - state.last_u < growth:
        return Channel1Decision(Verdict.CADENCE, band, held)
    if _too_few_turns(state.last_fire_turn, user_turn):
        return Channel1Decision(Verdict.TURNS, band, held)
    return Channel1Decision(Verdict.REFIRE, band, fired)


def _too_few_turns(last_fire_turn: int | None, user_turn: int) -> bool:
    # A counter that went backwards (a rebuilt history) must not silence Channel 1.
    if last_fire_turn is None or user_turn < last_fire_turn:
        return False
    return user_turn - last_fire_turn < REFIRE_MIN_USER_TURNS


def start_grace(
    state: Channel1State, *, post_reduce_u: int, post_reduce_t: int = 0, floors: NudgeFloors = DEFAULT_FLOORS
) -> Channel1State:
    """The state after a successful ctx_reduce: quiet until U regrows or the band climbs.

    :param post_reduce_t: T measured with `post_reduce_u`. When the reduce left a higher
        band than the one seen before it (its own call taking a slot of the protection
        window), only a band above that one is an escalation.
    :param floors: the rules' absolute figures for the agent's window.
    """
    level, left = state.level, channel1_band(post_reduce_u, post_reduce_t, floors=floors)
    if left is not Band.CHANNEL2 and left.rank > level.rank:
        level = left
    grace = PostReduceGrace(baseline_u=max(post_reduce_u, 0), pre_reduce_level=level)
    return state.model_copy(update={"grace": grace})


@dataclass(frozen=True, slots=True)
class Channel1Outcome:
    """What `Channel1.after_tool_call` decided, with the reminder if one fires."""

    decision: Channel1Decision
    reminder: Reminder | None

    @property
    def text(self) -> str:
        """The span to append to the tool output, or an empty string."""
        return self.reminder.text if self.reminder is not None else ""


class Channel1:
    """Channel 1 for one agent: decides after each tool call and persists its state."""

    def __init__(self, store: NudgeStateStore) -> None:
        self._store = store
        self._seen: Channel1State | None = None
        """The state as last read or written here, for the repr (which must not read)."""

    def __repr__(self) -> str:
        return f"Channel1({'not read yet' if self._seen is None else repr(self._seen)})"

    @property
    def state(self) -> Channel1State:
        """The persisted Channel 1 state."""
        return self._load().channel1

    def _load(self) -> NudgeState:
        stored = self._store.load()
        self._seen = stored.channel1
        return stored

    def _save(self, stored: NudgeState, state: Channel1State) -> None:
        self._store.save(stored.model_copy(update={"channel1": state}))
        self._seen = state

    def after_tool_call(self, tool_name: str, measure: TailMeasure, *, user_turn: int) -> Channel1Outcome:
        """Decide for the tool call that just ended and persist the new state.

        :param tool_name: the tool that ran; ctx_reduce never gets a reminder (call
            `after_reduce` for it instead).
        :param measure: the tail measured with this tool's output in it.
        :param user_turn: real user turns so far.
        """
        stored = self._load()
        current = stored.channel1
        if tool_name == REDUCE_TOOL_NAME:
            skipped = Channel1Decision(
                Verdict.SKIPPED, channel1_band(measure.u, measure.t, floors=measure.floors), current
            )
            return Channel1Outcome(skipped, None)
        decision = decide(current, measure.u, measure.t, user_turn=user_turn, floors=measure.floors)
        if decision.state != current:
            self._save(stored, decision.state)
        if not decision.fire:
            return Channel1Outcome(decision, None)
        reminder = Reminder(
            level=decision.state.level,
            calm=decision.calm,
            outputs=measure.spent_outputs,
            tokens=measure.u,
            hints=measure.hints,
        )
        return Channel1Outcome(decision, reminder)

    def after_reduce(self, measure: TailMeasure) -> None:
        """Start the compliance grace after ctx_reduce queued at least one drop.

        Call it again once the reduce's own result is recorded: the grace then counts
        from the tail as the reduce left it.

        :param measure: the tail measured after the drops were queued, so its U no
            longer includes them.
        """
        stored = self._load()
        grace = start_grace(stored.channel1, post_reduce_u=measure.u, post_reduce_t=measure.t, floors=measure.floors)
        self._save(stored, grace)
