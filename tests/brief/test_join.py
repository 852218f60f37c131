"""Joining late and resuming: snapshots and partial replay, on a real server."""

from __future__ import annotations

import uuid

import anyio

from ctxbus.agents.brief import BriefReplica
from ctxbus.bus import TX_STREAM, BriefLog, BriefState, Bucket, BucketConfig, NatsClient, TxLogConfig, Verb, subject
from ctxbus.schemas import AddPending, Close, Commit, Complete, Domain, Proposal, SetGoal, TaskBrief, apply, brief_hash

BATCH = 50


def _commit(state: BriefState, i: int) -> Commit:
    brief = state.brief
    if i % 3 == 2 and brief.pending:
        op = Complete(item_id=brief.pending[0].id, outcome=f"finished {i}")
    elif i % 3 == 1:
        op = AddPending(text=f"task {i}")
    else:
        op = SetGoal(text=f"goal {i}")
    proposal = Proposal(deadline=2e9, domain=brief.domain, author=f"agent-{i % 5}", op=op, key=f"k{i}")
    return Commit.of(proposal, revision=brief.revision + 1, ts=0.0, committed_by="test")


async def _write(log: BriefLog, state: BriefState, start: int, count: int) -> BriefState:
    """Append `count` commits in batches, as a coordinator under load does."""
    for first in range(start, start + count, BATCH):
        brief, commits = state.brief, []
        for i in range(first, min(first + BATCH, start + count)):
            commit = _commit(BriefState(brief, state.seq), i)
            brief = apply(brief, commit)
            commits.append(commit)
        state = BriefState(brief, await log.append(state, commits, sender="test"))
    return state


async def test_late_joiner_after_10000_commits_and_snapshots(nats_client: NatsClient) -> None:
    log = BriefLog(nats_client)
    await log.ensure()
    domain = Domain.parse(f"late/s/{uuid.uuid4().hex[:8]}")
    state = await log.load(domain)
    for _ in range(4):  # a snapshot every 2,500 commits
        state = await _write(log, state, state.brief.revision, 2500)
        await log.snapshot(state)
    state = await _write(log, state, state.brief.revision, 300)  # a tail after the last snapshot
    assert state.brief.revision == 10_300
    snap = await log.load_snapshot(domain)
    assert snap.brief.revision == 10_000

    from_scratch = await log.catch_up(BriefState(TaskBrief(domain=domain), 0))
    # Remove everything the last snapshot covers: a full replay could no longer rebuild
    # the brief, so only a joiner that starts from the snapshot gets it right.
    js = nats_client.jetstream()
    await js.purge_stream(TX_STREAM, subject=subject(domain, Verb.TX), seq=snap.seq + 1)
    assert (await log.catch_up(BriefState(TaskBrief(domain=domain), 0))).brief.revision != 10_300
    async with anyio.create_task_group() as tg:
        late = BriefReplica(nats_client, domain)
        await tg.start(late.run)
        assert late.revision == 10_300
        assert late.hash == brief_hash(state.brief) == brief_hash(from_scratch.brief)
        tg.cancel_scope.cancel()


async def test_restarted_replica_resumes_without_a_full_replay(nats_client: NatsClient) -> None:
    log = BriefLog(nats_client)
    await log.ensure()
    domain = Domain.parse(f"resume/s/{uuid.uuid4().hex[:8]}")
    saved = await _write(log, await log.load(domain), 0, 400)
    final = await _write(log, saved, 400, 120)
    # Remove everything the saved state already covers: a full replay could no longer
    # rebuild the brief, so only a replica that resumes from `saved.seq` gets it right.
    js = nats_client.jetstream()
    await js.purge_stream(TX_STREAM, subject=subject(domain, Verb.TX), seq=saved.seq + 1)
    assert (await log.load(domain)).brief.revision != final.brief.revision
    async with anyio.create_task_group() as tg:
        resumed = BriefReplica(nats_client, domain, resume_from=saved)
        await tg.start(resumed.run)
        assert resumed.revision == 520
        assert resumed.hash == brief_hash(final.brief)
        tg.cancel_scope.cancel()


async def test_a_replica_resumed_after_its_domain_was_closed_and_purged_sees_it_closed(
    nats_client: NatsClient,
) -> None:
    log = BriefLog(nats_client)
    await log.ensure()
    domain = Domain.parse(f"resume/s/{uuid.uuid4().hex[:8]}")
    saved = await _write(log, await log.load(domain), 0, 10)
    close = Commit.of(
        Proposal(deadline=2e9, domain=domain, author="a", op=Close(reason="shipped"), key="close"),
        revision=11,
        ts=0.0,
        committed_by="test",
    )
    closed = BriefState(apply(saved.brief, close), await log.append(saved, [close], sender="test"))
    await log.purge(closed)
    async with anyio.create_task_group() as tg:
        resumed = BriefReplica(nats_client, domain, resume_from=saved)
        await tg.start(resumed.run)
        assert resumed.brief.is_closed and resumed.revision == 11
        tg.cancel_scope.cancel()


async def test_a_following_replica_that_missed_the_close_and_purge_sees_it_closed(
    nats_client: NatsClient,
) -> None:
    log = BriefLog(nats_client, txlog=TxLogConfig(idle_heartbeat=0.1))
    await log.ensure()
    domain = Domain.parse(f"follow/s/{uuid.uuid4().hex[:8]}")
    opened = await _write(log, await log.load(domain), 0, 10)
    async with anyio.create_task_group() as tg:
        replica = BriefReplica(nats_client, domain, brief_log=log)
        await tg.start(replica.run)
        assert replica.revision == 10
        # The close is never appended here, so the replica cannot hear it: as for a
        # replica disconnected through the close, its grace and the purge.
        close = Commit.of(
            Proposal(deadline=2e9, domain=domain, author="a", op=Close(reason="shipped"), key="close"),
            revision=11,
            ts=0.0,
            committed_by="test",
        )
        await log.purge(BriefState(apply(opened.brief, close), opened.seq))
        await replica.wait_for(11, timeout=10)
        assert replica.brief.is_closed and replica.state.seq == 0
        tg.cancel_scope.cancel()


async def test_a_follower_that_must_load_afresh_waits_out_an_outage(nats_client: NatsClient) -> None:
    snapshots = BucketConfig(name=f"SNAP{uuid.uuid4().hex[:8]}")
    log = BriefLog(nats_client, txlog=TxLogConfig(idle_heartbeat=0.1), snapshots=snapshots)
    await log.txlog.ensure()  # the log only: until its bucket exists, no snapshot read is answered
    domain = Domain.parse(f"follow/s/{uuid.uuid4().hex[:8]}")
    states: list[BriefState] = []
    loaded = anyio.Event()

    def on_state(state: BriefState) -> None:
        states.append(state)
        loaded.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(log.follow, BriefState(TaskBrief(domain=domain), 7), on_state)  # past the log's end
        await anyio.sleep(1.0)  # quiet spells find the log truncated; each load goes unanswered
        assert states == []
        await Bucket(nats_client, snapshots).ensure()
        with anyio.fail_after(10):
            await loaded.wait()
        tg.cancel_scope.cancel()
    assert (states[0].seq, states[0].brief.revision) == (0, 0)
