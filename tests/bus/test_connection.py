"""How a client's connection events are logged: an outage is one line, nothing else is hidden."""

from __future__ import annotations

import logging

import anyio
import pytest

from bus import BusConfig, connect
from bus._connection import _EventLog
from bus.testing import ServerFactory


def _levels(caplog: pytest.LogCaptureFixture, text: str) -> list[int]:
    return [r.levelno for r in caplog.records if r.name == "bus._connection" and text in r.getMessage()]


async def test_errors_while_connected_are_warnings_and_only_an_outages_repeats_are_quiet(
    nats_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]), deadline=5)
    events = _EventLog(client)
    events.connected = True
    caplog.set_level(logging.DEBUG, logger="bus._connection")
    try:
        await events.on_error(RuntimeError("slow consumer"))
        await events.on_error(RuntimeError("permissions violation"))
        assert _levels(caplog, "slow consumer") == [logging.WARNING]
        assert _levels(caplog, "permissions violation") == [logging.WARNING]

        await anyio.to_thread.run_sync(server.kill)
        with anyio.fail_after(10):
            while client.is_connected:
                await anyio.sleep(0.05)
        for _ in range(3):
            await events.on_error(RuntimeError("connection refused (test)"))
        await events.on_error(RuntimeError("something else"))
        assert _levels(caplog, "connection refused (test)") == [logging.WARNING, logging.DEBUG, logging.DEBUG]
        assert _levels(caplog, "something else") == [logging.WARNING]
    finally:
        await client.close()
