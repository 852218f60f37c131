"""Two coordinators on one domain: they settle on one owner, and the other takes over when it goes."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from ctxbus.agents.brief import Proposer
from ctxbus.bus import BriefLog, BusConfig, NatsClient, Verb, commits_of, connect, subject
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from ctxbus.schemas import AddNote, Committed, Domain


class _Running:
    """A coordinator on its own connection, which a test can stop on its own."""

    def __init__(self, coordinator: Coordinator, scope: anyio.CancelScope) -> None:
        self.coordinator = coordinator
        self.scope = scope

    @property
    def id(self) -> str:
        return self.coordinator.id


async def _start(url: str, coordinator_id: str, tg: TaskGroup) -> _Running:
    client = await connect(BusConfig(servers=[url]))
    coordinator = Coordinator(client, CoordinatorConfig(coordinator_id=coordinator_id))
    scope = anyio.CancelScope()

    async def run(*, task_status: TaskStatus[None]) -> None:
        try:
            with scope:
                await coordinator.run(task_status=task_status)
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    await tg.start(run)
    return _Running(coordinator, scope)


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[NatsClient]:
    nc = await connect(BusConfig(servers=[nats_url]))
    yield nc
    await nc.close()


async def _committers(client: NatsClient, domain: Domain) -> list[str]:
    """`committed_by` of every commit in the domain's log, in order, and each key once."""
    commits = [c async for entry in BriefLog(client).txlog.read(subject(domain, Verb.TX)) for c in commits_of(entry)]
    keys = Counter(c.key for c in commits)
    assert all(n == 1 for n in keys.values()), "a proposal was committed twice"
    return [c.committed_by for c in commits]


async def test_contending_coordinators_settle_on_one_owner(nats_url: str, client: NatsClient) -> None:
    domain = Domain.parse(f"u{uuid.uuid4().hex[:8]}/s1/t1")
    async with anyio.create_task_group() as tg:
        first, second = await _start(nats_url, "coord-a", tg), await _start(nats_url, "coord-b", tg)
        proposers = [Proposer(client, domain, agent_id=f"agent-{n}") for n in range(8)]

        async def round_of(count: int, tag: str) -> list[str]:
            """Every proposer proposes `count` notes at once; who committed them."""
            before = len(await _committers(client, domain))

            async def propose_many(proposer: Proposer) -> None:
                for i in range(count):
                    reply = await proposer.propose(AddNote(text=f"{proposer.agent_id} {tag} {i}"))
                    assert isinstance(reply, Committed), reply

            async with anyio.create_task_group() as burst:
                for proposer in proposers:
                    burst.start_soon(propose_many, proposer)
            return (await _committers(client, domain))[before:]

        with anyio.fail_after(60):
            committers = await round_of(40, "burst")
            rounds = 0
            while len(set(committers)) > 1:  # until one coordinator commits a whole round
                rounds += 1
                assert rounds <= 10, "the coordinators never settled"
                committers = await round_of(5, f"round {rounds}")
            owner = committers[0]
            assert set(await round_of(5, "settled")) == {owner}, "once settled, the owner keeps it"
        assert len(await _committers(client, domain)) == 8 * (40 + 5 * (rounds + 1))
        deferring = second if owner == first.id else first
        assert deferring.coordinator.metrics.cas_retries > 0  # it lost a race, and so learned who owns
        tg.cancel_scope.cancel()


async def test_the_other_coordinator_commits_once_the_owner_is_gone(nats_url: str, client: NatsClient) -> None:
    domain = Domain.parse(f"u{uuid.uuid4().hex[:8]}/s1/t1")
    async with anyio.create_task_group() as tg:
        running = {r.id: r for r in [await _start(nats_url, "coord-a", tg), await _start(nats_url, "coord-b", tg)]}
        proposers = [Proposer(client, domain, agent_id=f"agent-{n}") for n in range(4)]
        with anyio.fail_after(60):
            for round_ in range(30):  # until both have committed and one has deferred
                async with anyio.create_task_group() as burst:
                    for proposer in proposers:
                        burst.start_soon(proposer.propose, AddNote(text=f"{proposer.agent_id} round {round_}"))
                if all(r.coordinator.metrics.commits for r in running.values()):
                    break
            owner = (await _committers(client, domain))[-1]
            running[owner].scope.cancel()
            survivor = next(r for r in running.values() if r.id != owner)
            reply = await proposers[0].propose(AddNote(text="after the owner left"))
        assert isinstance(reply, Committed)
        assert (await _committers(client, domain))[-1] == survivor.id
        tg.cancel_scope.cancel()
