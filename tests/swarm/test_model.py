"""The scripted model against a real Agent: a failed ctx_reduce is a tool error, not a
crash, an archived CI log is only said to be found when the search found it, and a
commit answered as a duplicate is told apart from one made before a restart."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxbus.agents.nudges import REDUCE_TOOL_NAME
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.swarm._model import ScriptedModel
from ctxbus.agents.swarm._scenario import Propose
from ctxbus.agents.swarm._worker import SWARM_CONTEXT
from ctxbus.bus import NatsClient
from ctxbus.schemas import AddNote, Committed, Domain
from ctxbus.schemas._swarm_events import Tally
from tests._support import fresh_domain, running_coordinator

_Scripted = tuple[ScriptedModel, Tally, list[str]]


@pytest.fixture
def scripted(nats_client: NatsClient, tmp_path: Path) -> Iterator[_Scripted]:
    """A scripted model driving a real Agent, what it tallied and what it said; the agent is closed after."""
    domain = Domain.parse(f"sw/m2/{uuid.uuid4().hex[:8]}")
    config = AgentConfig(agent_id="a1", domain=domain, store=tmp_path / "a1.db", context=SWARM_CONTEXT)
    agent = Agent(nats_client, config)
    try:
        tally, said = Tally(), []
        agent.user("Goal: fix the flaky cache tests.")
        yield ScriptedModel(agent, tally, index=0, say=lambda _, line: said.append(line)), tally, said
    finally:
        agent.close()


async def test_a_reduce_naming_an_unknown_tag_is_reported_and_the_worker_goes_on(scripted: _Scripted) -> None:
    model, tally, said = scripted

    await model._reduce(3, [9_999], why="a stale hint")

    assert len(tally.unexpected) == 1 and "no such tag §9999§" in tally.unexpected[0]
    assert tally.reduces == 0 and said == []
    result = model.agent.context.messages()[-1]
    assert (result.role, result.tool_name) == ("tool", REDUCE_TOOL_NAME)
    assert result.content.startswith("error: ctx_reduce: no such tag §9999§")


async def test_each_archived_ci_log_is_found_by_search_and_read_from_the_hits(scripted: _Scripted) -> None:
    model, tally, said = scripted
    logs = []
    for n in (9, 19, 29):  # later searches also hit the earlier logs, searches and reads
        logs.append(model.agent.context.next_tag + 1)  # after the call, its result
        await model._call(n, "ci_logs", "test-cache (3.11)")
    assert [model.agent.context.message(tag).state for tag in logs] == ["archived"] * 3
    assert tally.unexpected == [] and (tally.searches, tally.reads) == (3, 3)
    assert [line for line in said if "found the failure" in line] == [
        f"archived CI log §{tag}§: found the failure with ctx_search + ctx_read" for tag in logs
    ]
    listings = [m.content for m in model.agent.context.messages() if m.role == "tool" and m.tool_name == "ctx_search"]
    assert [f"§{tag}§ ci_logs" in listing for tag, listing in zip(logs, listings, strict=True)] == [True] * 3
    reads = [m for m in model.agent.context.messages() if m.role == "assistant" and m.tool_name == "ctx_read"]
    assert [json.loads(m.tool_calls[0].arguments)["ref"] for m in reads] == logs


async def test_a_search_that_misses_the_log_is_reported_not_claimed(scripted: _Scripted) -> None:
    model, tally, said = scripted
    tag = model.agent.context.next_tag + 1
    await model._call(9, "ci_logs", "test-cache (3.11)")
    said.clear()

    await model._dig(19, tag, "zebra")

    assert tally.unexpected == [f"step 19: ctx_search did not return the archived CI log §{tag}§ (it returned no hits)"]
    assert (tally.searches, tally.reads) == (2, 1)
    assert said == [f"[unexpected] ctx_search did not return the archived CI log §{tag}§ (it returned no hits)"]


async def test_two_ci_logs_that_took_as_long_are_each_found_by_their_own_search(scripted: _Scripted) -> None:
    # Steps 11 and 25 of agent a1 both ran 874 s: searched by run time, the second dig
    # found the first log and its search records, not its own log.
    model, tally, said = scripted
    logs = []
    for n in (11, 25):
        logs.append(model.agent.context.next_tag + 1)
        await model._call(n, "ci_logs", "test-cache (3.11)")
    assert [model.agent.context.message(tag).state for tag in logs] == ["archived"] * 2
    assert tally.unexpected == []
    assert [line for line in said if "found the failure" in line] == [
        f"archived CI log §{tag}§: found the failure with ctx_search + ctx_read" for tag in logs
    ]


@pytest.mark.parametrize(
    ("resumed", "how"),
    [
        ({"starts": 1}, "committed (confirmed on retry)"),  # the first try's reply was lost
        ({"starts": 2, "resumed_from": 7}, "committed before the restart"),  # killed in step 7
    ],
)
async def test_a_commit_answered_as_a_duplicate_is_counted_and_says_why(
    nats_url: str, tmp_path: Path, resumed: dict[str, int], how: str
) -> None:
    # Counted in both cases: the killed process never saved the tally of its last step.
    tally = Tally.model_validate(resumed)
    async with running_coordinator(nats_url, coordinator_id="swarm-model") as (client, _):
        config = AgentConfig(agent_id="a1", domain=fresh_domain(), store=tmp_path / "a1.db", context=SWARM_CONTEXT)
        agent = Agent(client, config)
        try:
            said: list[str] = []
            model = ScriptedModel(agent, tally, index=0, say=lambda _, line: said.append(line))
            op = AddNote(text="a1: the stale read comes from flush()")
            first = await agent.propose(op, key="a1-7-0")  # the key of step 7's first intent
            assert isinstance(first, Committed) and not first.duplicate

            await model._pursue(7, 0, Propose(op))

            assert said == [f"brief rev {first.revision}: add_note {how}"]
            assert tally.committed == 1 and tally.unexpected == []
        finally:
            agent.close()
