"""The Agent runtime on a real NATS: context, nudges and brief working together."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import TaskGroup

from ctxbus.agents.context import ContextConfig, LocalContext, StoreError
from ctxbus.agents.nudges import Channel2LeaseConfig, Delivery, DeliveryOutcome, SqliteNudgeStateStore
from ctxbus.agents.runtime import Agent, AgentConfig, AgentState
from ctxbus.bus import NatsClient
from ctxbus.schemas import AddConstraint, Committed, CtxbusError, Domain, InvalidDomain, Reject, UsageError
from tests._support import running_coordinator
from tests.runtime._agents import Agents

CONFIG = ContextConfig(window=200_000, archive_threshold=50_000)


def _output(i: int) -> str:
    """About 3,000 tokens of plausible tool output."""
    return "\n".join(
        f"src/module_{i}/file_{j}.py:{j * 7}: def handler_{j}(request): return compute({j})" for j in range(120)
    )


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[tuple[NatsClient, TaskGroup]]:
    async with running_coordinator(nats_url, coordinator_id="rt") as running:
        yield running


def _config(domain: Domain, tmp_path: Path, name: str = "a1") -> AgentConfig:
    return AgentConfig(
        agent_id=name,
        domain=domain,
        store=tmp_path / f"{name}.db",
        context=CONFIG,
        heartbeat=0.5,
        channel2=Channel2LeaseConfig(claim_ttl=2),
    )


async def test_nudges_rise_and_channel2_is_delivered_once(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, tg = bus
    domain = Domain.parse(f"rt/s1/{uuid.uuid4().hex[:8]}")
    agent = agents.open(client, _config(domain, tmp_path))
    await tg.start(agent.run)
    agent.user("Fix the failing handler tests. Never edit files under vendor/.")
    bands: list[str] = []
    reminders = 0
    deliveries = []
    for i in range(40):
        agent.assistant(f'<tool_call name="grep">{{"q": "handler {i}"}}</tool_call>', tool_name="grep", call_id=f"c{i}")
        outcome = await agent.tool_result("grep", _output(i), call_id=f"c{i}")
        bands.append(str(outcome.measure.band))
        reminders += "§" in outcome.text.removeprefix(_output(i))
        if outcome.delivery is not None:
            deliveries.append(outcome.delivery)
    assert bands[0] == "quiet" and "channel2" in bands, bands
    assert reminders >= 1, "Channel 1 should have spoken on the way up"
    done = [d for d in deliveries if d.done]
    assert len(done) == 1, deliveries
    synthetic = [m for m in agent.context.messages() if m.kind == "synthetic"]
    assert len(synthetic) == 1

    # The agent prunes: U falls at once (queued), the drops apply at the next compose.
    before = agent.measure()
    oldest = sorted(t.tag for t in agent.context.tail() if t.kind == "tool_result")[:20]
    plan = agent.ctx_reduce(",".join(map(str, oldest)))
    assert plan.queued
    assert agent.measure().u < before.u
    composed = agent.compose("continue")
    assert composed.report.total <= composed.report.budget
    assert any(f"[dropped §{plan.queued[0]}§]" in m["content"] for m in composed.messages)
    assert "Never edit files under vendor/" in "\n".join(m["content"] for m in composed.messages)


async def _until_channel2(agent: Agent) -> list[Delivery]:
    """Grep until Channel 2 is done with its cycle; the deliveries it made on the way."""
    agent.user("Fix the failing handler tests.")
    deliveries = []
    for i in range(40):
        agent.assistant("grep", tool_name="grep", call_id=f"c{i}")
        delivery = (await agent.tool_result("grep", _output(i), call_id=f"c{i}")).delivery
        if delivery is not None:
            deliveries.append(delivery)
            if delivery.done:
                break
    return deliveries


async def test_an_agent_on_a_fresh_store_still_gets_its_channel2_message(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    """Its cycles count from 0 again and find the old store's delivered leases; its own
    conversation lacks the message, so it is sent there, once."""
    client, tg = bus
    domain = Domain.parse(f"rt/s6/{uuid.uuid4().hex[:8]}")
    async with anyio.create_task_group() as own:
        first = agents.open(client, _config(domain, tmp_path))
        await own.start(first.run)
        assert [d.outcome for d in await _until_channel2(first)] == [DeliveryOutcome.SENT]
        agents.close(first)
        own.cancel_scope.cancel()

    fresh = agents.open(client, dataclasses.replace(_config(domain, tmp_path), store=tmp_path / "new" / "a1.db"))
    await tg.start(fresh.run)
    [delivery] = await _until_channel2(fresh)
    assert (delivery.cycle, delivery.outcome) == (0, DeliveryOutcome.SENT)
    assert len([m for m in fresh.context.messages() if m.kind == "synthetic"]) == 1


async def test_brief_block_reaches_the_prompt_and_survives_restart(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, tg = bus
    domain = Domain.parse(f"rt/s2/{uuid.uuid4().hex[:8]}")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as own:
            agent = agents.open(client, _config(domain, tmp_path))
            await own.start(agent.run)
            assert isinstance(await agent.propose(AddConstraint(text="budget <= 50k tokens")), Committed)
            reply = await agent.propose(Reject(option="redis lock", reason="no redis in prod"))
            assert isinstance(reply, Committed)
            await agent.replica.wait_for(reply.revision, timeout=5)
            text = "\n".join(m["content"] for m in agent.compose("go").messages)
            assert "budget <= 50k tokens" in text and "redis lock" in text
            status = agent.status()
            assert status["brief_revision"] == 2
            agents.close(agent)
            scope.cancel()
    # A restarted agent resumes its brief from its own store, then catches up.
    other = agents.open(client, _config(domain, tmp_path, name="a2"))
    await tg.start(other.run)
    await other.propose(AddConstraint(text="no new dependencies"))
    again = agents.open(client, _config(domain, tmp_path))
    assert again.replica.revision == 2  # from its store, before touching the bus
    await tg.start(again.run)
    await again.replica.wait_for(3, timeout=5)
    assert again.replica.hash == other.replica.hash


async def test_queued_drops_survive_a_restart(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, _ = bus
    domain = Domain.parse(f"rt/s3/{uuid.uuid4().hex[:8]}")
    agent = agents.open(client, _config(domain, tmp_path))
    agent.user("Find the slow handler.")
    for i in range(12):
        agent.assistant("grep", tool_name="grep", call_id=f"c{i}")
        await agent.tool_result("grep", _output(i), call_id=f"c{i}")
    plan = agent.ctx_reduce("3,5")
    assert plan.queued == (3, 5)
    u_before_restart = agent.measure().u
    before = agent.presence()
    agents.close(agent)
    again = agents.open(client, _config(domain, tmp_path))
    shown = again.presence()  # before any tool call: `top` and ctx_status show the tail as stored
    assert (shown.band, shown.unused_tokens, shown.tail_tokens) == (
        before.band,
        before.unused_tokens,
        before.tail_tokens,
    )
    assert shown.tail_tokens > 0
    assert again.status()["queued_drops"] == [3, 5]
    assert again.measure().u == u_before_restart
    again.compose("go on")
    assert {t.tag: t.state for t in again.context.tail()}[3] == "dropped"
    assert again.status()["queued_drops"] == []


@pytest.mark.parametrize("store", ["/proc/ctxbus-test/x/a1.db", "/dev/null/agents/a1.db"])
async def test_a_store_directory_that_cannot_be_created_is_a_store_error(
    nats_client: NatsClient, agents: Agents, store: str
) -> None:
    config = AgentConfig(agent_id="a1", domain=Domain.parse("rt/s1/store"), store=Path(store))
    with pytest.raises(StoreError, match=f"^cannot create the directory of agent store {re.escape(store)}: ") as caught:
        agents.open(nats_client, config)
    assert isinstance(caught.value.__cause__, OSError)


async def test_the_replica_is_joined_once_run_loaded_the_brief(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, tg = bus
    agent = agents.open(client, _config(Domain.parse(f"rt/s4/{uuid.uuid4().hex[:8]}"), tmp_path))
    assert not agent.replica.joined
    assert agent.status()["brief_hash"] is None and agent.presence().brief_revision == 0
    await tg.start(agent.run)
    assert agent.replica.joined
    assert agent.status()["brief_hash"] == agent.replica.hash


@pytest.fixture
def threads_used(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """The threads each method of `LocalContext` and of the nudge store ran on, by name."""
    used: dict[str, set[int]] = defaultdict(set)

    def spy(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            used[name].add(threading.get_ident())
            return method(*args, **kwargs)

        return recorded

    for cls in (LocalContext, SqliteNudgeStateStore):
        for name, method in vars(cls).items():
            if inspect.isfunction(method) and not name.startswith("__"):
                monkeypatch.setattr(cls, name, spy(f"{cls.__name__}.{name}", method))
    return used


async def test_context_and_nudge_state_stay_on_the_event_loop_thread(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path, threads_used: dict[str, set[int]]
) -> None:
    """LocalContext is not thread-safe, and a worker thread's read-modify-write of the
    nudge state can interleave with one on the loop; so neither ever leaves the loop."""
    client, tg = bus
    agent = agents.open(client, _config(Domain.parse(f"rt/s5/{uuid.uuid4().hex[:8]}"), tmp_path))
    delivered = await _work_until_channel2(agent, tg)
    agents.close(agent)  # closing stays on the loop's thread too
    assert delivered, "the run must reach Channel 2, whose host writes to the context"
    assert {"LocalContext.add", "SqliteNudgeStateStore.save"} <= threads_used.keys()
    loop = threading.get_ident()
    assert sorted(name for name, threads in threads_used.items() if threads != {loop}) == []


async def _work_until_channel2(agent: Agent, tg: TaskGroup) -> bool:
    """Run `agent` through 40 tool calls, a ctx_reduce and a compose; whether Channel 2
    delivered its directive meanwhile."""
    await tg.start(agent.run)
    agent.user("Fix the failing handler tests.")
    delivered = False
    for i in range(40):
        agent.assistant("grep", tool_name="grep", call_id=f"c{i}")
        outcome = await agent.tool_result("grep", _output(i), call_id=f"c{i}")
        delivered |= outcome.delivery is not None and outcome.delivery.done
    agent.ctx_reduce("3")
    agent.compose("go on")
    return delivered


_CONNECTS: list[str] | None = None
"""While a test records: the file of every `sqlite3.connect` the process makes."""


def _record_connects(event: str, args: tuple[Any, ...]) -> None:
    if event == "sqlite3.connect" and _CONNECTS is not None:
        _CONNECTS.append(str(args[0]))


sys.addaudithook(_record_connects)  # audit hooks stay for the process; it records only when asked


async def test_the_agent_file_has_one_connection_for_context_and_nudge_state(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    """The context, the runtime state and the nudge state (Channel 1 and 2) go through
    the one `AgentStore` the agent opened: no tool call, reminder or delivery opens the
    file again."""
    global _CONNECTS
    client, tg = bus
    config = _config(Domain.parse(f"rt/s6/{uuid.uuid4().hex[:8]}"), tmp_path)
    _CONNECTS = []
    try:
        agent = agents.open(client, config)
        opened, _CONNECTS[:] = list(_CONNECTS), []
        delivered = await _work_until_channel2(agent, tg)
        agents.close(agent)
        after = list(_CONNECTS)
    finally:
        _CONNECTS = None
    assert delivered, "the run must reach Channel 2, which saves its state and writes the context"
    assert opened.count(str(config.store)) == 1, opened
    assert after == [], "nothing opened the file again"


async def test_one_process_per_agent_store(nats_client: NatsClient, agents: Agents, tmp_path: Path) -> None:
    domain = Domain.parse(f"rt/s4/{uuid.uuid4().hex[:8]}")
    first = agents.open(nats_client, _config(domain, tmp_path))
    with pytest.raises(StoreError, match=r"store of agent 'a1' .* is open already in this process, by another Agent"):
        agents.open(nats_client, _config(domain, tmp_path))
    agents.close(agents.open(nats_client, _config(domain, tmp_path, name="a2")))  # another name has its own store
    agents.close(first)
    agents.close(agents.open(nats_client, _config(domain, tmp_path)))  # free again once closed


async def test_a_store_another_process_holds_is_refused_naming_it(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    config = _config(Domain.parse(f"rt/s4/{uuid.uuid4().hex[:8]}"), tmp_path)
    hold = "import sys, time; from ctxbus.bus import PidLock; PidLock(__import__('pathlib').Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)"
    with subprocess.Popen(
        [sys.executable, "-c", hold, f"{config.store}.lock"], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(StoreError, match=rf"is in use by another process \(pid {holder.pid}\)"):
                agents.open(nats_client, config)
        finally:
            holder.kill()


async def test_closing_stops_the_agent_and_closing_again_does_nothing(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, tg = bus
    agent = agents.open(client, _config(Domain.parse(f"rt/s6/{uuid.uuid4().hex[:8]}"), tmp_path))
    stopped = anyio.Event()

    async def run_then_tell(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        await agent.run(task_status=task_status)
        stopped.set()

    await tg.start(run_then_tell)
    with pytest.raises(UsageError, match="running already"):
        await agent.run()
    agents.close(agent)
    agent.close()
    with anyio.fail_after(5):
        await stopped.wait()  # run() returned: no more heartbeats or replica
    with pytest.raises(UsageError, match="closed"):
        await agent.propose(AddConstraint(text="too late"))
    with pytest.raises(UsageError, match="closed"):
        await agent.run()


def test_an_agent_config_takes_the_domain_as_text(tmp_path: Path) -> None:
    config = AgentConfig(agent_id="a1", domain="rt/s7/t", store=tmp_path / "a1.db")  # type: ignore[arg-type]
    assert config.domain == Domain.parse("rt/s7/t")
    with pytest.raises(InvalidDomain, match="must have the form 'user/session/task'"):
        AgentConfig(agent_id="a1", domain="rt-s7-t", store=tmp_path / "a1.db")  # type: ignore[arg-type]


async def test_an_agent_that_fails_to_build_leaves_its_store_free(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    domain = Domain.parse(f"rt/s5/{uuid.uuid4().hex[:8]}")
    store = tmp_path / "shared.db"
    bad = dataclasses.replace(_config(domain, tmp_path), agent_id="bad.id", store=store)
    with pytest.raises(CtxbusError, match="bad.id"):  # refused after the store was opened
        agents.open(nats_client, bad)
    agents.close(agents.open(nats_client, dataclasses.replace(_config(domain, tmp_path), store=store)))


async def test_an_opened_agent_runs_in_its_own_task_group_and_closes_on_the_way_out(
    bus: tuple[NatsClient, TaskGroup], tmp_path: Path
) -> None:
    client, _ = bus
    config = _config(Domain.parse(f"rt/s8/{uuid.uuid4().hex[:8]}"), tmp_path)
    async with Agent.open(client, config) as agent:
        assert agent.state is AgentState.RUNNING and agent.replica.joined
        assert isinstance(await agent.propose(AddConstraint(text="no new services")), Committed)
    assert agent.state is AgentState.CLOSED
    with pytest.raises(UsageError, match="closed"):
        await agent.propose(AddConstraint(text="too late"))

    # An error in the block closes the agent too, and comes out as itself; the store is free.
    with pytest.raises(KeyError, match="boom"):
        async with Agent.open(client, config) as again:
            assert again.brief.constraints[0].text == "no new services"
            raise KeyError("boom")
    assert again.state is AgentState.CLOSED
    async with Agent.open(client, config) as third:
        assert third.state is AgentState.RUNNING


async def test_an_agent_is_opening_until_it_has_joined(
    bus: tuple[NatsClient, TaskGroup], agents: Agents, tmp_path: Path
) -> None:
    client, tg = bus
    agent = agents.open(client, _config(Domain.parse(f"rt/s9/{uuid.uuid4().hex[:8]}"), tmp_path))
    assert agent.state is AgentState.OPENING
    async with anyio.create_task_group() as own:
        await own.start(agent.run)
        assert agent.state is AgentState.RUNNING
        own.cancel_scope.cancel()
    assert agent.state is AgentState.STOPPED  # run() ended, the store still open
    agents.close(agent)
    assert agent.state is AgentState.CLOSED
