"""pytest plugin: a real ctxbus coordinator for integration tests.

Installed with ctxbus and registered through the `pytest11` entry point, beside the
NATS fixtures of `bus.testing`, so any project's tests can request these without
importing anything:

- `ctxbus_coordinator`: one coordinator serving the session's server (`nats_url`)
  for the whole session, started on first use. It answers every proposal made there
  for the rest of the session; a test that needs none running uses a factory server.
- `ctxbus_coordinator_factory`: start coordinators on any server, a factory server or
  `nats_cluster` (`ctxbus_coordinator_factory(server)`); each is stopped after the test.

Each coordinator is a `ctxbus coordinator` process, as in production: the fixtures
yield a `CoordinatorProcess` with its id, servers and log file, `status()` to ask it
how it is doing, and `kill()`/`start()` for fault tests. A start returns once the
coordinator answers on the status subject, so proposals made after it are served.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, Self

import pytest

from ctxbus.bus import (
    STATUS_SUBJECT,
    BusConfig,
    BusUnavailable,
    EmbeddedServer,
    LoopbackCluster,
    NatsClient,
    ProcessGroup,
    close_quietly,
    connect,
    gather,
    run_async,
)
from ctxbus.schemas import CoordinatorStatus, CtxbusError, WireError

__all__ = [
    "CoordinatorFactory",
    "CoordinatorFailed",
    "CoordinatorProcess",
    "ctxbus_coordinator",
    "ctxbus_coordinator_factory",
]

DEFAULT_START_TIMEOUT: Final = 60.0
"""Seconds a coordinator may take to serve: a Python start and imports, on a busy machine."""
DEFAULT_STOP_TIMEOUT: Final = 10.0
"""Seconds a coordinator may take to stop on SIGTERM before it is killed."""
_STATUS_WAIT = 0.25
"""Seconds one round of asking on the status subject collects answers for."""

Servers = EmbeddedServer | LoopbackCluster | Sequence[str] | str
"""Where a coordinator connects: a server, a cluster, or URLs."""


class CoordinatorFailed(CtxbusError):
    """Raised when a coordinator process exits, or does not serve, before it is ready."""


class CoordinatorProcess(ProcessGroup):
    """A `ctxbus coordinator` child process, for tests; `with` and `async with` start
    and stop it.

    :param servers: the server, the cluster or the URLs it connects to.
    :param coordinator_id: its id in logs, commits and status; a fresh one by default.
    :param replicas: copies of the log and the snapshots it creates; by default the size
        of a `LoopbackCluster` given as `servers`, else 1.
    :param log_path: where its stdout and stderr go (INFO and above); a file in the
        temp dir by default.
    """

    def __init__(
        self,
        servers: Servers,
        *,
        coordinator_id: str | None = None,
        replicas: int | None = None,
        log_path: Path | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.servers = _urls(servers)
        self.coordinator_id = coordinator_id or f"test-coord-{uuid.uuid4().hex[:8]}"
        self.replicas = replicas if replicas is not None else _size(servers)
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"{self.coordinator_id}.log"
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id while running, else None."""
        return self._process.pid if self.running and self._process else None

    @property
    def running(self) -> bool:
        """Whether the process is alive (it may be frozen, or not serving yet)."""
        return self._process is not None and self._process.poll() is None

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        return f"<CoordinatorProcess {self.coordinator_id!r} {state} servers={','.join(self.servers)}>"

    def start(self) -> Self:
        """Start the process and wait until it answers on the status subject.

        Blocks, as `EmbeddedServer.start` does; in async code use `astart`.

        :raises CoordinatorFailed: if it is running already, exits first, or does not
            answer within `start_timeout` seconds (the message quotes its log).
        """
        if self.running:
            raise CoordinatorFailed(f"{self!r} is already running")
        command = [
            sys.executable, "-m", "ctxbus.coordinator.cli", "-v", "coordinator",
            "--nats", ",".join(self.servers), "--id", self.coordinator_id, "--replicas", str(self.replicas),
        ]  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            with ThreadPoolExecutor(1) as pool:  # a thread of its own: the caller's may run an event loop
                pool.submit(run_async, self._until_serving).result()
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop it with SIGTERM, as a service manager would; SIGKILL after `timeout` seconds."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a frozen one cannot act on SIGTERM
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self) -> None:
        """SIGKILL it at once, as a crash would: other coordinators take over its domains."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    async def status(self, client: NatsClient | None = None) -> CoordinatorStatus:
        """This coordinator's answer on the status subject (its commits, domains, errors).

        :param client: a connected client to ask through; one of its own otherwise.
        :raises BusUnavailable: if it does not answer (not serving, frozen, gone).
        """
        own = client is None
        asking = client or await connect(BusConfig(servers=self.servers, name="ctxbus-test-status"))
        try:
            found = await self._ask(asking, wait=1.0)
        finally:
            if own:
                await close_quietly(asking)
        if found is None:
            raise BusUnavailable(f"coordinator {self.coordinator_id} did not answer on {STATUS_SUBJECT}")
        return found

    async def _ask(self, client: NatsClient, *, wait: float) -> CoordinatorStatus | None:
        for answer in await gather(client, STATUS_SUBJECT, b"", wait=wait):
            try:
                status = CoordinatorStatus.decode(answer)
            except WireError:  # someone else answers there too: not ours
                continue
            if status.coordinator == self.coordinator_id:
                return status
        return None

    async def _until_serving(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        client = await connect(BusConfig(servers=self.servers, name="ctxbus-test-probe"))
        try:
            while await self._ask(client, wait=_STATUS_WAIT) is None:
                if self._process is None or self._process.poll() is not None:
                    code = self._process.returncode if self._process else None
                    raise CoordinatorFailed(
                        f"coordinator {self.coordinator_id} exited with code {code}: {self._tail()}"
                    )
                if time.monotonic() > deadline:
                    raise CoordinatorFailed(
                        f"coordinator {self.coordinator_id} did not serve within {self.start_timeout:g}s: {self._tail()}"
                    )
        finally:
            await close_quietly(client)

    def _tail(self, lines: int = 10) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"no log at {self.log_path}"
        return f"its log ({self.log_path}) ends with:\n" + ("\n".join(text.strip().splitlines()[-lines:]) or "(empty)")


def _urls(servers: Servers) -> list[str]:
    if isinstance(servers, EmbeddedServer):
        return [servers.url]
    if isinstance(servers, LoopbackCluster):
        return servers.urls
    if isinstance(servers, str):
        return [url.strip() for url in servers.split(",") if url.strip()]
    return list(servers)


def _size(servers: Servers) -> int:
    return len(servers.nodes) if isinstance(servers, LoopbackCluster) else 1


CoordinatorFactory = Callable[..., CoordinatorProcess]
"""`ctxbus_coordinator_factory(servers, **CoordinatorProcess options)`."""


@pytest.fixture(scope="session")
def ctxbus_coordinator(
    nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CoordinatorProcess]:
    """A coordinator serving the session's server (`nats_url`) until the session ends.

    Shared by every test that asks for it, so do not kill it: start your own with
    `ctxbus_coordinator_factory` for that.
    """
    log_path = tmp_path_factory.mktemp("ctxbus-coordinator") / "coordinator.log"
    with CoordinatorProcess(nats_server, coordinator_id="ctxbus-session-coordinator", log_path=log_path) as running:
        yield running


@pytest.fixture
def ctxbus_coordinator_factory(tmp_path: Path) -> Iterator[CoordinatorFactory]:
    """Start coordinators: `ctxbus_coordinator_factory(server_or_cluster_or_urls, **options)`.

    Each logs to a file under the test's `tmp_path` unless `log_path` is given, and is
    stopped after the test, also if the test killed or froze it.
    """
    started: list[CoordinatorProcess] = []

    def start(servers: Servers, **options: Any) -> CoordinatorProcess:
        options.setdefault("log_path", tmp_path / f"coordinator-{len(started)}.log")
        coordinator = CoordinatorProcess(servers, **options)
        started.append(coordinator)
        return coordinator.start()

    try:
        yield start
    finally:
        for coordinator in started:
            coordinator.stop()
