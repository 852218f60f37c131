"""`ctxbus coordinator` that cannot start says why in one line, not in an exception group."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio.to_thread
import pytest

from ctxbus.bus import BriefLog, BusConfig, EmbeddedServer, connect, find_nats_server, free_port
from tests.cli._procs import READ_TIMEOUT, Command


def _coordinator(url: str, *args: str, tmp_path: Path) -> tuple[int, str, str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}
    with Command("coordinator", "--nats", url, *args, env=env) as cli:
        out, err = cli.finish()
    assert cli.proc.returncode is not None
    return cli.proc.returncode, out, err


async def test_more_replicas_than_nodes_is_one_line_that_says_what_was_tried(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    url = nats_server_factory().url
    code, out, err = await anyio.to_thread.run_sync(lambda: _coordinator(url, "--replicas", "3", tmp_path=tmp_path))
    assert code == 1, err
    assert err.splitlines() == [
        "ctxbus: error: cannot create stream 'CTXBUS_TX': replicas > 1 not supported in non-clustered mode"
    ]
    assert out == ""
    client = await connect(BusConfig(servers=[url]))
    await BriefLog(client).ensure()  # the log, with one copy
    await client.close()
    code, _, err = await anyio.to_thread.run_sync(lambda: _coordinator(url, "--replicas", "3", tmp_path=tmp_path))
    assert code == 1, err
    assert err.splitlines() == [
        "ctxbus: error: cannot raise to 3 copies the existing stream 'CTXBUS_TX': "
        "replicas > 1 not supported in non-clustered mode"
    ]


@pytest.fixture
def server_without_jetstream(tmp_path: Path) -> Iterator[str]:
    """A plain nats-server, JetStream off (the default without `-js`); yields its URL."""
    port = free_port()
    with (tmp_path / "nats-server.log").open("wb") as log:
        server = subprocess.Popen([str(find_nats_server()), "-a", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"nats-server did not listen on {port}: {(tmp_path / 'nats-server.log').read_text()}")
                time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def test_a_server_without_jetstream_is_named_as_the_cause(server_without_jetstream: str, tmp_path: Path) -> None:
    code, out, err = _coordinator(server_without_jetstream, tmp_path=tmp_path)
    assert code == 1, err
    assert err.splitlines() == [
        "ctxbus: error: cannot create stream 'CTXBUS_TX': JetStream is not enabled on this server "
        "(start nats-server with -js, or `jetstream {}` in its config), or is not answering yet"
    ]
    assert out == ""
