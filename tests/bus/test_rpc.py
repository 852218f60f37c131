"""Core request/reply helpers against a real server: `listen` takes messages in turn,
`serve` answers them concurrently, and neither stops for one that fails."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import anyio
import pytest
from nats.aio.client import Client

from bus import BusConfig, BusError, BusUnavailable, Request, connect, gather, listen, request, serve


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
        assert sorted(await gather(nats_client, subject, b"?", wait=1.0)) == [b"a?", b"b?", b"c?"]
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
