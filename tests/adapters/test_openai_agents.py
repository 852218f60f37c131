"""The OpenAI Agents SDK adapter on the SDK's real `Runner`: two agents in separate processes
(`_sdk_worker`) share one brief over a real NATS with a real coordinator; the model is the
SDK's `OpenAIChatCompletionsModel` talking to the OpenAI-compatible stand-in, which plays
the demo's scripted scenario and refuses any request the API would refuse."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ctxbus.agents.swarm._scenario import REJECTED_OPTION, agent_name
from tests._support import fresh_domain, serving_coordinator
from tests.adapters._checks import (
    Workers,
    adoption_refused,
    calls_and_answers,
    read_afresh,
    reduces_taking_effect,
)
from tests.loop._standin import StandIn, write_corpus

WINDOW = 16_000
STEPS = 24
"""Each agent's steps: a tool output each (a few thousand tokens), far more than the window holds."""
AGENTS = 2


@pytest.fixture(scope="module")
async def ran(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of both agents, checked by each test below."""
    tmp_path = tmp_path_factory.mktemp("openai-agents")
    workdir = tmp_path / "work"
    write_corpus(workdir, agents=AGENTS, steps=STEPS)
    domain = fresh_domain()
    results: dict[str, Any] = {}
    workers = Workers("tests.adapters._sdk_worker", nats_url, str(domain), tmp_path, WINDOW)
    async with serving_coordinator(nats_url, coordinator_id="adapters-openai-agents") as serving:
        with StandIn(agents=AGENTS, steps=STEPS) as standin:

            async def one(agent: str) -> None:
                args = ("--base-url", standin.base_url, "--workdir", str(workdir))
                results[agent] = await workers.run(agent, *args)

            async with anyio.create_task_group() as tg:
                for index in range(AGENTS):
                    tg.start_soon(one, agent_name(index))
        results["refused"] = standin.refused()
        results["counts"] = standin.counts
        results |= await read_afresh(serving.client, domain)  # a fresh reader of the log, in this process
    return results


async def test_two_runners_share_a_brief_inside_their_windows(ran: dict[str, Any]) -> None:
    assert ran["refused"] == []  # every request was one the API takes: calls answered, results after calls
    assert sorted(ran["counts"]) == ["agent-1", "agent-2"] and all(c.finished for c in ran["counts"].values())
    lead = ran["agent-1"]
    for result in (lead, ran["agent-2"]):
        assert result["final"] == "Done: my part of the task is finished."
        assert result["user_turns"] == 1  # the task, recorded once
        for prompt in result["prompts"]:
            assert prompt[0]["role"] == "system"
            assert sum(m["tokens"] for m in prompt) <= WINDOW
            calls_and_answers(prompt[1:])
    # A long, tool-heavy run: the lead saw many times its window, never more than the window.
    assert lead["history_tokens"] > 2 * WINDOW
    assert len(lead["prompts"]) > STEPS


async def test_a_reminder_reaches_the_model_and_its_ctx_reduce_takes_effect(ran: dict[str, Any]) -> None:
    lead = ran["agent-1"]
    prompts = lead["prompts"]
    assert any(m["reminder"] for prompt in prompts for m in prompt if m["role"] == "tool")
    assert lead["reduces"], "the model was never shown a reminder naming tags"
    took_effect, out_of_view = reduces_taking_effect(prompts, lead["reduces"])
    # A reminder is written when a result is recorded; the rebuild that composes the next
    # prompt may fold the outputs it names into the summary first (ctxbus's context, not
    # the adapter): those reduces have nothing left to release.
    in_view = [index for index, _ in lead["reduces"] if index not in out_of_view]
    assert took_effect and took_effect[0] == in_view[0], "the first ctx_reduce never took effect"


async def test_a_rejected_option_cannot_be_adopted_by_the_other_agent(ran: dict[str, Any]) -> None:
    adopter = ran["agent-2"]
    adoption_refused(adopter, (ran["agent-1"], adopter), ran["brief"], REJECTED_OPTION)
    # The agent whose replica is furthest along has the brief a fresh reader replays.
    latest = max((ran["agent-1"], adopter), key=lambda r: r["revision"])
    assert (latest["revision"], latest["brief_hash"]) == (ran["revision"], ran["hash"])
