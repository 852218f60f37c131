"""The scripted model against a real Agent: a failed ctx_reduce is a tool error, not a crash."""

from __future__ import annotations

import uuid
from pathlib import Path

from agents.nudges import REDUCE_TOOL_NAME
from agents.runtime import Agent, AgentConfig
from agents.swarm._model import ScriptedModel
from bus import NatsClient
from schemas import Domain
from schemas._swarm_events import Tally


async def test_a_reduce_naming_an_unknown_tag_is_reported_and_the_worker_goes_on(
    nats_client: NatsClient, tmp_path: Path
) -> None:
    domain = Domain.parse(f"sw/m1/{uuid.uuid4().hex[:8]}")
    agent = Agent(nats_client, AgentConfig(agent_id="a1", domain=domain, store=tmp_path / "a1.db"))
    tally = Tally()
    said: list[str] = []
    model = ScriptedModel(agent, tally, index=0, say=lambda _, line: said.append(line))
    agent.user("Goal: fix the bug.")

    await model._reduce(3, [9_999], why="a stale hint")

    assert len(tally.unexpected) == 1 and "no such tag §9999§" in tally.unexpected[0]
    assert tally.reduces == 0 and said == []
    result = agent.context.messages()[-1]
    assert (result.role, result.tool_name) == ("tool", REDUCE_TOOL_NAME)
    assert result.content.startswith("error: ctx_reduce: no such tag §9999§")
    agent.close()
