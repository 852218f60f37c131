"""Snapshots only move forward, and a log that lost entries under one does not wedge its domain."""

from __future__ import annotations

import uuid

import anyio
import pytest

from ctxbus.agents.brief import Proposer
from ctxbus.bus import TX_STREAM, BriefLog, BriefState, NatsClient, Verb, kv_key, subject
from ctxbus.bus.testing import ServerFactory
from ctxbus.schemas import AddNote, BriefSnapshot, Close, Commit, Committed, Proposal, TaskBrief, apply
from tests._support import fresh_domain, running_coordinator, serving_coordinator


@pytest.fixture
async def log(nats_client: NatsClient) -> BriefLog:
    brief_log = BriefLog(nats_client)
    await brief_log.ensure()
    return brief_log


def _commit(brief: TaskBrief, op: AddNote | Close) -> Commit:
    proposal = Proposal(deadline=2e9, domain=brief.domain, author="a", op=op, key=uuid.uuid4().hex)
    return Commit.of(proposal, revision=brief.revision + 1, ts=0.0, committed_by="test")


async def test_a_snapshot_older_than_the_one_stored_is_not_written(log: BriefLog) -> None:
    brief = TaskBrief(domain=fresh_domain("snap"))
    states = []
    for i in range(3):
        commit = _commit(brief, AddNote(text=f"n{i}"))
        brief = apply(brief, commit)
        states.append(BriefState(brief, 10 + i))
    assert await log.snapshot(states[1])
    assert not await log.snapshot(states[0]), "a write held back and sent late must not go back in time"
    assert (await log.load_snapshot(brief.domain)).brief.revision == 2
    assert await log.snapshot(states[2])


async def test_the_purge_snapshot_is_not_replaced_by_a_late_one_of_the_closed_brief(log: BriefLog) -> None:
    opened = TaskBrief(domain=fresh_domain("snap"))
    opened = apply(opened, _commit(opened, AddNote(text="work")))
    closed = apply(opened, _commit(opened, Close(reason="shipped")))
    await log.purge(BriefState(closed, 7))  # stores the purge snapshot: revision 2, sequence 0
    assert not await log.snapshot(BriefState(closed, 7)), "same revision, but of a log that is gone"
    assert not await log.snapshot(BriefState(opened, 6))
    stored = await log.load_snapshot(closed.domain)
    assert stored.brief.is_closed and stored.seq == 0


async def test_a_snapshot_written_without_labels_is_still_compared(log: BriefLog) -> None:
    brief = TaskBrief(domain=fresh_domain("snap"))
    older = apply(brief, _commit(brief, AddNote(text="one")))
    newer = apply(older, _commit(older, AddNote(text="two")))
    unlabelled = BriefSnapshot(seq=5, brief=newer).encode()  # as stored by an earlier version
    await log.snapshots.put(kv_key(brief.domain, "brief"), unlabelled)
    assert not await log.snapshot(BriefState(older, 4))
    assert (await log.load_snapshot(brief.domain)).brief.revision == 2


async def test_a_domain_whose_log_was_purged_under_its_snapshot_goes_on_from_the_snapshot(nats_url: str) -> None:
    domain = fresh_domain("snap")
    async with running_coordinator(nats_url, coordinator_id="c-snap", snapshot_every=1) as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        for i in range(3):
            assert await agent.propose(AddNote(text=f"n{i}")) == Committed(revision=i + 1)
        with anyio.fail_after(10):  # the snapshot is written after the answer
            while (await BriefLog(client).load_snapshot(domain)).brief.revision < 3:
                await anyio.sleep(0.05)
        await client.jetstream().purge_stream(TX_STREAM, subject=subject(domain, Verb.TX))  # by hand
        assert await agent.propose(AddNote(text="after")) == Committed(revision=4)
        state = await BriefLog(client).load(domain)
    assert [note.text for note in state.brief.notes] == ["n0", "n1", "n2", "after"]


async def test_a_log_recreated_under_its_snapshot_keeps_what_was_committed_after(
    nats_server_factory: ServerFactory,
) -> None:
    server = nats_server_factory()
    domain = fresh_domain("snap")
    async with running_coordinator(server.url, coordinator_id="c-recreated", snapshot_every=3) as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        for i in range(3):
            assert await agent.propose(AddNote(text=f"n{i}")) == Committed(revision=i + 1)
        with anyio.fail_after(10):  # the snapshot is written after the answer
            while (await BriefLog(client).load_snapshot(domain)).seq <= 1:
                await anyio.sleep(0.05)
        await client.jetstream().delete_stream(TX_STREAM)  # by hand, or lost with its only copy
        assert await agent.propose(AddNote(text="after")) == Committed(revision=4)  # at sequence 1
        state = await BriefLog(client).load(domain)
        assert [note.text for note in state.brief.notes] == ["n0", "n1", "n2", "after"]
        assert await agent.propose(AddNote(text="next")) == Committed(revision=5)


async def test_an_append_that_found_no_log_is_the_coordinators_last_error_though_it_committed(
    nats_server_factory: ServerFactory,
) -> None:
    """The log gone under a running coordinator (lost with its only copy, or a quorum
    lost): the append creates it again and commits, and `status` still says what happened
    rather than "last error: none"."""
    server = nats_server_factory()
    domain = fresh_domain("snap")
    async with serving_coordinator(server.url, coordinator_id="c-trouble") as serving:
        agent = Proposer(serving.client, domain, agent_id="a")
        assert await agent.propose(AddNote(text="n0")) == Committed(revision=1)
        assert serving.coordinator.metrics.last_error is None
        await serving.client.jetstream().delete_stream(TX_STREAM)
        assert isinstance(await agent.propose(AddNote(text="after")), Committed)
        status = serving.coordinator.metrics.status(domains=())
    assert status.last_error is not None and "creating the log again" in status.last_error, status
    assert status.last_error_at is not None
