"""Core request/reply helpers against a real server: `listen` takes messages in turn,
`serve` answers them concurrently, and neither stops for one that fails."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import pytest
from nats.aio.client import Client

from ctxbus.bus import BusConfig, BusError, BusUnavailable, Request, connect, gather, listen, request, serve


async def test_listen_takes_messages_one_at_a_time_and_goes_on_after_a_failure(nats_client: Client) -> None:
    subject = f"test.listen.{uuid.uuid4().hex[:8]}"
    taken: list[bytes] = []
    running = most = 0
    all_taken = anyio.Event()

    async def listener(msg: Request) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.01)  # a listener that waits still holds up the next message
        running -= 1
        if msg.data == b"bad":
            raise ValueError("a listener that fails")
        taken.append(msg.data)
        if len(taken) == 3:
            all_taken.set()

    async with anyio.create_task_group() as tg:
        await tg.start(listen, nats_client, subject, listener)
        for data in (b"a", b"bad", b"b", b"c"):
            await nats_client.publish(subject, data)
        with anyio.fail_after(10):
            await all_taken.wait()
        tg.cancel_scope.cancel()
    assert taken == [b"a", b"b", b"c"]
    assert most == 1


async def test_serve_runs_handlers_at_once_and_answers_each(nats_client: Client) -> None:
    subject = f"test.serve.{uuid.uuid4().hex[:8]}"
    both_in = anyio.Event()
    inside = 0

    async def handler(msg: Request) -> bytes | None:
        nonlocal inside
        if msg.data == b"bad":
            raise ValueError("a handler that fails")
        inside += 1
        if inside == 2:
            both_in.set()
        await both_in.wait()  # only returns once another handler runs at the same time
        return msg.data.upper()

    async with anyio.create_task_group() as tg:
        await tg.start(serve, nats_client, subject, handler)
        answers: dict[bytes, bytes] = {}

        async def ask(data: bytes) -> None:
            answers[data] = await request(nats_client, subject, data, timeout=5)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as asking:
                asking.start_soon(ask, b"x")
                asking.start_soon(ask, b"y")
        with pytest.raises(BusUnavailable):  # no answer to a handler that failed
            await request(nats_client, subject, b"bad", timeout=0.5)
        assert await request(nats_client, subject, b"z", timeout=5) == b"Z"  # and serving goes on
        tg.cancel_scope.cancel()
    assert answers == {b"x": b"X", b"y": b"Y"}


async def test_serve_runs_at_most_max_in_flight_handlers_and_the_next_waits_its_turn(nats_client: Client) -> None:
    subject = f"test.limit.{uuid.uuid4().hex[:8]}"
    holding = most = 0
    both_held, release, waited = anyio.Event(), anyio.Event(), anyio.Event()

    async def handler(msg: Request) -> bytes:
        nonlocal holding, most
        if msg.data != b"hold":
            waited.set()
            return msg.data.upper()
        holding += 1
        most = max(most, holding)
        if holding == 2:
            both_held.set()
        await release.wait()
        holding -= 1
        return b"released"

    async with anyio.create_task_group() as tg:
        await tg.start(partial(serve, nats_client, subject, handler, max_in_flight=2))
        held: list[bytes] = []

        async def hold() -> None:
            held.append(await request(nats_client, subject, b"hold", timeout=30))

        async with anyio.create_task_group() as holders:
            holders.start_soon(hold)
            holders.start_soon(hold)
            with anyio.fail_after(10):
                await both_held.wait()
            # Two handlers hold both places: a third request is taken in, but its handler
            # waits, so it cannot be answered however long the wait.
            try:
                early: bytes | None = await request(nats_client, subject, b"x", timeout=0.5)
            except BusUnavailable:
                early = None
            ran_early = waited.is_set()
            release.set()
        with anyio.fail_after(10):
            await waited.wait()  # its turn came once a place was free: it was not dropped
        assert await request(nats_client, subject, b"y", timeout=5) == b"Y"
        tg.cancel_scope.cancel()
    assert (early, ran_early) == (None, False), "a third handler ran while two held both places"
    assert held == [b"released", b"released"]
    assert most == 2


async def test_gather_collects_every_answer_and_none_when_nobody_listens(nats_client: Client) -> None:
    subject = f"test.gather.{uuid.uuid4().hex[:8]}"
    assert await gather(nats_client, subject, b"?", wait=0.3) == []

    def answering(name: bytes) -> Callable[[Request], Awaitable[bytes]]:
        async def handler(msg: Request) -> bytes:
            return name + msg.data

        return handler

    async with anyio.create_task_group() as tg:
        for name in (b"a", b"b", b"c"):
            await tg.start(serve, nats_client, subject, answering(name))
        # `gather` always waits this long: enough for three answers on a loaded machine.
        assert sorted(await gather(nats_client, subject, b"?", wait=3.0)) == [b"a?", b"b?", b"c?"]
        tg.cancel_scope.cancel()


async def test_a_request_that_cannot_be_sent_at_all_is_not_worth_retrying(nats_url: str) -> None:
    client = await connect(BusConfig(servers=[nats_url]))
    with pytest.raises(BusError, match="MaxPayloadError") as too_big:
        await request(client, "rpc.big", b"x" * (client.max_payload + 1), timeout=1)
    assert not isinstance(too_big.value, BusUnavailable)
    await client.close()
    with pytest.raises(BusError, match="ConnectionClosedError") as closed:
        await request(client, "rpc.closed", b"x", timeout=1)
    assert not isinstance(closed.value, BusUnavailable)
