"""Replication: an R3 log keeps accepting appends with one of three nodes dead."""

from __future__ import annotations

import uuid

import anyio

from bus import BusConfig, LoopbackCluster, TxLog, TxLogConfig, connect


async def test_r3_stream_survives_losing_a_node(nats_cluster: LoopbackCluster) -> None:
    config = TxLogConfig(stream="CTXBUS_TX_R3", subjects=("r3.>",), replicas=3, attempt_timeout=1.0)
    client = await connect(BusConfig(servers=nats_cluster.urls))
    log = TxLog(client, config)
    with anyio.fail_after(30):
        while True:  # the stream's raft group needs a leader before the first append
            try:
                await log.ensure()
                break
            except Exception:
                await anyio.sleep(0.2)
    subject = f"r3.{uuid.uuid4().hex[:8]}"
    before = [await log.append(subject, b"before", f"b{i}") for i in range(10)]
    victim = next(node for node in nats_cluster.nodes if node.url != client.connected_url.geturl())
    victim.kill()
    try:
        after = [await log.append(subject, b"after", f"a{i}") for i in range(10)]
        assert after[0] > before[-1]
        assert len([e async for e in log.read(subject)]) == 20
    finally:
        victim.start()
        await client.close()
