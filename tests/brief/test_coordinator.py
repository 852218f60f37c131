"""Coordinator + replicas in one process against the session's real NATS server."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import msgpack
import pytest
from anyio.abc import TaskGroup
from nats.aio.msg import Msg

from ctxbus.agents.brief import BriefReplica, ProposalUnanswered, Proposer
from ctxbus.bus import (
    TX_STREAM,
    BriefLog,
    BriefState,
    BusConfig,
    BusUnavailable,
    LogEntry,
    NatsClient,
    Verb,
    commits_of,
    connect,
    request,
    run_async,
    subject,
)
from ctxbus.bus.testing import ServerFactory
from ctxbus.coordinator import GLOBAL_DLQ, METRICS_SUBJECT, STATUS_SUBJECT, CommitterState, CoordinatorConfig
from ctxbus.coordinator._metrics import Metrics
from ctxbus.schemas import (
    AddConstraint,
    AddDecision,
    AddNote,
    AddPending,
    BriefOp,
    Close,
    Commit,
    Committed,
    Complete,
    DeadLetter,
    DeadLetterEnvelope,
    Domain,
    Envelope,
    MessageType,
    Proposal,
    ProposalEnvelope,
    Reject,
    Rejection,
    RejectionCode,
    Reopen,
    Reply,
    ReplyEnvelope,
    SetGoal,
    TaskBrief,
    UsageError,
    applied_revision,
    apply,
    brief_hash,
    render_brief,
)
from tests._support import fresh_domain, running_coordinator, serving_coordinator
from tests.brief.helpers import words

AnyEnvelope = Envelope[dict[str, Any]]
"""An envelope with any map for a body: what a client that gets the shapes wrong sends."""


async def _cached_domain(client: NatsClient) -> tuple[Domain, Proposer]:
    """A fresh domain the running coordinator holds in its cache (one commit in), and its agent."""
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    assert await agent.propose(AddNote(text="warm the cache")) == Committed(revision=1)
    return domain, agent


async def _commit_behind_its_back(client: NatsClient, domain: Domain, op: BriefOp) -> BriefState:
    """Append `op` as the domain's next commit, as another coordinator would; the state after it."""
    log = BriefLog(client)
    state = await log.load(domain)
    commit = Commit.of(
        Proposal(deadline=2e9, domain=domain, author="b", op=op, key=uuid.uuid4().hex),
        revision=state.brief.revision + 1,
        ts=0.0,
        committed_by="other-coordinator",
    )
    seq = await log.append(state, [commit], sender="other-coordinator")
    return BriefState(apply(state.brief, commit), seq)


@pytest.fixture
async def running(nats_url: str) -> AsyncIterator[tuple[NatsClient, TaskGroup]]:
    """A client with one coordinator serving; both stopped after the test."""
    async with running_coordinator(nats_url, coordinator_id="c1", snapshot_every=5) as running:
        yield running


async def test_proposals_commit_and_replicas_converge(running: tuple[NatsClient, TaskGroup]) -> None:
    client, tg = running
    domain = fresh_domain()
    a, b = BriefReplica(client, domain), BriefReplica(client, domain)
    await tg.start(a.run)
    await tg.start(b.run)
    alice, bob = Proposer(client, domain, agent_id="alice"), Proposer(client, domain, agent_id="bob")

    assert await alice.propose(SetGoal(text="ship the cache")) == Committed(revision=1)
    assert await bob.propose(AddPending(text="write tests")) == Committed(revision=2)
    rejected = await alice.propose(Reject(option="local lock + unique index", reason="races under load"))
    assert rejected == Committed(revision=3)
    refused = await bob.propose(AddDecision(option="Local  Lock + unique index", rationale="simplest"))
    assert isinstance(refused, Rejection) and refused.code is RejectionCode.REJECTED_OPTION
    assert "rejected at rev 3 by alice" in refused.reason
    pending_id = (await b.wait_for(2, timeout=5)).brief.pending[0].id
    assert await bob.propose(Complete(item_id=pending_id, outcome="12 tests")) == Committed(revision=4)

    await a.wait_for(4, timeout=5)
    await b.wait_for(4, timeout=5)
    assert a.hash == b.hash
    assert a.brief.done[0].outcome == "12 tests"
    assert "ship the cache" in a.render()


async def test_retried_key_is_answered_with_the_original_revision(running: tuple[NatsClient, TaskGroup]) -> None:
    client, _ = running
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    first = await agent.propose(AddPending(text="once"), key="k-1")
    again = await agent.propose(AddPending(text="once"), key="k-1")
    assert first == Committed(revision=1)
    assert again == Committed(revision=1, duplicate=True)
    state = await BriefLog(client).load(domain)
    assert state.brief.revision == 1 and len(state.brief.pending) == 1


async def _forget_log_through(client: NatsClient, domain: Domain, seq: int) -> None:
    """Delete the domain's log entries up to stream sequence `seq`: from then on only a
    reader that starts after `seq` (from a snapshot or a saved state) rebuilds the brief."""
    await client.jetstream().purge_stream(TX_STREAM, subject=subject(domain, Verb.TX), seq=seq + 1)


async def _log_entries(client: NatsClient, domain: Domain) -> list[LogEntry]:
    """Every entry of the domain's log now, in order."""
    return [entry async for entry in BriefLog(client).txlog.read(subject(domain, Verb.TX))]


async def test_late_joiner_uses_the_snapshot_and_resumes_without_full_replay(
    running: tuple[NatsClient, TaskGroup],
) -> None:
    client, tg = running
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    for i in range(12):
        assert isinstance(await agent.propose(AddPending(text=f"item {i}")), Committed)
    log = BriefLog(client)
    with anyio.fail_after(10):
        while (snap := await log.load_snapshot(domain)).brief.revision < 10:
            await anyio.sleep(0.05)  # snapshot_every=5: the latest is written after the 10th commit
    assert snap.brief.revision == 10
    replayed = await log.catch_up(BriefState(TaskBrief(domain=domain), 0))  # the whole log, while it is whole
    assert replayed.brief.revision == 12
    await _forget_log_through(client, domain, snap.seq)
    assert (await log.catch_up(BriefState(TaskBrief(domain=domain), 0))).brief.revision != 12
    late = BriefReplica(client, domain)
    await tg.start(late.run)
    assert late.revision == 12
    assert late.hash == brief_hash(replayed.brief)

    # A replica restarted from a saved state catches up from there. Two more commits keep
    # the next snapshot (due at the 15th) away, so the snapshot alone would not do either.
    saved = late.state
    for i in range(2):
        assert isinstance(await agent.propose(AddPending(text=f"later {i}")), Committed)
    latest = await log.load(domain)
    assert latest.brief.revision == 14
    await _forget_log_through(client, domain, saved.seq)
    assert (await log.load_snapshot(domain)).brief.revision == 10
    assert (await log.load(domain)).brief.revision != 14, "the log no longer leads from the snapshot to the end"
    resumed = BriefReplica(client, domain, resume_from=saved)
    await tg.start(resumed.run)
    assert resumed.revision == 14
    assert resumed.hash == brief_hash(latest.brief)


async def test_bad_input_is_rejected_dead_lettered_and_service_goes_on(
    running: tuple[NatsClient, TaskGroup],
) -> None:
    client, _ = running
    domain = fresh_domain()
    dlq = await client.subscribe(subject(domain, Verb.DLQ))
    propose = subject(domain, Verb.PROPOSE)

    async def answer_to(data: bytes) -> Reply:
        return ReplyEnvelope.decode(await request(client, propose, data, timeout=5)).body

    async def next_letter() -> DeadLetter:
        return DeadLetterEnvelope.decode((await dlq.next_msg(timeout=5)).data).body

    reply = await answer_to(b"\x93not-an-envelope")
    assert isinstance(reply, Rejection) and reply.code is RejectionCode.INVALID_OP
    assert (await next_letter()).reason == "DecodeError"

    body = {"domain": str(domain), "author": "a", "key": "k", "deadline": time.time() + 60}
    unknown_op = AnyEnvelope(
        type=MessageType.PROPOSAL, domain=domain, sender="a", body={**body, "op": {"op": "rewrite_history"}}
    )
    answer = await answer_to(unknown_op.encode())
    assert isinstance(answer, Rejection) and answer.code is RejectionCode.INVALID_OP
    assert "rewrite_history" in answer.reason

    too_long = unknown_op.model_copy(update={"body": {**body, "op": {"op": "add_note", "text": "x" * 5000}}})
    answer = await answer_to(too_long.encode())
    assert isinstance(answer, Rejection) and answer.code is RejectionCode.FIELD_TOO_LONG
    assert answer.reason == "field 'op.add_note.text' is 5,000 characters long, over the limit of 2,000"

    not_a_proposal = AnyEnvelope(
        type=MessageType.SNAPSHOT,
        domain=domain,
        sender="a",
        body={**body, "op": {"op": "add_note", "text": "sneaked in"}},
    )
    answer = await answer_to(not_a_proposal.encode())
    assert isinstance(answer, Rejection) and answer.code is RejectionCode.INVALID_OP
    assert answer.reason == "expected a proposal envelope, got a 'snapshot' envelope"
    assert (await next_letter()).reason == "wrong_type"

    other = AnyEnvelope(
        type=MessageType.PROPOSAL, domain=fresh_domain(), sender="a", body={**body, "op": {"op": "close"}}
    )
    answer = await answer_to(other.encode())
    assert isinstance(answer, Rejection) and answer.code is RejectionCode.WRONG_DOMAIN

    global_dlq = await client.subscribe(GLOBAL_DLQ)
    await client.publish("ctx.bad\u00e9.s.t.propose", b"x")
    assert msgpack.unpackb((await global_dlq.next_msg(timeout=5)).data)["reason"] == "bad_subject"

    # Still serving, nothing lost.
    assert await Proposer(client, domain, agent_id="a").propose(SetGoal(text="still here")) == Committed(revision=1)
    status = json.loads(await request(client, STATUS_SUBJECT, b"", timeout=5))
    assert status["coordinator"] == "c1"
    assert status["dead_letters"]["DecodeError"] >= 1
    assert str(domain) in status["domains"]
    metrics = (await request(client, METRICS_SUBJECT, b"", timeout=5)).decode()
    assert 'ctxbus_commits_total{coordinator="c1"}' in metrics


async def test_closed_domain_refuses_everything(running: tuple[NatsClient, TaskGroup]) -> None:
    client, _ = running
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    assert await agent.propose(Close(reason="shipped"), key="close") == Committed(revision=1)
    refused = await agent.propose(AddPending(text="more"))
    assert isinstance(refused, Rejection) and refused.code is RejectionCode.DOMAIN_CLOSED
    assert await agent.propose(Close(reason="shipped"), key="close") == Committed(revision=1, duplicate=True)


async def test_closed_domain_is_purged_after_the_grace_and_stays_closed(nats_url: str) -> None:
    domain = fresh_domain()
    config = {"coordinator_id": "c2", "close_grace": 0.5, "snapshot_every": 1}
    async with serving_coordinator(nats_url, **config) as (client, _, coordinator):
        agent = Proposer(client, domain, agent_id="a")
        assert await agent.propose(AddPending(text="last thing")) == Committed(revision=1)
        log = BriefLog(client)
        assert (await log.load(domain)).brief.pending  # read before the close starts the grace
        assert await agent.propose(Close(reason="done"), key="close") == Committed(revision=2)
        committer = coordinator.committer(domain)
        assert committer is not None
        with anyio.fail_after(10):
            while coordinator.metrics.purges < 1 or coordinator.committer(domain) is not None:
                await anyio.sleep(0.05)  # purged, and its committer gone with it
        assert committer.state is CommitterState.RETIRED
        assert await log.end(domain) == 0
        left = (await log.load(domain)).brief
        assert (left.revision, left.is_closed, left.pending) == (2, True, ())
        # Loaded afresh by the coordinator, the domain still refuses everything.
        refused = await agent.propose(AddPending(text="after the purge"))
        assert isinstance(refused, Rejection) and refused.code is RejectionCode.DOMAIN_CLOSED
        assert await agent.propose(Close(reason="done"), key="close") == Committed(revision=2, duplicate=True)


async def test_a_close_whose_coordinator_died_is_purged_by_the_next_to_load_it(nats_url: str) -> None:
    domain = fresh_domain()
    async with running_coordinator(nats_url, coordinator_id="c-dies", close_grace=3600) as (client, _):
        assert await Proposer(client, domain, agent_id="a").propose(Close(reason="done")) == Committed(revision=1)
    async with running_coordinator(nats_url, coordinator_id="c-next", close_grace=0.2) as (client, _):
        refused = await Proposer(client, domain, agent_id="a").propose(AddNote(text="anyone?"))
        assert isinstance(refused, Rejection) and refused.code is RejectionCode.DOMAIN_CLOSED
        log = BriefLog(client)
        with anyio.fail_after(10):
            while await log.end(domain):
                await anyio.sleep(0.1)
        assert (await log.load(domain)).brief.is_closed


async def test_a_coordinator_that_missed_the_close_and_purge_refuses_to_reopen(
    running: tuple[NatsClient, TaskGroup],
) -> None:
    client, _ = running
    domain, agent = await _cached_domain(client)
    log = BriefLog(client)
    await log.purge(await _commit_behind_its_back(client, domain, Close(reason="shipped")))
    refused = await agent.propose(AddPending(text="start over"))
    assert isinstance(refused, Rejection) and refused.code is RejectionCode.DOMAIN_CLOSED, refused
    assert await log.end(domain) == 0, "nothing was appended to the purged log"


async def test_a_purge_that_meets_an_outage_is_retried_and_the_coordinator_serves_on(
    nats_server_factory: ServerFactory,
) -> None:
    server = nats_server_factory()
    domain = fresh_domain()
    # The grace must outlast the kill below: a purge done before it would never fail.
    async with serving_coordinator(server.url, coordinator_id="c-outage", close_grace=3.0) as serving:
        client, metrics = serving.client, serving.coordinator.metrics
        agent = Proposer(client, domain, agent_id="a")
        assert await agent.propose(Close(reason="done")) == Committed(revision=1)
        await anyio.to_thread.run_sync(server.kill)
        with anyio.fail_after(30):  # the grace ends and the purge fails, at least once
            while metrics.purge_failures < 1:
                await anyio.sleep(0.1)
        await anyio.to_thread.run_sync(server.start)
        log = BriefLog(client)
        with anyio.fail_after(30):
            while True:
                with contextlib.suppress(BusUnavailable):
                    if await log.end(domain) == 0:
                        break
                await anyio.sleep(0.2)
        assert (await log.load(domain)).brief.is_closed
        other = Proposer(client, fresh_domain(), agent_id="b")
        assert await other.propose(AddNote(text="still serving")) == Committed(revision=1)


async def test_a_brief_too_large_to_snapshot_is_reported_and_housekeeping_goes_on(
    nats_server_factory: ServerFactory,
) -> None:
    server = nats_server_factory(max_payload=64 * 1024)
    domain = fresh_domain()
    config = {"coordinator_id": "c-big", "snapshot_every": 1, "close_grace": 0.2}
    async with serving_coordinator(server.url, **config) as serving:
        client = serving.client
        agent = Proposer(client, domain, agent_id="a")
        for i in range(40):  # ~80 kB of notes: the brief outgrows a message
            assert isinstance(await agent.propose(AddNote(text=f"{i} " + "n" * 1990)), Committed)
        assert await agent.propose(Close(reason="done")) == Committed(revision=41)
        log = BriefLog(client)
        with anyio.fail_after(10):  # the purge, scheduled after the failed snapshot
            while await log.end(domain):
                await anyio.sleep(0.1)
        status = serving.coordinator.metrics.status(domains=())
    # Every proposal was answered committed (a failed batch is not answered): only the
    # snapshot failed, and status says so.
    assert status.last_error is not None and f"snapshot of {domain} failed" in status.last_error, status


async def test_idle_domains_leave_the_cache_and_come_back_on_the_next_proposal(nats_url: str) -> None:
    domains = [fresh_domain() for _ in range(5)]
    async with serving_coordinator(nats_url, coordinator_id="c-idle", idle_evict=0.3) as (client, _, coordinator):
        for domain in domains:
            assert await Proposer(client, domain, agent_id="a").propose(AddNote(text="one")) == Committed(revision=1)
        committers = [coordinator.committer(domain) for domain in domains]
        with anyio.fail_after(10):
            while set(json.loads(await request(client, STATUS_SUBJECT, b"", timeout=5))["domains"]) & {
                str(d) for d in domains
            }:
                await anyio.sleep(0.1)
        assert all(c is not None and c.state is CommitterState.RETIRED for c in committers)
        again = Proposer(client, domains[0], agent_id="a")
        assert await again.propose(AddNote(text="two")) == Committed(revision=2)
        repeated = await again.propose(AddNote(text="one"))  # judged on the brief reloaded from the log
        assert isinstance(repeated, Rejection) and repeated.code is RejectionCode.DUPLICATE


def test_a_coordinator_id_too_long_for_its_commits_is_refused_up_front() -> None:
    with pytest.raises(UsageError, match="over the limit"):
        CoordinatorConfig(coordinator_id="c" * 200)
    with pytest.raises(UsageError, match="empty"):
        CoordinatorConfig(coordinator_id=" ")


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("cas_retries", 0, "cas_retries must be at least 1"),
        ("max_batch", 0, "max_batch must be at least 1"),
        ("max_in_flight", 0, "max_in_flight must be at least 1"),
        ("snapshot_every", -1, "snapshot_every must be at least 1"),
        ("forward_timeout", 0.0, "forward_timeout must be a positive number"),
        ("close_grace", -1.0, "close_grace must be zero or more"),
        ("batch_linger", float("nan"), "batch_linger must be zero or more"),
        ("brief_budget_tokens", 0, "brief_budget_tokens must be at least 1"),
    ],
)
def test_settings_that_would_stall_a_coordinator_are_refused_up_front(setting: str, value: float, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CoordinatorConfig(**{setting: value})


async def test_follow_reports_how_far_behind_it_is(running: tuple[NatsClient, TaskGroup]) -> None:
    client, _ = running
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    for i in range(30):
        await agent.propose(AddPending(text=f"item {i}"))
    seen = []
    caught_up = anyio.Event()

    def on_state(state: BriefState) -> None:
        seen.append((state.brief.revision, state.behind))
        if state.behind == 0:
            caught_up.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(BriefLog(client).follow, BriefState(TaskBrief(domain=domain), 0), on_state)
        with anyio.fail_after(10):
            await caught_up.wait()
        tg.cancel_scope.cancel()
    assert seen[0] == (1, 29)
    assert seen[-1] == (30, 0)


async def test_concurrent_proposals_are_committed_in_batches(running: tuple[NatsClient, TaskGroup]) -> None:
    client, _ = running
    domain = fresh_domain()

    async def propose_five(agent: Proposer) -> None:
        for i in range(5):
            assert isinstance(await agent.propose(AddNote(text=f"{agent.agent_id} {i}")), Committed)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(32):
                tg.start_soon(propose_five, Proposer(client, domain, agent_id=f"a{n}"))
    entries = await _log_entries(client, domain)
    revisions = [commit.revision for entry in entries for commit in commits_of(entry)]
    assert revisions == list(range(1, 161))
    assert len(entries) < 160, "proposals waiting on a domain go into one log entry"


async def test_proposals_in_one_batch_are_judged_on_each_other(running: tuple[NatsClient, TaskGroup]) -> None:
    """Sent in one write, three proposals reach the coordinator together and form one
    batch: the second repeats the first, the third completes what the first added."""
    client, _ = running
    domain = fresh_domain()
    ops = [AddPending(text="ship it"), AddPending(text="ship it"), Complete(item_id="p1", outcome="shipped")]
    inbox = client.new_inbox()
    answers = await client.subscribe(f"{inbox}.*")
    for i, op in enumerate(ops):
        proposal = Proposal(deadline=time.time() + 60, domain=domain, author="a", op=op, key=f"k{i}")
        envelope = ProposalEnvelope(domain=domain, sender="a", body=proposal)
        await client.publish(subject(domain, Verb.PROPOSE), envelope.encode(), reply=f"{inbox}.{i}")
    replies = {}
    with anyio.fail_after(10):
        for _ in ops:
            msg = await answers.next_msg(timeout=10)
            replies[msg.subject.rsplit(".", 1)[1]] = ReplyEnvelope.decode(msg.data).body
    await answers.unsubscribe()
    assert replies["0"] == Committed(revision=1)
    assert isinstance(replies["1"], Rejection) and replies["1"].code is RejectionCode.DUPLICATE
    assert replies["2"] == Committed(revision=2)
    entries = await _log_entries(client, domain)
    assert [[c.key for c in commits_of(entry)] for entry in entries] == [["k0", "k2"]]


async def test_a_reopen_is_committed_with_the_ids_of_the_rejections_it_lifts(
    running: tuple[NatsClient, TaskGroup],
) -> None:
    client, _ = running
    domain = fresh_domain()
    agent = Proposer(client, domain, agent_id="a")
    for op in (Reject(option="Redis lock", reason="no Redis"), Reopen(option="redis  LOCK", reason="Redis is in")):
        assert isinstance(await agent.propose(op), Committed)
    entries = await _log_entries(client, domain)
    assert [c.resolved for entry in entries for c in commits_of(entry)] == [(), ("r1",)]


async def test_a_stale_coordinator_does_not_refuse_what_another_committed(
    running: tuple[NatsClient, TaskGroup],
) -> None:
    client, _ = running
    domain, agent = await _cached_domain(client)
    await _commit_behind_its_back(client, domain, AddPending(text="made elsewhere"))
    # Judged on its stale cache alone, p2 would be unknown; the coordinator must notice.
    assert await agent.propose(Complete(item_id="p2", outcome="ok")) == Committed(revision=3)


async def test_a_coordinator_holding_too_many_proposals_answers_busy(nats_url: str) -> None:
    """Beyond `max_in_flight`, proposals are answered `busy` at once instead of queueing
    without bound; proposers retry those with their keys, and each is committed once."""
    domain = fresh_domain()
    propose = subject(domain, Verb.PROPOSE)

    def proposal(i: int) -> bytes:
        body = Proposal(deadline=time.time() + 60, domain=domain, author="a", op=AddNote(text=f"note {i}"), key=f"k{i}")
        return ProposalEnvelope(domain=domain, sender="a", body=body).encode()

    async with running_coordinator(nats_url, coordinator_id="c-small", max_in_flight=2) as (client, _):
        answers: list[object] = []

        async def send(i: int) -> None:
            answer = await request(client, propose, proposal(i), timeout=5)
            answers.append(ReplyEnvelope.decode(answer).body)

        async with anyio.create_task_group() as tg:  # sent together, taken in before any commit
            for i in range(8):
                tg.start_soon(send, i)
        busy = [a for a in answers if isinstance(a, Rejection)]
        assert busy, "8 proposals at once should overflow a coordinator that holds 2"
        assert all(a.code is RejectionCode.BUSY and "holds 2 proposals" in a.reason for a in busy)
        assert all(isinstance(a, Committed) for a in answers if a not in busy)

        async def retry(i: int) -> None:
            agent = Proposer(client, domain, agent_id="a")
            assert isinstance(await agent.propose(AddNote(text=f"note {i}"), key=f"k{i}"), Committed)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(retry, i)
        entries = await _log_entries(client, domain)
        assert sorted(commit.key for entry in entries for commit in commits_of(entry)) == [f"k{i}" for i in range(8)]


async def test_a_batch_too_large_for_one_log_entry_is_split_and_all_of_it_committed(
    nats_server_factory: ServerFactory,
) -> None:
    """On a server taking 8 KiB messages, 20 proposals of ~1 kB each reach the coordinator
    together: no log entry can hold them all, so the batch is split until each part fits."""
    server = nats_server_factory(max_payload=8 * 1024)
    domain = fresh_domain()
    count = 20
    async with running_coordinator(server.url, coordinator_id="c-split") as (client, _):
        inbox = client.new_inbox()
        answers = await client.subscribe(f"{inbox}.*")
        for i in range(count):  # one write: taken in before the committer runs, as one batch
            op = AddNote(text=f"{i:02d} " + "n" * 1000)
            body = Proposal(deadline=time.time() + 60, domain=domain, author="a", op=op, key=f"k{i}")
            envelope = ProposalEnvelope(domain=domain, sender="a", body=body)
            await client.publish(subject(domain, Verb.PROPOSE), envelope.encode(), reply=f"{inbox}.{i}")
        replies = {}
        with anyio.fail_after(30):
            while len(replies) < count:  # asked once each: a batch that failed would go unanswered
                msg = await answers.next_msg(timeout=30)
                replies[msg.subject.rsplit(".", 1)[1]] = ReplyEnvelope.decode(msg.data).body
        await answers.unsubscribe()
        status = json.loads(await request(client, STATUS_SUBJECT, b"", timeout=5))
        entries = await _log_entries(client, domain)
    assert all(isinstance(reply, Committed) for reply in replies.values()), replies
    assert sorted(reply.revision for reply in replies.values() if isinstance(reply, Committed)) == list(
        range(1, count + 1)
    )
    per_entry = [commits_of(entry) for entry in entries]
    assert [c.revision for commits in per_entry for c in commits] == list(range(1, count + 1))
    assert sorted(c.key for commits in per_entry for c in commits) == sorted(f"k{i}" for i in range(count))
    assert len(per_entry) > 1 and max(map(len, per_entry)) > 1, [len(commits) for commits in per_entry]
    assert status["last_error"] is None, status["last_error"]


async def test_a_log_that_keeps_moving_through_every_attempt_is_answered_busy(nats_url: str) -> None:
    """With one compare-and-set allowed, a proposal judged on a cache that another writer
    has moved past loses its only attempt: it is answered `busy`, not committed, and its
    retry (same key) is committed on the brief reloaded meanwhile."""
    async with running_coordinator(nats_url, coordinator_id="c-cas", cas_retries=1) as (client, _):
        domain, agent = await _cached_domain(client)
        moved = await _commit_behind_its_back(client, domain, AddPending(text="made elsewhere"))
        body = Proposal(deadline=time.time() + 60, domain=domain, author="a", op=AddNote(text="mine"), key="k-busy")
        envelope = ProposalEnvelope(domain=domain, sender="a", body=body)
        raw = await request(client, subject(domain, Verb.PROPOSE), envelope.encode(), timeout=10)
        answer = ReplyEnvelope.decode(raw).body
        assert isinstance(answer, Rejection) and answer.code is RejectionCode.BUSY, answer
        assert f"the log of {domain} kept moving during 1 attempts" in answer.reason
        log = BriefLog(client)
        assert await log.end(domain) == moved.seq, "a busy proposal is not appended"
        status = json.loads(await request(client, STATUS_SUBJECT, b"", timeout=5))
        assert "gave up after 1 conflicts" in status["last_error"]
        assert await agent.propose(AddNote(text="mine"), key="k-busy") == Committed(revision=3)
        assert [n.text for n in (await log.load(domain)).brief.notes] == ["warm the cache", "mine"]


async def test_a_brief_over_its_budget_is_folded_and_keeps_its_decisions_and_constraints(nats_url: str) -> None:
    """With a brief budget, the coordinator folds old done items after the commits that
    push the rendered brief over it; goal, constraints and decisions are never folded,
    and every done item's fact is kept."""
    budget, tasks = 100, 15
    domain = fresh_domain()
    config = {"coordinator_id": "c-fold", "brief_budget_tokens": budget, "count_tokens": words}
    settled = [
        SetGoal(text="ship the cache"),
        AddConstraint(text="never edit vendor/"),
        AddConstraint(text="no new dependencies"),
        AddDecision(option="lru eviction", rationale="simplest"),
    ]
    async with running_coordinator(nats_url, **config) as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        log = BriefLog(client)
        for op in settled:
            assert isinstance(await agent.propose(op), Committed)
        for i in range(tasks):
            assert isinstance(await agent.propose(AddPending(text=f"task {i}")), Committed)
            item = (await log.load(domain)).brief.pending[-1]
            assert isinstance(await agent.propose(Complete(item_id=item.id, outcome="ok")), Committed)
        with anyio.fail_after(10):  # the fold follows the commit it answers
            while words(render_brief((final := await log.load(domain)).brief)) > budget:
                await anyio.sleep(0.05)
        entries = [entry async for entry in log.txlog.read(subject(domain, Verb.TX))]

    state, folds = BriefState(TaskBrief(domain=domain), 0), 0
    for entry in entries:
        before, state = state, BriefLog.apply_entry(state, entry)
        if any(commit.op.op == "fold_done" for commit in commits_of(entry)):
            folds += 1
            assert [(c.author, c.committed_by) for c in commits_of(entry)] == [("c-fold:fold", "c-fold")]
            assert words(render_brief(before.brief)) > budget, "folded a brief within its budget"
            assert words(render_brief(state.brief)) <= budget
    assert folds >= 1
    assert state.brief == final.brief
    brief, text = final.brief, render_brief(final.brief)
    assert brief.goal is not None and brief.goal.text == "ship the cache"
    assert [c.text for c in brief.constraints] == ["never edit vendor/", "no new dependencies"]
    assert [d.option for d in brief.decisions] == ["lru eviction"]
    assert brief.done_summary is not None and brief.done_summary.facts
    assert len(brief.done_summary.facts) + len(brief.done) == tasks
    assert [f"task {i} -> ok" for i in range(tasks) if f"task {i} -> ok" not in text] == []


async def test_a_brief_well_within_its_budget_is_not_counted_on_every_commit(nats_url: str) -> None:
    """Counting a long brief costs milliseconds: the coordinator counts again only once
    the commits since the last count could have used up the room it left."""
    counted: list[int] = []

    def counting(text: str) -> int:
        counted.append(words(text))
        return counted[-1]

    domain = fresh_domain()
    async with running_coordinator(
        nats_url, coordinator_id="c-room", brief_budget_tokens=5_000, count_tokens=counting
    ) as (
        client,
        _,
    ):
        agent = Proposer(client, domain, agent_id="a")
        for i in range(60):
            assert isinstance(await agent.propose(AddNote(text=f"note {i}")), Committed)
    assert 1 <= len(counted) <= 3, counted


@pytest.mark.parametrize(
    ("key", "base", "says"),
    [
        ("", None, "field 'key': String should have at least 1 character"),
        ("k" * 300, None, "field 'key' is 300 characters long, over the limit of 128"),
        (None, -1, "field 'base_revision': Input should be greater than or equal to 0"),
    ],
)
async def test_a_proposal_no_coordinator_could_take_is_refused_before_it_is_sent(
    nats_client: NatsClient, key: str | None, base: int | None, says: str
) -> None:
    """An empty key above all: replaced by a fresh one, a retry would commit twice."""
    proposer = Proposer(nats_client, "t/s/proposer", agent_id="a")
    with pytest.raises(UsageError, match=rf"cannot propose 'add_note': .*{says}"):
        await proposer.propose(AddNote(text="x"), key=key, base_revision=base, deadline=0.5)


def test_a_replica_read_before_it_joined_says_to_run_it_first(nats_client: NatsClient) -> None:
    with pytest.raises(UsageError, match="has not joined yet; start run"):
        _ = BriefReplica(nats_client, "t/s/replica").brief


def test_a_brief_budget_without_a_counter_is_refused_up_front() -> None:
    with pytest.raises(UsageError, match="brief_budget_tokens needs count_tokens"):
        CoordinatorConfig(brief_budget_tokens=4_000)


async def test_a_brief_kept_over_budget_by_what_is_never_folded_is_not_folded_after_each_completion(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pending items alone are over the budget: folding every done item cannot help, so
    the coordinator says so once and folds again only after some growth."""
    budget, tasks = 2_000, 40
    domain = fresh_domain()
    config = {"coordinator_id": "c-over", "brief_budget_tokens": budget, "count_tokens": words}
    question = " ".join(["word"] * 20)
    async with running_coordinator(nats_url, **config) as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        for i in range(100):
            assert isinstance(await agent.propose(AddPending(text=f"{question} {i}")), Committed)
        for i in range(tasks):
            reply = await agent.propose(AddPending(text=f"task {i}"))
            assert isinstance(reply, Committed)
            assert isinstance(await agent.propose(Complete(item_id=f"p{reply.revision}", outcome="ok")), Committed)
        entries = await _log_entries(client, domain)
    folds = sum(commit.op.op == "fold_done" for entry in entries for commit in commits_of(entry))
    assert 1 <= folds <= tasks // 2, f"{folds} folds for {tasks} completions"
    told = [r.getMessage() for r in caplog.records if "with every done item folded" in r.getMessage()]
    assert len(told) == 1 and f"over its budget of {budget}" in told[0], told


async def test_a_batch_that_fails_goes_unanswered_and_the_coordinator_serves_on(nats_url: str) -> None:
    """The log refuses the first append (its stream takes no message that large, for a
    while): the batch goes unanswered, and the proposer's retry, same key, commits."""
    domain = fresh_domain()
    async with serving_coordinator(nats_url, coordinator_id="c-fails") as (client, _, coordinator):
        js = client.jetstream()
        config = (await js.stream_info(TX_STREAM)).config
        await js.update_stream(dataclasses.replace(config, max_msg_size=64))
        agent = Proposer(client, domain, agent_id="a")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    partial(agent.propose, AddNote(text="after a failed batch"), key="k1", attempt_timeout=0.5)
                )
                with anyio.fail_after(20):
                    while coordinator.metrics.last_error is None:
                        await anyio.sleep(0.02)
                await js.update_stream(config)
        finally:
            await js.update_stream(config)
        assert "a batch of 1 failed" in coordinator.metrics.last_error
        state = await BriefLog(client).load(domain)
        assert [(n.text, applied_revision(state.brief, "a", "k1")) for n in state.brief.notes] == [
            ("after a failed batch", 1)
        ]
        assert await agent.propose(AddNote(text="and the next one")) == Committed(revision=2)


async def test_a_proposal_gives_up_at_its_deadline_even_inside_an_attempt(nats_client: NatsClient) -> None:
    """A coordinator that takes proposals in and never answers: each attempt would wait
    30 s, but the proposal's deadline of 0.5 s cuts the attempt short."""
    domain = fresh_domain()
    silent = await nats_client.subscribe(subject(domain, Verb.PROPOSE))  # hears, never answers
    try:
        with anyio.fail_after(10), pytest.raises(ProposalUnanswered, match="within 0.5s") as unanswered:
            await Proposer(nats_client, domain, agent_id="a").propose(
                AddNote(text="unheard"), attempt_timeout=30, deadline=0.5
            )
    finally:
        await silent.unsubscribe()
    assert silent.delivered >= 1
    sent = ProposalEnvelope.decode((await silent.next_msg(timeout=1)).data).body
    assert unanswered.value.key == sent.key, "the error names the key to retry with"
    assert f"key={sent.key!r}" in str(unanswered.value)


async def test_an_unreadable_or_busy_answer_is_retried_with_the_same_key(nats_client: NatsClient) -> None:
    domain = fresh_domain()
    answers = [b"\x93garbage", _reply_envelope(Rejection(code=RejectionCode.BUSY, reason="full; retry"))]
    answers.append(_reply_envelope(Committed(revision=7)))
    keys = []

    async def answer(msg: Msg) -> None:
        keys.append(ProposalEnvelope.decode(msg.data).body.key)
        await nats_client.publish(msg.reply, answers[len(keys) - 1])

    sub = await nats_client.subscribe(subject(domain, Verb.PROPOSE), cb=answer)
    try:
        with anyio.fail_after(10):
            reply = await Proposer(nats_client, domain, agent_id="a").propose(AddNote(text="x"), deadline=5)
    finally:
        await sub.unsubscribe()
    assert reply == Committed(revision=7)
    assert len(keys) == 3 and len(set(keys)) == 1


def _reply_envelope(reply: Reply) -> bytes:
    return ReplyEnvelope(domain=fresh_domain(), sender="c-test", body=reply).encode()


_BLOCK_AT_MOST = 20.0
"""Seconds the blocking count below waits for the answer to arrive elsewhere: a hang
guard, far above the milliseconds an answer takes."""


class _CountBlocks:
    """A token counter that holds the event loop calling it, as counting a long brief
    does, until a proposer on another event loop says it has its answer; it notes
    whether that happened while the loop was held."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.answered_while_blocked: bool | None = None

    def __call__(self, text: str) -> int:
        if self.answered_while_blocked is None:
            self.answered_while_blocked = self.answered.wait(_BLOCK_AT_MOST)
        return words(text)


def _propose_from_another_loop(url: str, domain: Domain, answered: threading.Event) -> None:
    """Propose once from a thread with its own event loop; set `answered` when the answer came."""

    async def propose() -> None:
        client = await connect(BusConfig(servers=[url]))
        try:
            reply = await Proposer(client, domain, agent_id="a").propose(AddNote(text="first"))
            assert isinstance(reply, Committed) and reply.revision == 1, reply
            answered.set()
        finally:
            await client.close()

    run_async(propose)


async def test_a_batch_is_answered_before_the_housekeeping_after_it(nats_url: str) -> None:
    """The answers leave before the housekeeping after a batch starts (counting the brief
    against its budget, then a snapshot), not merely before it ends: a proposer on
    another event loop hears its answer while the count still holds this one."""
    count = _CountBlocks()
    config = {"coordinator_id": "c-blocks", "snapshot_every": 1, "brief_budget_tokens": 1_000, "count_tokens": count}
    async with running_coordinator(nats_url, **config):
        with anyio.fail_after(_BLOCK_AT_MOST + 40):
            await anyio.to_thread.run_sync(_propose_from_another_loop, nats_url, fresh_domain(), count.answered)
    assert count.answered_while_blocked is True


def test_metrics_escape_a_coordinator_id_that_would_break_the_exposition_format() -> None:
    text = Metrics(coordinator_id='rack "7"\\east\nb').prometheus()
    assert 'ctxbus_commits_total{coordinator="rack \\"7\\"\\\\east\\nb"} 0.0' in text.splitlines()
