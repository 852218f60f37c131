"""The scripted model against a real Agent: a failed ctx_reduce is a tool error, not a
crash, and an archived CI log is only said to be found when the search found it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.nudges import REDUCE_TOOL_NAME
from agents.runtime import Agent, AgentConfig
from agents.swarm._model import ScriptedModel
from agents.swarm._worker import SWARM_CONTEXT
from bus import NatsClient
from schemas import Domain
from schemas._swarm_events import Tally

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
    assert [json.loads(m.content.split(">", 1)[1].split("<", 1)[0])["ref"] for m in reads] == logs


async def test_a_search_that_misses_the_log_is_reported_not_claimed(scripted: _Scripted) -> None:
    model, tally, said = scripted
    tag = model.agent.context.next_tag + 1
    await model._call(9, "ci_logs", "test-cache (3.11)")
    said.clear()

    await model._dig(19, tag, "zebra")

    assert tally.unexpected == [f"step 19: ctx_search did not return the archived CI log §{tag}§ (it returned no hits)"]
    assert (tally.searches, tally.reads) == (2, 1)
    assert said == [f"[unexpected] ctx_search did not return the archived CI log §{tag}§ (it returned no hits)"]
