"""Replication: an R3 log keeps accepting appends with one of three nodes dead, and
coordinators create the log with the copies they are told to, never fewer."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import nats.errors
import nats.js.errors
import pytest

from ctxbus.bus import (
    BRIEF_BUCKET,
    LEASE_BUCKET,
    PRESENCE_BUCKET,
    TX_STREAM,
    BusConfig,
    BusError,
    BusUnavailable,
    EmbeddedServer,
    Leases,
    LoopbackCluster,
    TxLog,
    TxLogConfig,
    close_quietly,
    connect,
)
from ctxbus.coordinator import Coordinator, CoordinatorConfig


async def _once_the_cluster_answers(step: Callable[[], Awaitable[object]]) -> None:
    """Run `step`, again while it fails on the bus: a stream's raft group needs a leader,
    and a node an earlier test restarted may leave the cluster without one for a while."""
    with anyio.fail_after(60):
        while True:
            try:
                await step()
                return
            except BusError:
                await anyio.sleep(0.2)


async def test_r3_stream_survives_losing_a_node(nats_cluster: LoopbackCluster) -> None:
    config = TxLogConfig(stream="CTXBUS_TX_R3", subjects=("r3.>",), replicas=3, attempt_timeout=1.0)
    client = await connect(BusConfig(servers=nats_cluster.urls))
    log = TxLog(client, config)
    await _once_the_cluster_answers(log.ensure)
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
        await close_quietly(client)  # its node may have just died


async def test_an_append_retried_while_its_first_attempt_is_still_being_stored_gets_its_sequence(
    nats_cluster: LoopbackCluster,
) -> None:
    """With both followers frozen, the stream leader cannot store the first attempt; the
    retry meets "duplicate message id is in process", which must be asked again, not
    refused: once the followers are back, the first attempt is stored, once."""
    config = TxLogConfig(stream="CTXBUS_TX_INPROC", subjects=("inproc.>",), replicas=3, attempt_timeout=0.5)
    client = await connect(BusConfig(servers=nats_cluster.urls))
    log = TxLog(client, config)
    await _once_the_cluster_answers(log.ensure)
    subject = f"inproc.{uuid.uuid4().hex[:8]}"
    await log.append(subject, b"first", "m0")
    info = await client.jetstream().stream_info(config.stream)
    assert info.cluster is not None and info.cluster.leader
    leader = next(node for node in nats_cluster.nodes if node.server_name == info.cluster.leader)
    followers = [node for node in nats_cluster.nodes if node is not leader]
    await close_quietly(client)
    client = await connect(BusConfig(servers=[leader.url]))
    log = TxLog(client, config)
    appended: list[int] = []

    async def append() -> None:
        appended.append(await log.append(subject, b"second", "m1"))

    try:
        for node in followers:
            os.kill(node.pid or 0, signal.SIGSTOP)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(append)
                await anyio.sleep(3)  # attempts time out, and are answered "in process"
                for node in followers:
                    os.kill(node.pid or 0, signal.SIGCONT)
        finally:
            for node in followers:
                os.kill(node.pid or 0, signal.SIGCONT)
        assert [entry.payload async for entry in log.read(subject)] == [b"first", b"second"]
        assert appended == [info.state.last_seq + 1]
    finally:
        await close_quietly(client)


async def test_a_coordinator_creates_the_log_with_its_replicas_and_never_cuts_them(
    nats_cluster: LoopbackCluster,
) -> None:
    client = await connect(BusConfig(servers=nats_cluster.urls))
    js = client.jetstream()

    async def copies(stream: str) -> int:
        try:
            return (await js.stream_info(stream)).config.num_replicas or 1
        except nats.js.errors.NotFoundError:
            return 0  # not created yet
        except nats.errors.TimeoutError:  # no leader to answer: a node an earlier test restarted may still be voting
            await nats_cluster.wait_for_leader(stream)
            return await copies(stream)

    streams = (TX_STREAM, f"KV_{BRIEF_BUCKET}", f"KV_{LEASE_BUCKET}", f"KV_{PRESENCE_BUCKET}")

    async def served(config: CoordinatorConfig, until_copies: list[int]) -> bool:
        """Run a coordinator until the streams have `until_copies`; False if it could not start."""
        ok = True
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(Coordinator(client, config).run)
                # The agents' buckets are made in the background, and raising a bucket's
                # copies may outlast a request on a busy cluster.
                while [await copies(stream) for stream in streams] != until_copies:
                    await anyio.sleep(0.2)
                tg.cancel_scope.cancel()
        except* BusError:  # a new raft group needs a leader; a node just restarted may count as offline
            ok = False
        return ok

    async def serve_once(config: CoordinatorConfig, until_copies: list[int]) -> None:
        with anyio.fail_after(60):
            while not await served(config, until_copies):
                await anyio.sleep(0.2)

    try:
        await _once_the_cluster_answers(Leases(client).ensure)  # an agent came first: one copy
        await serve_once(CoordinatorConfig(coordinator_id="c-r3", replicas=3), [3, 3, 3, 3])
        # The single-node default never cuts them down.
        await serve_once(CoordinatorConfig(coordinator_id="c-default"), [3, 3, 3, 3])
        assert [await copies(stream) for stream in streams] == [3, 3, 3, 3]
    finally:
        await close_quietly(client)  # its node may have just died


async def test_waiting_for_the_leader_of_a_stream_that_does_not_exist_says_so(nats_cluster: LoopbackCluster) -> None:
    with pytest.raises(
        BusUnavailable,
        match=r"no running node of .* leads stream NO_SUCH_STREAM after 1s \(stream NO_SUCH_STREAM: stream not found",
    ):
        await nats_cluster.wait_for_leader("NO_SUCH_STREAM", timeout=1)


async def test_a_starting_coordinator_waits_for_a_bus_that_answers_late(tmp_path: Path) -> None:
    """A coordinator started with its cluster (as `ctxbus up --cluster 3` does) may find
    the cluster still settling (no answer in time, copies it cannot place yet): it waits
    rather than exiting. Here the server is frozen for longer than one request waits."""
    with EmbeddedServer(tmp_path) as server:
        client = await connect(BusConfig(servers=[server.url]))
        assert (pid := server.pid) is not None
        try:
            async with anyio.create_task_group() as tg:
                os.kill(pid, signal.SIGSTOP)
                thawed = anyio.Event()

                async def thaw() -> None:
                    await anyio.sleep(TxLogConfig().attempt_timeout + 1)
                    os.kill(pid, signal.SIGCONT)
                    thawed.set()

                tg.start_soon(thaw)
                with anyio.fail_after(60):
                    await tg.start(Coordinator(client, CoordinatorConfig(coordinator_id="c-patient")).run)
                assert thawed.is_set()
                assert (await client.jetstream().stream_info(TX_STREAM)).config.name == TX_STREAM
                tg.cancel_scope.cancel()
        finally:
            os.kill(pid, signal.SIGCONT)
            await close_quietly(client)
