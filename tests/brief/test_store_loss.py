"""A server that comes back with an empty store: the log and the buckets are created
again by their writers, instead of every write being refused for good."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio

from ctxbus.agents.brief import Proposer
from ctxbus.bus import Bucket, BucketConfig, BusConfig, BusUnavailable, EmbeddedServer, LeaseConfig, Leases, connect
from ctxbus.bus.testing import ServerFactory
from ctxbus.schemas import AddNote, Committed, Domain
from tests._support import running_coordinator

T = TypeVar("T")


async def _lose_the_store(server: EmbeddedServer, factory: ServerFactory, tmp_path: Path) -> None:
    """Kill `server` and start another on its port with an empty store."""
    await anyio.to_thread.run_sync(server.kill)
    factory(port=server.port, data_dir=tmp_path / "empty")


async def _once_back(call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, tried again until the client is back on the server."""
    with anyio.fail_after(60):
        while True:
            try:
                return await call()
            except BusUnavailable:
                await anyio.sleep(0.2)


async def test_a_coordinator_serves_on_after_the_server_loses_its_store(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = nats_server_factory()
    domain = Domain.parse(f"loss/s/{uuid.uuid4().hex[:8]}")
    async with running_coordinator(server.url, coordinator_id="c-loss") as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        assert await agent.propose(AddNote(text="before")) == Committed(revision=1)
        await _lose_the_store(server, nats_server_factory, tmp_path)
        reply = await _once_back(lambda: agent.propose(AddNote(text="after")))
    assert reply == Committed(revision=1), "a new history: what the old store held is gone with it"


async def test_a_bucket_write_after_the_server_lost_its_store_creates_the_bucket_again(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]))
    try:
        bucket = Bucket(client, BucketConfig(name=f"B{uuid.uuid4().hex[:8]}"))
        await bucket.ensure()
        await bucket.put("k", b"before")
        await _lose_the_store(server, nats_server_factory, tmp_path)
        await _once_back(lambda: bucket.put("k", b"after"))
        entry = await bucket.get("k")
        assert entry is not None and entry.value == b"after"
    finally:
        await client.close()


async def test_a_lease_read_after_the_server_lost_its_store_finds_it_free_and_it_can_be_claimed(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]))
    try:
        leases = Leases(client, LeaseConfig(bucket=f"L{uuid.uuid4().hex[:8]}"))
        await leases.ensure()
        await leases.claim("k", "before", ttl=60)
        await _lose_the_store(server, nats_server_factory, tmp_path)
        assert await _once_back(lambda: leases.read("k")) is None
        assert (await leases.claim("k", "after", ttl=60)).record.holder == "after"
    finally:
        await client.close()
