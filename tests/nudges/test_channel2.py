"""Channel 2 for one agent: tail cycles, the message text, persisted state, delivery.

The lease protocol itself is covered in `test_channel2_lease.py`; here the bus is the
session's real server and the host is our own recording adapter.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from ctxbus.agents.nudges import (
    MIN_RECLAIMABLE_TOKENS,
    Channel2,
    Channel2Lease,
    Channel2State,
    DeliveryOutcome,
    HygieneWalker,
    MemoryNudgeStateStore,
    NudgeState,
    PartKind,
    ReclaimHint,
    SqliteNudgeStateStore,
    SyntheticMessage,
    TailMeasure,
    TailPart,
    advance_cycle,
    channel2_text,
    tool_category,
)
from ctxbus.bus import Leases
from ctxbus.schemas import Domain
from tests.nudges.helpers import WordCounter
from tests.nudges.test_channel2_lease import Host
from tests.nudges.test_reminders import our_facts, reference_facts

IN_BAND = (160_000, 200_000)
"""U, T meeting the Channel 2 predicate (U >= 50k, U/T >= 0.75)."""
URGENT_ONLY = (130_000, 200_000)
"""U/T = 0.65: urgent, not Channel 2."""


def measure(u: int, t: int, *, outputs: int = 16, hints: tuple[ReclaimHint, ...] = ()) -> TailMeasure:
    return TailMeasure(u=u, t=t, spent_outputs=outputs, hints=hints, protected=frozenset(), full=False)


def hint(tag: int, name: str) -> ReclaimHint:
    return ReclaimHint(tool_category(name), tag, name)


# --- cycles --------------------------------------------------------------------------


def test_a_cycle_arms_once_and_keeps_its_number_while_the_tail_grows() -> None:
    state = advance_cycle(Channel2State(), u=URGENT_ONLY[0], t=URGENT_ONLY[1])
    assert state == Channel2State()  # not in the band: nothing to arm
    state = advance_cycle(state, u=IN_BAND[0], t=IN_BAND[1])
    assert state == Channel2State(cycle=0, armed_t=IN_BAND[1])
    delivered = state.model_copy(update={"delivered": True})
    for u, t in [(170_000, 210_000), (130_000, 220_000), (MIN_RECLAIMABLE_TOKENS, 230_000)]:
        assert advance_cycle(delivered, u=u, t=t) == delivered  # never re-armed


def test_a_new_cycle_starts_when_u_falls_below_the_floor() -> None:
    armed = Channel2State(cycle=4, armed_t=200_000, delivered=True)
    assert advance_cycle(armed, u=MIN_RECLAIMABLE_TOKENS - 1, t=250_000) == Channel2State(cycle=5)


def test_a_new_cycle_starts_when_the_tail_shrank() -> None:
    armed = Channel2State(cycle=4, armed_t=200_000, delivered=True)
    assert advance_cycle(armed, u=120_000, t=199_999) == Channel2State(cycle=5)
    # ... and arms at once if the compacted tail is still in the band.
    assert advance_cycle(armed, u=150_000, t=190_000) == Channel2State(cycle=5, armed_t=190_000)


def test_an_unarmed_cycle_is_not_renumbered() -> None:
    quiet = Channel2State(cycle=2)
    assert advance_cycle(quiet, u=0, t=10) == quiet


# --- text ----------------------------------------------------------------------------


def test_same_facts_as_the_reference(copy_golden: dict[str, dict[str, Any]]) -> None:
    case = copy_golden["channel2"]
    hints = tuple(hint(h["tag_number"], h["tool_name"]) for h in case["hint"])
    ours = channel2_text(outputs=case["reclaimable_tool_outputs"], tokens=case["reclaimable_tokens"], hints=hints)
    assert our_facts(ours) == reference_facts(case["expected"])
    assert ours != case["expected"]
    # A whole message in a reminder span, like the reference: no leading blank line.
    for text in (ours, case["expected"]):
        assert text.startswith("<system-reminder>\n") and text.endswith("\n</system-reminder>")
        assert "ctx_reduce" in text


def test_no_percentages_or_window_sizes() -> None:
    text = channel2_text(outputs=12, tokens=64_400, hints=(hint(7, "bash"), hint(31, "read")))
    assert "%" not in text
    assert sorted(int(n) for n in re.findall(r"\d+", text)) == [7, 12, 31, 64]


def test_without_hints_there_is_no_start_line() -> None:
    text = channel2_text(outputs=1, tokens=51_000, hints=())
    assert "Start with" not in text and "1 used tool output (about 51k tokens)" in text


def test_a_synthetic_message_is_left_out_of_the_tail_and_of_user_turns() -> None:
    message = SyntheticMessage(directive_id="c2-x", cycle=0, text=channel2_text(outputs=3, tokens=60_000, hints=()))
    assert not message.counts_as_user_turn
    before = [TailPart(key="u1", kind=PartKind.TEXT, text="hello there")]
    walker = HygieneWalker(WordCounter(), protected_floor=0)
    plain = walker.measure(before, [])
    with_message = HygieneWalker(WordCounter(), protected_floor=0).measure([*before, message.tail_part("c2")], [])
    assert with_message.t == plain.t == 2


# --- persisted state -----------------------------------------------------------------


def test_a_payload_from_before_channel2_still_loads(tmp_path: Path) -> None:
    old = '{"version": 1, "channel1": {"level": "firm", "last_u": 70000, "last_fire_turn": 3, "grace": null}}'
    state = NudgeState.model_validate_json(old)
    assert state.channel2 == Channel2State() and state.channel1.last_u == 70_000
    store = SqliteNudgeStateStore(tmp_path / "agent.db")
    store.save(state.model_copy(update={"channel2": Channel2State(cycle=3, armed_t=99, delivered=True)}))
    assert store.load().channel2 == Channel2State(cycle=3, armed_t=99, delivered=True)


# --- Channel2 ------------------------------------------------------------------------


@pytest.fixture
async def leases(nats_client: Client) -> Leases:
    store = Leases(nats_client)
    await store.ensure()
    return store


def channel2_for(
    leases: Leases, host: Host, domain: Domain, store: MemoryNudgeStateStore | SqliteNudgeStateStore
) -> Channel2:
    return Channel2(store, Channel2Lease(leases, host, domain=domain, agent_id="agent"))


async def test_one_message_per_cycle_and_a_new_one_after_the_agent_pruned(leases: Leases) -> None:
    host = Host()
    store = MemoryNudgeStateStore()
    channel2 = channel2_for(leases, host, Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}"), store)

    assert await channel2.observe(measure(*URGENT_ONLY)) is None
    first = await channel2.observe(measure(*IN_BAND, hints=(hint(123, "read"),)))
    assert first is not None and first.outcome is DeliveryOutcome.SENT
    assert channel2.state == Channel2State(cycle=0, armed_t=IN_BAND[1], delivered=True)
    assert await channel2.observe(measure(170_000, 210_000)) is None  # same cycle: not even looked up
    assert await channel2.observe(measure(20_000, 150_000)) is None  # pruned: cycle 1 begins
    assert channel2.state == Channel2State(cycle=1)
    second = await channel2.observe(measure(*IN_BAND))
    assert second is not None and second.outcome is DeliveryOutcome.SENT

    assert [m.cycle for m in host.sent] == [0, 1]
    assert host.sent[0].directive_id != host.sent[1].directive_id
    assert our_facts(host.sent[0].text).hints == ((123, "read"),)

    def no_reading() -> NudgeState:
        raise AssertionError("a repr must not read the store")

    store.load = no_reading  # type: ignore[method-assign]
    last_seen = Channel2State(cycle=1, armed_t=IN_BAND[1], delivered=True)
    assert repr(channel2).startswith(f"Channel2({last_seen!r}, <Channel2Lease "), repr(channel2)


async def test_a_failed_send_is_retried_at_the_next_walk(leases: Leases) -> None:
    host = Host(failures=1)
    channel2 = channel2_for(leases, host, Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}"), MemoryNudgeStateStore())
    failed = await channel2.observe(measure(*IN_BAND))
    assert failed is not None and failed.outcome is DeliveryOutcome.FAILED
    assert not channel2.state.delivered
    retried = await channel2.observe(measure(165_000, 205_000))
    assert retried is not None and retried.outcome is DeliveryOutcome.SENT and len(host.sent) == 1


async def test_two_processes_of_one_agent_send_once(leases: Leases, tmp_path: Path) -> None:
    """Both share the agent's SQLite file, so they agree on the cycle and race for one lease."""
    host = Host()
    domain = Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}")
    path = tmp_path / "agent.db"
    one = channel2_for(leases, host, domain, SqliteNudgeStateStore(path))
    two = channel2_for(leases, host, domain, SqliteNudgeStateStore(path))
    sent = await one.observe(measure(*IN_BAND))
    assert sent is not None and sent.outcome is DeliveryOutcome.SENT
    assert await two.observe(measure(*IN_BAND)) is None
    # A process with its own store still finds the lease delivered.
    three = channel2_for(leases, host, domain, MemoryNudgeStateStore())
    again = await three.observe(measure(*IN_BAND))
    assert again is not None and again.outcome is DeliveryOutcome.ALREADY
    assert len(host.sent) == 1


async def test_channel1_state_saved_meanwhile_is_kept(leases: Leases) -> None:
    store = MemoryNudgeStateStore()
    channel2 = channel2_for(leases, Host(), Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}"), store)
    original = store.load

    def load_then_channel1_writes() -> NudgeState:
        state = original()
        changed = state.channel1.model_copy(update={"last_u": 42})
        store.save(state.model_copy(update={"channel1": changed}))
        return state

    store.load = load_then_channel1_writes  # type: ignore[method-assign]
    await channel2.observe(measure(*IN_BAND))
    store.load = original  # type: ignore[method-assign]
    assert store.load().channel1.last_u == 42 and store.load().channel2.delivered
