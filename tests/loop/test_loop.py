"""The agent loop against the stand-in, fault by fault: bad calls from the model, a 429,
an endpoint that is down, a prompt over the model's limit, an agent SIGKILLed mid-turn."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from ctxbus.agents.loop import LoopStop, ModelRefused, ModelUnavailable
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import NatsClient
from ctxbus.schemas import AgentResult, EventAdapter, Finished, ReportRequest
from tests._support import fresh_domain, running_coordinator
from tests.loop._standin import MODEL, BadCall, Hold, Pass, StandIn, Status, write_corpus
from tests.loop._swarm import context_config, looping

STEPS = 6
"""The scenario with one agent (the lead, which also tries the rejected option at step 3)."""
TASK = "Fix the flaky cache tests."


@pytest.fixture
async def client(nats_url: str) -> NatsClient:  # type: ignore[misc]
    async with running_coordinator(nats_url, coordinator_id="loop-tests") as (running, _):
        yield running


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    write_corpus(work, agents=1, steps=STEPS)
    return work


def config(tmp_path: Path, domain: object = None) -> AgentConfig:
    chosen = fresh_domain() if domain is None else domain
    return AgentConfig(
        agent_id="agent-1", domain=chosen, store=tmp_path / "agent-1.db", context=context_config("agent-1", chosen, 1)
    )


def results_of(agent: Agent, tool: str) -> list[str]:
    return [m.content for m in agent.context.messages() if m.role == "tool" and m.tool_name == tool]


async def test_bad_arguments_and_an_unknown_tool_are_answered_and_the_loop_goes_on(
    client: NatsClient, tmp_path: Path, workdir: Path
) -> None:
    with StandIn(agents=1, steps=STEPS) as standin:
        standin.fail(
            BadCall("ctx_reduce", '{"drop": '),
            BadCall("ctx_read", '{"tag": true}'),
            BadCall("ctx_search", '{"query": "x", "colour": "red"}'),
            BadCall("frobnicate", "{}"),
        )
        async with (
            Agent.open(client, config(tmp_path)) as agent,
            looping(agent, workdir, base_url=standin.base_url) as loop,
        ):
            stats = await loop.run(TASK)
            reduce, read, search, unknown = (
                results_of(agent, name) for name in ("ctx_reduce", "ctx_read", "ctx_search", "frobnicate")
            )
    assert standin.refused() == []  # the failed calls and their results are prompts the API takes
    # The four bad calls, and the scenario's refused re-adoption of the rejected option.
    assert stats.stopped is LoopStop.FINAL_ANSWER and stats.failed_calls == 5
    assert reduce[0].startswith("error: the arguments of ctx_reduce are not valid JSON")
    assert (
        read[0]
        == "error: argument 'tag' must be a tag: a whole number such as 12, or a string such as \"§12§\", got true"
    )
    assert search[0].startswith("error: bad arguments for ctx_search: field 'colour': Extra inputs are not permitted")
    assert unknown == ["error: there is no tool named 'frobnicate'; the tools are: ctx_search, ctx_read, ctx_reduce, "
                       "brief_get, brief_propose, bash"]  # fmt: skip


async def test_a_429_and_a_500_are_retried_and_counted(client: NatsClient, tmp_path: Path, workdir: Path) -> None:
    with StandIn(agents=1, steps=STEPS) as standin:
        standin.fail(Status(429, retry_after=0), Pass(), Status(500))
        async with (
            Agent.open(client, config(tmp_path)) as agent,
            looping(agent, workdir, base_url=standin.base_url) as loop,
        ):
            stats = await loop.run(TASK)
    assert stats.stopped is LoopStop.FINAL_ANSWER and stats.retries == 2
    assert [turn.attempts for turn in stats.history[:2]] == [2, 2]
    assert all(turn.attempts == 1 for turn in stats.history[2:])


async def test_an_endpoint_that_is_down_is_retried_then_a_clear_error_with_the_store_intact(
    client: NatsClient, tmp_path: Path, workdir: Path
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings = config(tmp_path)
    down = f"http://127.0.0.1:{port}/v1"
    async with Agent.open(client, settings) as agent, looping(agent, workdir, base_url=down) as loop:
        with pytest.raises(ModelUnavailable, match=rf"{down} did not answer after 3 tries: cannot connect"):
            await loop.run(TASK)
    # The agent closed cleanly; a new one on the same store carries on against a live endpoint.
    with StandIn(agents=1, steps=STEPS) as standin:
        async with Agent.open(client, settings) as agent, looping(agent, workdir, base_url=standin.base_url) as loop:
            assert [m.content for m in agent.context.messages() if m.role == "user"][-1].endswith(TASK)
            assert loop.stats.task_given and loop.stats.turns == 0 and loop.stats.starts == 1
            stats = await loop.run(TASK)
            users = [m for m in agent.context.messages() if m.role == "user" and m.kind != "synthetic"]
    assert stats.stopped is LoopStop.FINAL_ANSWER and stats.starts == 2
    assert len(users) == 1  # the task was given once


async def test_a_prompt_over_the_models_limit_is_refused_with_the_apis_message(
    client: NatsClient, tmp_path: Path, workdir: Path
) -> None:
    with StandIn(agents=1, steps=STEPS, context_limit=1_500) as standin:
        async with (
            Agent.open(client, config(tmp_path)) as agent,
            looping(agent, workdir, base_url=standin.base_url) as loop,
        ):
            with pytest.raises(ModelRefused, match="maximum context length is 1500 tokens") as refused:
                await loop.run(TASK)
    assert refused.value.status == 400
    assert len(standin.refused()) == 1 and "context length" in standin.refused()[0]


async def test_an_agent_killed_mid_turn_restarts_on_its_store_and_finishes(
    nats_url: str, client: NatsClient, tmp_path: Path, workdir: Path
) -> None:
    domain = fresh_domain()
    task = tmp_path / "task.md"
    task.write_text(TASK)
    store = tmp_path / "agent-1.db"
    with StandIn(agents=1, steps=STEPS) as standin:
        command = [
            sys.executable, "-m", "ctxbus.agents.swarm._run_worker", "--nats", nats_url, "--domain", str(domain),
            "--index", "0", "--agents", "1", "--store", str(store), "--base-url", standin.base_url,
            "--model", MODEL, "--task", str(task), "--window", "200000", "--max-turns", "100",
            "--tools", "bash", "--workdir", str(workdir),
        ]  # fmt: skip
        hold = Hold()
        standin.fail(Pass(), Pass(), Pass(), hold)  # the fourth model call hangs until the process is dead
        with (tmp_path / "first.log").open("wb") as log:
            async with await anyio.open_process(command, stderr=log) as first:
                assert await anyio.to_thread.run_sync(hold.held.wait, 60.0)
                first.kill()
                await first.wait()
        hold.release.set()
        with (tmp_path / "second.log").open("wb") as log:
            async with await anyio.open_process(command, stderr=log) as second:
                assert second.stdout is not None and second.stdin is not None
                lines = BufferedByteReceiveStream(second.stdout)
                with anyio.fail_after(60):
                    while not isinstance(
                        EventAdapter.validate_json(await lines.receive_until(b"\n", 1 << 20)), Finished
                    ):
                        pass
                    await second.stdin.send(ReportRequest(revision=0).model_dump_json().encode() + b"\n")
                    result = EventAdapter.validate_json(await lines.receive_until(b"\n", 1 << 20))
                assert await second.wait() == 0
    assert isinstance(result, AgentResult)
    assert result.tally.starts == 2 and result.tally.stopped == "final_answer"
    assert result.tally.step > 4  # the turns of both processes, counted once each
    assert standin.refused() == []
    assert "ERROR" not in (tmp_path / "second.log").read_text()


async def test_the_loop_stops_once_the_brief_is_closed(client: NatsClient, tmp_path: Path, workdir: Path) -> None:
    with StandIn(agents=1, steps=STEPS) as standin:
        standin.fail(Pass(), BadCall("brief_propose", '{"op": {"op": "close", "reason": "the task is done"}}'))
        async with (
            Agent.open(client, config(tmp_path)) as agent,
            looping(agent, workdir, base_url=standin.base_url) as loop,
        ):
            stats = await loop.run(TASK)
            closed = agent.brief.closed
    assert stats.stopped is LoopStop.TASK_DONE and stats.turns == 2
    assert closed is not None and closed.reason == "the task is done"
