"""Channel 1 sequences: rise, re-fire, downgrade, quiet, grace, and a restart in the middle.

T is 200k unless said otherwise, so the bands start at U = 40k (gentle), 80k (firm)
and 120k (urgent), and a re-fire needs 25k of growth.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from ctxbus.agents.nudges import (
    REDUCE_TOOL_NAME,
    Band,
    Channel1,
    Channel1Decision,
    Channel1Level,
    Channel1State,
    MemoryNudgeStateStore,
    NudgeState,
    NudgeStateCorrupt,
    ReclaimHint,
    Reminder,
    SqliteNudgeStateStore,
    TailMeasure,
    ToolCategory,
    Verdict,
    decide,
    start_grace,
)
from tests.nudges.helpers import measure_of

T = 200_000


def run(steps: list[tuple[int, int]], *, t: int = T, state: Channel1State | None = None) -> list[Verdict]:
    """Feed (U, user turn) steps through `decide`, carrying the state along."""
    current = state or Channel1State()
    verdicts = []
    for u, turn in steps:
        decision = decide(current, u, t, user_turn=turn)
        verdicts.append(decision.verdict)
        current = decision.state
    return verdicts


def fired_at(level: Channel1Level, u: int, turn: int = 0) -> Channel1State:
    return Channel1State(level=level, last_u=u, last_fire_turn=turn)


def test_each_rise_fires_the_full_reminder() -> None:
    assert run([(10_000, 0), (45_000, 0), (85_000, 0), (125_000, 0)]) == [
        Verdict.QUIET,
        Verdict.RISE,
        Verdict.RISE,
        Verdict.RISE,
    ]


def test_a_rise_records_level_growth_base_and_turn() -> None:
    decision = decide(Channel1State(), 45_000, T, user_turn=3)
    assert decision.fire and not decision.calm
    assert decision.state == Channel1State(level=Band.GENTLE, last_u=45_000, last_fire_turn=3)


def test_same_band_refires_calmly_with_enough_growth_and_turns() -> None:
    decision = decide(fired_at(Band.GENTLE, 45_000), 70_000, T, user_turn=5)
    assert decision.verdict is Verdict.REFIRE
    assert decision.fire and decision.calm
    assert decision.state == fired_at(Band.GENTLE, 70_000, turn=5)


@pytest.mark.parametrize(
    ("u", "turn", "verdict"),
    [
        (69_999, 9, Verdict.CADENCE),  # 24,999 of growth
        (70_000, 4, Verdict.TURNS),  # enough growth, four turns
        (70_000, 5, Verdict.REFIRE),
    ],
)
def test_same_band_needs_growth_and_turns(u: int, turn: int, verdict: Verdict) -> None:
    decision = decide(fired_at(Band.GENTLE, 45_000), u, T, user_turn=turn)
    assert decision.verdict is verdict
    if not decision.fire:
        assert decision.state == fired_at(Band.GENTLE, 45_000)


def test_refire_growth_scales_with_a_large_tail() -> None:
    """At T = 400k the cadence is 8% of T (32k), not the 25k floor."""
    state = fired_at(Band.GENTLE, 100_000)
    assert decide(state, 131_999, 400_000, user_turn=10).verdict is Verdict.CADENCE
    assert decide(state, 132_000, 400_000, user_turn=10).verdict is Verdict.REFIRE


def test_a_turn_counter_that_went_backwards_does_not_silence() -> None:
    assert decide(fired_at(Band.GENTLE, 45_000, turn=9), 70_000, T, user_turn=2).verdict is Verdict.REFIRE


def test_downgrade_is_silent_and_only_a_band_above_the_announced_one_speaks_in_full() -> None:
    state = fired_at(Band.FIRM, 85_000)
    down = decide(state, 50_000, T, user_turn=1)
    assert down.verdict is Verdict.DOWNGRADE and not down.fire
    assert down.state == Channel1State(level=Band.GENTLE, announced=Band.FIRM, last_u=50_000, last_fire_turn=0)
    assert decide(down.state, 125_000, T, user_turn=1).verdict is Verdict.RISE


@pytest.mark.parametrize(
    ("u", "turn", "verdict"),
    [
        (84_999, 9, Verdict.CADENCE),  # 24,999 above the 60k of the fall
        (85_000, 4, Verdict.TURNS),
        (85_000, 5, Verdict.REFIRE),
    ],
)
def test_climbing_back_to_the_announced_band_is_a_calm_refire(u: int, turn: int, verdict: Verdict) -> None:
    """firm -> gentle -> firm: the second firm is the same band firing again, not a rise;
    its cadence counts from U at the fall (60k), not from the firm reminder's 90k."""
    down = decide(fired_at(Band.FIRM, 90_000), 60_000, T, user_turn=1).state
    decision = decide(down, u, T, user_turn=turn)
    assert decision.verdict is verdict
    assert decision.state.level is Band.FIRM and decision.state.announced is Band.FIRM
    assert decision.calm is decision.fire


def test_a_tail_flapping_across_a_boundary_hears_the_band_once() -> None:
    """The reviewer's trace (p10b): urgent at 40k, T grows past the boundary and back."""
    decisions = _walk([(40_166, 62_274), (40_166, 69_080), (55_472, 71_478), (55_472, 72_850)])
    assert [d.band for d in decisions] == [Band.URGENT, Band.FIRM, Band.URGENT, Band.URGENT]
    assert [d.verdict for d in decisions] == [Verdict.RISE, Verdict.DOWNGRADE, Verdict.CADENCE, Verdict.CADENCE]


def _walk(steps: list[tuple[int, int]], *, turns_each: int = 0) -> list[Channel1Decision]:
    """Feed (U, T) steps through `decide`, `turns_each` user turns apart, carrying the state along."""
    state, decisions = Channel1State(), []
    for step, (u, t) in enumerate(steps):
        decisions.append(decide(state, u, t, user_turn=step * turns_each))
        state = decisions[-1].state
    return decisions


def test_regrowth_after_a_fall_counts_from_the_low_point() -> None:
    """urgent at 65k, a compaction takes U to 25k (gentle), U regrows: with 85k
    reclaimable the agent is told again, though U never passes 65k + 25k."""
    steps = [(65_000, 100_000), (25_000, 70_000), (50_000, 80_000), (60_000, 95_000), (80_000, 110_000)]
    decisions = _walk([*steps, (85_000, 118_000)], turns_each=6)
    assert [d.band for d in decisions] == [Band.URGENT, Band.GENTLE, *[Band.URGENT] * 4]
    assert [d.verdict for d in decisions] == [
        Verdict.RISE,
        Verdict.DOWNGRADE,
        Verdict.REFIRE,  # 25k above the 25k of the fall; urgent was announced, so calm
        Verdict.CADENCE,
        Verdict.REFIRE,  # 30k above the 50k re-fire
        Verdict.CADENCE,
    ]
    assert decisions[1].state.last_u == 25_000
    assert all(d.calm for d in decisions[2:] if d.fire)


def test_quiet_resets_everything() -> None:
    decision = decide(fired_at(Band.URGENT, 130_000, turn=4), 10_000, T, user_turn=5)
    assert decision.verdict is Verdict.QUIET
    assert decision.state == Channel1State()
    assert run([(45_000, 5)], state=decision.state) == [Verdict.RISE]


def test_grace_holds_until_u_regrows_by_the_cadence() -> None:
    graced = start_grace(fired_at(Band.FIRM, 90_000), post_reduce_u=30_000)
    assert graced.grace is not None and graced.grace.pre_reduce_level is Band.FIRM
    assert run([(50_000, 9), (54_999, 9)], state=graced) == [Verdict.GRACE, Verdict.GRACE]
    released = decide(graced, 55_000, T, user_turn=9)
    assert released.state.grace is None
    assert released.verdict is Verdict.DOWNGRADE  # 55k is gentle, below the firm reminder
    assert decide(released.state, 85_000, T, user_turn=9).verdict is Verdict.RISE


def test_a_quiet_band_during_grace_resets_the_band_so_gentle_speaks_again() -> None:
    """urgent -> reduce -> quiet -> gentle (25k regrown): a full reminder, not a silent downgrade."""
    graced = start_grace(fired_at(Band.URGENT, 130_000, turn=4), post_reduce_u=5_000)
    quiet = decide(graced, 10_000, T, user_turn=5)
    assert quiet.verdict is Verdict.QUIET
    assert quiet.state == Channel1State(grace=graced.grace)
    assert run([(45_000, 5)], state=quiet.state) == [Verdict.RISE]


def test_a_quiet_dip_does_not_end_the_grace() -> None:
    """Compaction took T under the floor right after the reduce; U has not regrown since."""
    graced = start_grace(fired_at(Band.URGENT, 130_000, turn=4), post_reduce_u=35_000)
    dip = decide(graced, 36_000, 55_000, user_turn=5)
    assert dip.verdict is Verdict.QUIET
    assert decide(dip.state, 44_000, 62_000, user_turn=5).verdict is Verdict.GRACE  # urgent again


def test_regrowth_after_grace_counts_from_the_post_reduce_u() -> None:
    """Firm at 90k, reduced to 60k: firm again after 25k of regrowth is a calm re-fire,
    though 85k is below the 90k of the last reminder."""
    graced = start_grace(fired_at(Band.FIRM, 90_000, turn=1), post_reduce_u=60_000)
    assert run([(84_999, 9), (85_000, 9)], state=graced) == [Verdict.GRACE, Verdict.REFIRE]


def test_grace_ends_early_when_the_band_climbs_above_the_pre_reduce_band() -> None:
    graced = start_grace(fired_at(Band.GENTLE, 45_000), post_reduce_u=45_000)
    assert decide(graced, 60_000, T, user_turn=0).verdict is Verdict.GRACE
    escalated = decide(graced, 60_000, 140_000, user_turn=0)  # firm, only 15k of growth
    assert escalated.verdict is Verdict.RISE
    assert escalated.state.grace is None


def test_after_a_grace_only_the_band_before_the_reduce_counts_as_announced() -> None:
    """urgent, down to firm, reduce: urgent again ends the grace and speaks in full."""
    down = decide(fired_at(Band.URGENT, 130_000), 90_000, T, user_turn=1).state
    graced = start_grace(down, post_reduce_u=85_000)
    assert graced.grace is not None and graced.grace.pre_reduce_level is Band.FIRM
    assert decide(graced, 125_000, T, user_turn=1).verdict is Verdict.RISE


def test_a_band_the_reduce_itself_left_is_no_escalation() -> None:
    """Gentle before; the reduce's own call took a window slot and left the tail firm."""
    graced = start_grace(fired_at(Band.GENTLE, 45_000), post_reduce_u=85_000, post_reduce_t=T)
    assert graced.grace is not None and graced.grace.pre_reduce_level is Band.FIRM
    assert decide(graced, 90_000, T, user_turn=9).verdict is Verdict.GRACE
    assert decide(graced, 125_000, T, user_turn=9).verdict is Verdict.RISE  # urgent: above it


def test_channel1_appends_text_only_when_it_fires() -> None:
    channel = Channel1(MemoryNudgeStateStore())
    assert channel.after_tool_call("bash", measure_of(10_000, T), user_turn=0).text == ""
    rise = channel.after_tool_call("bash", measure_of(45_000, T), user_turn=0)
    assert rise.reminder is not None and not rise.reminder.calm
    assert rise.text == rise.reminder.text
    assert channel.state.level is Band.GENTLE


def test_the_reminder_reports_what_the_walk_measured() -> None:
    hint = ReclaimHint(ToolCategory.MISC, 12, "bash")
    measure = TailMeasure(u=130_000, t=T, spent_outputs=9, hints=(hint,), protected=frozenset(), full=False)
    reminder = Channel1(MemoryNudgeStateStore()).after_tool_call("bash", measure, user_turn=0).reminder
    assert reminder == Reminder(level=Band.URGENT, calm=False, outputs=9, tokens=130_000, hints=(hint,))
    assert measure.band is Band.URGENT and not measure.channel2


def test_ctx_reduce_itself_never_gets_a_reminder() -> None:
    channel = Channel1(MemoryNudgeStateStore())
    outcome = channel.after_tool_call(REDUCE_TOOL_NAME, measure_of(150_000, T), user_turn=0)
    assert outcome.decision.verdict is Verdict.SKIPPED
    assert outcome.text == ""
    assert channel.state == Channel1State()


def test_a_restart_in_the_middle_keeps_the_decision_state(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    first = Channel1(SqliteNudgeStateStore(path))
    assert first.after_tool_call("bash", measure_of(85_000, T), user_turn=1).decision.verdict is Verdict.RISE

    restarted = Channel1(SqliteNudgeStateStore(path))
    assert restarted.state == fired_at(Band.FIRM, 85_000, turn=1)
    assert restarted.after_tool_call("bash", measure_of(90_000, T), user_turn=2).decision.verdict is Verdict.CADENCE
    restarted.after_reduce(measure_of(20_000, T))

    again = Channel1(SqliteNudgeStateStore(path))
    assert again.after_tool_call("bash", measure_of(40_000, T), user_turn=3).decision.verdict is Verdict.GRACE
    calm = again.after_tool_call("read", measure_of(110_000, T), user_turn=9)
    assert calm.decision.verdict is Verdict.REFIRE  # grace over, firm again, 90k above the post-reduce 20k
    assert calm.reminder is not None and calm.reminder.calm


def test_sqlite_scopes_are_independent(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    Channel1(SqliteNudgeStateStore(path, scope="a")).after_tool_call("bash", measure_of(45_000, T), user_turn=0)
    assert Channel1(SqliteNudgeStateStore(path, scope="b")).state == Channel1State()


def test_state_round_trips_as_json() -> None:
    state = NudgeState(channel1=start_grace(fired_at(Band.URGENT, 130_000, turn=7), post_reduce_u=12_000))
    payload = state.model_dump_json()
    assert '"level":"urgent"' in payload
    assert NudgeState.model_validate_json(payload) == state


def test_the_announced_band_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    first = Channel1(SqliteNudgeStateStore(path))
    first.after_tool_call("bash", measure_of(85_000, T), user_turn=0)
    first.after_tool_call("bash", measure_of(70_000, T), user_turn=0)  # down to gentle, silently

    restarted = Channel1(SqliteNudgeStateStore(path))
    assert (restarted.state.level, restarted.state.announced) == (Band.GENTLE, Band.FIRM)
    assert restarted.after_tool_call("bash", measure_of(90_000, T), user_turn=0).decision.verdict is Verdict.CADENCE


def test_a_state_stored_before_announced_loads_as_announced_at_its_level(tmp_path: Path) -> None:
    """A stored v1 payload without the field: its band was announced, so it must not fire in full again."""
    store = SqliteNudgeStateStore(tmp_path / "agent.sqlite")
    store.save(NudgeState())
    stored = '{"version":1,"channel1":{"level":"firm","last_u":85000,"last_fire_turn":2,"grace":null}}'
    with closing(sqlite3.connect(tmp_path / "agent.sqlite")) as conn, conn:
        conn.execute("UPDATE nudge_state SET body = ?", (stored,))
    assert store.load().channel1 == Channel1State(level=Band.FIRM, announced=Band.FIRM, last_u=85_000, last_fire_turn=2)
    assert (
        Channel1(store).after_tool_call("bash", measure_of(90_000, T), user_turn=2).decision.verdict is Verdict.CADENCE
    )


def test_a_corrupt_stored_state_is_reported(tmp_path: Path) -> None:
    store = SqliteNudgeStateStore(tmp_path / "agent.sqlite")
    store.save(NudgeState())
    with closing(sqlite3.connect(tmp_path / "agent.sqlite")) as conn, conn:
        conn.execute("UPDATE nudge_state SET body = ?", ('{"version": 1, "channel1": {"level": "channel2"}}',))
    with pytest.raises(NudgeStateCorrupt, match="scope 'agent'"):
        store.load()


class CountingStore(MemoryNudgeStateStore):
    """Counts reads, so a test can tell whether something went to the store."""

    loads = 0

    def load(self) -> NudgeState:
        self.loads += 1
        return super().load()


def test_the_repr_shows_the_state_last_seen_without_reading_the_store() -> None:
    store = CountingStore()
    channel = Channel1(store)
    assert repr(channel) == "Channel1(not read yet)"
    channel.after_tool_call("bash", measure_of(45_000, T), user_turn=3)
    reads = store.loads
    assert repr(channel) == (
        "Channel1(Channel1State(level=<Band.GENTLE: 'gentle'>, announced=<Band.GENTLE: 'gentle'>,"
        " last_u=45000, last_fire_turn=3, grace=None))"
    )
    assert store.loads == reads
