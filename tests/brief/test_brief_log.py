"""The brief's log at the edge of the server's size limit, on a real server."""

from __future__ import annotations

import uuid

import pytest

from ctxbus.bus import BriefLog, BusConfig, CasConflict, NatsClient, connect
from ctxbus.bus.testing import ServerFactory
from ctxbus.schemas import AddNote, Commit, CommitBatch, CommitEnvelope, Domain, PayloadTooLarge, Proposal

MAX_PAYLOAD = 64 * 1024


def _envelope_size(domain: Domain, commits: list[Commit]) -> int:
    envelope = CommitEnvelope(domain=domain, sender="test", body=CommitBatch(commits=tuple(commits)))
    return len(envelope.encode(max_size=10 * MAX_PAYLOAD))


def _batch_of_size(domain: Domain, size: int) -> list[Commit]:
    """Notes whose commit envelope is `size` bytes, give or take a few."""

    def batch(notes: int, last: int) -> list[Commit]:
        texts = [f"{i} " + "n" * 1990 for i in range(notes)] + ["last " + "n" * last]
        proposals = [
            Proposal(deadline=2e9, domain=domain, author="a", op=AddNote(text=t), key=f"k{i}")
            for i, t in enumerate(texts)
        ]
        return [Commit.of(p, revision=i + 1, ts=0.0, committed_by="test") for i, p in enumerate(proposals)]

    notes = 0
    while _envelope_size(domain, batch(notes + 1, 1)) < size:
        notes += 1
    last = max(1, min(1990, size - _envelope_size(domain, batch(notes, 1))))
    return batch(notes, last)


async def test_a_batch_that_fits_only_without_its_headers_is_refused_and_the_connection_lives(
    nats_server_factory: ServerFactory,
) -> None:
    server = nats_server_factory(max_payload=MAX_PAYLOAD)
    client = await connect(BusConfig(servers=[server.url]))
    try:
        log = BriefLog(client)
        await log.ensure()
        domain = Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}")
        commits = _batch_of_size(domain, MAX_PAYLOAD - 100)  # under the limit, but not with the headers
        assert MAX_PAYLOAD - 200 < _envelope_size(domain, commits) < MAX_PAYLOAD
        state = await log.load(domain)
        with pytest.raises(PayloadTooLarge):
            await log.append(state, commits, sender="test")
        assert not client.is_closed
        half = commits[: len(commits) // 2]  # what the coordinator does next: split the batch
        assert await log.append(state, half, sender="test") > 0
        assert (await log.load(domain)).brief.revision == len(half)
    finally:
        await client.close()


async def test_another_op_under_the_same_key_at_the_same_revision_is_not_taken_for_ours(
    nats_client: NatsClient,
) -> None:
    """Two coordinators judge one author's two ops, sent under one key, on the same base:
    the second append must lose its race, not be answered as the first one's retry."""
    log = BriefLog(nats_client)
    await log.ensure()
    domain = Domain.parse(f"u/s/{uuid.uuid4().hex[:8]}")
    base = await log.load(domain)

    def commit(text: str) -> Commit:
        proposal = Proposal(deadline=2e9, domain=domain, author="a", op=AddNote(text=text), key="same-key")
        return Commit.of(proposal, revision=1, ts=0.0, committed_by="test")

    first = await log.append(base, [commit("one")], sender="c1")
    assert await log.append(base, [commit("one")], sender="c2") == first, "a retry is still recognised"
    with pytest.raises(CasConflict) as lost:
        await log.append(base, [commit("two")], sender="c2")
    assert lost.value.actual == first
