"""Connections: how their events are logged (an outage is a line or two, nothing else is
hidden), and closing one whatever its state."""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import anyio
import nats.errors
import pytest

from ctxbus.bus import BusConfig, close_quietly, connect
from ctxbus.bus._connection import _EventLog
from ctxbus.bus.testing import ServerFactory


def _levels(caplog: pytest.LogCaptureFixture, text: str) -> list[int]:
    return [r.levelno for r in caplog.records if r.name == "ctxbus.bus._connection" and text in r.getMessage()]


async def test_errors_while_connected_are_warnings_and_only_an_outages_repeats_are_quiet(
    nats_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]), deadline=5)
    events = _EventLog(client)
    events.connected = True
    caplog.set_level(logging.DEBUG, logger="ctxbus.bus._connection")
    try:
        await events.on_error(RuntimeError("slow consumer"))
        await events.on_error(RuntimeError("permissions violation"))
        assert _levels(caplog, "slow consumer") == [logging.WARNING]
        assert _levels(caplog, "permissions violation") == [logging.WARNING]

        await anyio.to_thread.run_sync(server.kill)
        with anyio.fail_after(10):
            while client.is_connected:
                await anyio.sleep(0.05)
        for attempt in range(3):  # reconnect attempts fail with a few kinds of error, in turn
            await events.on_error(ConnectionRefusedError(f"connection refused (test {attempt})"))
            await events.on_error(TimeoutError(f"timed out (test {attempt})"))
        await events.on_error(ValueError("something else"))
        assert _levels(caplog, "connection refused (test") == [logging.WARNING, logging.DEBUG, logging.DEBUG]
        assert _levels(caplog, "timed out (test") == [logging.WARNING, logging.DEBUG, logging.DEBUG]
        assert _levels(caplog, "something else") == [logging.WARNING]
    finally:
        await close_quietly(client)


async def test_a_client_whose_server_died_closes_quietly(nats_server_factory: ServerFactory) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url], max_reconnect_attempts=0), deadline=5)
    await anyio.to_thread.run_sync(server.kill)
    with anyio.fail_after(10):
        while not client.is_closed and client.is_connected:
            await anyio.sleep(0.05)
    await close_quietly(client)
    assert client.is_closed


async def test_a_client_closed_just_as_its_server_dies_closes_without_a_stray_cancellation(
    nats_server_factory: ServerFactory,
) -> None:
    """nats-py's close cancels its reconnect task while that task waits for the dead
    connection to close, and the cancellation lands on the close future our close then
    awaits. Closing the moment the outage shows hits that window a few times in a hundred."""
    server = nats_server_factory()
    for _ in range(150):
        client = await connect(BusConfig(servers=[server.url]), deadline=5)
        await anyio.to_thread.run_sync(server.kill)
        with anyio.fail_after(10):
            while client.is_connected:
                await anyio.sleep(0)
        await close_quietly(client)
        assert client.is_closed
        await anyio.to_thread.run_sync(server.start)


async def test_closing_a_client_whose_server_froze_gives_up_waiting_for_it(
    nats_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopped server reads nothing, so the client's last writes wait for ever: the
    close must not (a Ctrl-C of a coordinator would hang on it)."""
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]), deadline=5)
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        payload = b"x" * 256_000
        with anyio.move_on_after(1):  # fill the socket's buffers; then publishing blocks or fails
            with contextlib.suppress(nats.errors.OutboundBufferLimitError):
                for _ in range(100):
                    await client.publish("frozen.out", payload)
        with anyio.fail_after(30):
            await close_quietly(client, deadline=0.5)
        assert client.is_closed
        assert "writes the server had not taken in 0.5s" in caplog.text
    finally:
        os.kill(server.pid, signal.SIGCONT)
