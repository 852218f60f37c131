"""A closed client: every stream and bucket call fails with a `BusError`, never a raw `nats.*` error."""

from __future__ import annotations

import uuid

import pytest

from ctxbus.bus import Bucket, BucketConfig, BusConfig, BusError, BusUnavailable, TxLog, connect


async def test_a_closed_client_gets_bus_errors_from_every_stream_call(nats_url: str) -> None:
    client = await connect(BusConfig(servers=[nats_url]))
    log = TxLog(client)
    bucket = Bucket(client, BucketConfig(name=f"C{uuid.uuid4().hex[:8]}"))
    await log.ensure()
    await bucket.ensure()
    await client.close()
    calls = {
        "ensure log": log.ensure(),
        "last_seq": log.last_seq("ctx.u.s.t.tx"),
        "append": log.append("ctx.u.s.t.tx", b"x", "m1"),
        "purge": log.purge("ctx.u.s.t.tx"),
        "ensure bucket": bucket.ensure(),
        "get": bucket.get("k"),
        "entries": bucket.entries(),
        "put": bucket.put("k", b"v"),
    }
    for name, call in calls.items():
        with pytest.raises(BusError, match="ConnectionClosedError") as caught:
            await call
        assert not isinstance(caught.value, BusUnavailable), name
    with pytest.raises(BusError, match="ConnectionClosedError"):
        async for _ in log.read("ctx.u.s.t.tx"):
            pass
