"""Presence heartbeats: written with a TTL, read back per domain, gone when the agent is."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest

from ctxbus.agents.brief import PresenceBeacon, read_presence
from ctxbus.bus import PRESENCE_BUCKET, Bucket, BucketConfig, BusConfig, EmbeddedServer, NatsClient, connect, kv_key
from ctxbus.schemas import Presence
from tests._support import fresh_domain


async def test_a_heartbeat_is_read_back_in_its_domain_only_and_expires_with_its_agent(
    nats_client: NatsClient,
) -> None:
    domain, other = fresh_domain("pres"), fresh_domain("pres")
    beats = 0

    def snapshot() -> Presence:
        nonlocal beats
        beats += 1
        return Presence(agent="a1", band="firm", prompt_tokens=1234, brief_revision=beats)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(PresenceBeacon(nats_client, domain, "a1", snapshot, interval=0.2).run)
            while not (seen := await read_presence(nats_client, domain)) or seen[0].brief_revision < 2:
                await anyio.sleep(0.1)  # a second beat replaces the first
            assert [(p.agent, p.band, p.prompt_tokens) for p in seen] == [("a1", "firm", 1234)]
            assert await read_presence(nats_client, other) == []
            tg.cancel_scope.cancel()
        while await read_presence(nats_client, domain):  # the TTL (1 s here) runs out
            await anyio.sleep(0.2)


async def test_an_unreadable_heartbeat_is_skipped_with_a_warning(
    nats_client: NatsClient, caplog: pytest.LogCaptureFixture
) -> None:
    domain = fresh_domain("pres")
    bucket = Bucket(nats_client, BucketConfig(name=PRESENCE_BUCKET))
    await bucket.ensure()
    await bucket.put(kv_key(domain, "junk"), b"\xc1 not msgpack")
    await bucket.put(kv_key(domain, "ok"), Presence(agent="ok").encode())
    with caplog.at_level(logging.WARNING):
        assert [p.agent for p in await read_presence(nats_client, domain)] == ["ok"]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and kv_key(domain, "junk") in r.getMessage()]
    assert warned, "the unreadable heartbeat is named in a warning"


async def test_reading_presence_on_a_fresh_server_creates_nothing(
    nats_server_factory: Callable[..., EmbeddedServer],
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]))
    try:
        assert await read_presence(client, fresh_domain("pres")) == []
        assert await client.jetstream().streams_info() == []
    finally:
        await client.close()
