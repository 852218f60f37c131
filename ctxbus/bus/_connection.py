"""Connecting to NATS from a typed config, with settings fit for a long-running daemon.

nats-py's defaults suit a script: 60 reconnect attempts, then give up, and tracebacks
printed to stderr. A coordinator must ride out a server restart of any length and log
one line per event instead, so `connect` sets unlimited reconnects and quiet callbacks.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Annotated, Any, Final, Self
from urllib.parse import urlsplit

import anyio
import nats
from nats.aio.client import Client
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxbus.bus._auth import Credentials
from ctxbus.bus._errors import BusUnavailable, NotAuthorized

__all__ = [
    "BusConfig",
    "NatsClient",
    "TlsConfig",
    "connect",
    "close_quietly",
    "DEFAULT_CLOSE_DEADLINE",
    "DEFAULT_CONNECT_DEADLINE",
]

NatsClient = Client
"""nats' client class, the one `connect` returns: the name the rest of ctxbus uses."""

log = logging.getLogger(__name__)

DEFAULT_CONNECT_DEADLINE: Final = 5.0
"""How long the first connection may take before `connect` gives up, in seconds."""

DEFAULT_CLOSE_DEADLINE: Final = 5.0
"""How long `close_quietly` waits for the server to take the client's last writes, in
seconds: a frozen or cut-off server never does, and a shutdown must not hang on it."""

_SCHEMES = ("nats://", "tls://", "ws://", "wss://")


class TlsConfig(BaseModel):
    """TLS client settings; files are PEM."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ca_file: Path | None = None
    """CA bundle to verify the server with (system CAs when not set)."""
    cert_file: Path | None = None
    """Client certificate, for servers that require mutual TLS."""
    key_file: Path | None = None
    """Private key of `cert_file`."""
    hostname: str | None = None
    """Server name to verify, when it differs from the URL's host."""
    handshake_first: bool = False
    """Start TLS before the NATS INFO exchange (servers with `handshake_first`)."""

    def context(self) -> ssl.SSLContext:
        """Build the SSL context nats-py expects."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.cert_file:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file) if self.key_file else None)
        return ctx


class BusConfig(BaseModel):
    """Where the NATS servers are and how to authenticate to them.

    An empty `servers` list means "use the embedded server"; the caller starts it and
    passes its URL (see `bus.EmbeddedServer`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    servers: Annotated[list[str], Field(default_factory=list)]
    """One URL, or several for a cluster: `nats://host:4222`."""
    name: str = "ctxbus"
    """Client name shown in the server's connection list."""
    token: str | None = None
    """Token auth."""
    user: str | None = None
    """User/password auth."""
    password: str | None = None
    """Password of `user`."""
    creds_file: Path | None = None
    """A `.creds` file (JWT + nkey seed) for decentralized auth."""
    nkey_seed_file: Path | None = None
    """An nkey seed file for nkey auth."""
    credentials: Credentials | None = None
    """A ctxbus principal (`ctxbus auth add-agent` and friends write them): its nkey, and
    the inbox prefix the server lets it receive on."""
    tls: TlsConfig | None = None
    """TLS settings (CA, client certificate). nats-py upgrades to TLS when the server
    says it requires TLS, whatever the URL's scheme: a `tls://` URL alone does not refuse
    a plain-text server. To refuse one, set `handshake_first` (the server must be
    configured with `handshake_first` too)."""
    connect_timeout: float = 2.0
    """Per-attempt TCP connect timeout, seconds."""
    reconnect_time_wait: float = 0.25
    """Pause between reconnect attempts, seconds; short, since servers are local or near."""
    max_reconnect_attempts: int = -1
    """-1 is unlimited: a daemon waits out any outage."""
    ping_interval: float = 5.0
    """Seconds between client pings; with `max_outstanding_pings` bounds stale detection."""
    max_outstanding_pings: int = 3
    """Unanswered pings before the connection is declared stale and re-established."""

    @classmethod
    def from_urls(cls, urls: str, **settings: Any) -> Self:
        """Build from a comma-separated URL list, as given on a command line."""
        servers = [url.strip() for url in urls.split(",") if url.strip()]
        return cls(servers=servers, **settings)

    @field_validator("servers")
    @classmethod
    def _check_urls(cls, servers: list[str]) -> list[str]:
        for url in servers:
            if not url.startswith(_SCHEMES):
                raise ValueError(f"server URL {url!r} must start with one of {', '.join(_SCHEMES)}")
            parsed = urlsplit(url)
            try:
                parsed.port  # noqa: B018 - raises on a malformed port
            except ValueError:
                raise ValueError(f"server URL {url!r} has an invalid port") from None
            if not parsed.hostname:
                raise ValueError(f"server URL {url!r} has no host")
        return servers

    @model_validator(mode="after")
    def _check_auth(self) -> Self:
        chosen = [
            name
            for name, value in (
                ("token", self.token),
                ("user", self.user),
                ("creds_file", self.creds_file),
                ("nkey_seed_file", self.nkey_seed_file),
                ("credentials", self.credentials),
            )
            if value is not None
        ]
        if len(chosen) > 1:
            raise ValueError(f"choose one authentication method, got {' and '.join(chosen)}")
        if self.password is not None and self.user is None:
            raise ValueError("password is set but user is not")
        return self


async def connect(config: BusConfig, *, deadline: float | None = DEFAULT_CONNECT_DEADLINE) -> Client:
    """Connect to NATS and return the client; the caller closes it.

    The first connection is bounded by `deadline` seconds (None waits forever); after
    that the client reconnects without limit.

    :raises BusUnavailable: if no server accepted the connection before the deadline.
    """
    if not config.servers:
        raise BusUnavailable("no NATS server URL configured; start one with `ctxbus up`, or `ctxbus nats`")
    client = Client()
    events = _EventLog(client)
    options: dict[str, Any] = {
        "servers": config.servers,
        "name": config.name,
        "connect_timeout": config.connect_timeout,
        "reconnect_time_wait": config.reconnect_time_wait,
        "max_reconnect_attempts": config.max_reconnect_attempts,
        "ping_interval": config.ping_interval,
        "max_outstanding_pings": config.max_outstanding_pings,
        "error_cb": events.on_error,
        "disconnected_cb": events.on_disconnected,
        "reconnected_cb": events.on_reconnected,
        "closed_cb": events.on_closed,
        "token": config.token,
        "user": config.user,
        "password": config.password,
        "user_credentials": str(config.creds_file) if config.creds_file else None,
        "nkeys_seed": str(config.nkey_seed_file) if config.nkey_seed_file else None,
    }
    if config.credentials is not None:
        options["nkeys_seed_str"] = config.credentials.seed
        options["inbox_prefix"] = config.credentials.inbox_prefix
    if config.tls is not None:
        options["tls"] = config.tls.context()
        options["tls_hostname"] = config.tls.hostname
        options["tls_handshake_first"] = config.tls.handshake_first
    try:
        with anyio.fail_after(deadline):
            await client.connect(**options)
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)
        where = ", ".join(config.servers)
        reason = events.last_error or exc
        if events.refused:
            who = (
                f"as {config.credentials.role} {config.credentials.name} of tenant {config.credentials.tenant}"
                if config.credentials is not None
                else "without credentials"
            )
            raise NotAuthorized(
                f"{where} refused the connection {who}: it admits only the principals of its auth directory. "
                "Connect with the credentials `ctxbus auth add-agent` (or add-operator) wrote: "
                "`ctxbus --credentials FILE ...`, CTXBUS_CREDENTIALS=FILE, or BusConfig(credentials=...)"
            ) from exc
        raise BusUnavailable(
            f"could not connect to {where} within {deadline}s ({reason}); "
            "is the server running? `ctxbus up` starts a local one"
        ) from exc
    events.connected = True
    url = client.connected_url.geturl() if client.connected_url else None
    log.info("connected to %s", url or "NATS", extra={"url": url})
    return client


async def close_quietly(client: Client, *, deadline: float = DEFAULT_CLOSE_DEADLINE) -> None:
    """Close a client whatever state it is in: nats-py asserts if it never got going,
    raises if its transport is already gone (the server went away), and waits without
    end for a server that stopped reading (frozen, or cut off without a reset) to take
    what the client still has to send; after `deadline` seconds we drop the connection
    with those writes.

    Closed just as its server died, nats-py cancels its own reconnect task while that
    task waits for the dead connection to close; the cancellation lands on the
    connection's close future, which the close then awaits in turn. That
    CancelledError is not a cancellation of the caller, and is swallowed; a real one
    (the caller's task is being cancelled) goes on.
    """
    with anyio.move_on_after(deadline) as waited:
        try:
            await client.close()
        except (AssertionError, RuntimeError, nats.errors.Error, OSError) as exc:
            log.debug("closing the NATS client: %r", exc)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            log.debug("closing the NATS client: nats-py cancelled its own close")
    if waited.cancelled_caught:
        log.warning(
            "dropped the NATS connection with writes the server had not taken in %gs (is it frozen, or cut off?)",
            deadline,
        )
        _drop_connection(client)


def _drop_connection(client: Client) -> None:
    """Close the client's socket at once, unsent data and all, so that it is not left
    open under a loop about to close. nats-py has no public way to: its TCP transport
    keeps the asyncio stream writers (a TLS one over the bare one)."""
    transport = getattr(client, "_transport", None)
    for name in ("_io_writer", "_bare_io_writer"):
        writer = getattr(transport, name, None)
        if isinstance(writer, asyncio.StreamWriter):
            writer.transport.abort()


class _EventLog:
    """nats-py callbacks that log one line per event instead of printing tracebacks.

    While disconnected, failed reconnect attempts raise the same few errors over and
    over (a timeout, a refused connection, in turn); we log each kind once per outage at
    WARNING and its repeats at DEBUG, so an outage is a line or two, not a flood. Any
    error while connected is logged at WARNING.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.connected = False
        self.last_error: str | None = None
        self.refused = False
        """Whether the server said no to who we are (an authorization violation): later
        errors (the connection it then closes) must not hide that."""
        self._reported_while_away: set[str] = set()
        """The kinds of error already logged during this outage."""

    async def on_error(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.last_error = message
        self.refused = self.refused or "authorization violation" in message.lower()
        away = not self.client.is_connected
        repeat = away and type(exc).__name__ in self._reported_while_away
        level = logging.DEBUG if repeat or not self.connected else logging.WARNING
        log.log(level, "NATS error: %s", message)
        if away:
            self._reported_while_away.add(type(exc).__name__)

    async def on_disconnected(self) -> None:
        if self.connected and not self.client.is_closed:
            log.warning("disconnected from NATS; reconnecting")

    async def on_reconnected(self) -> None:
        self._reported_while_away.clear()
        url = self.client.connected_url.geturl() if self.client.connected_url else "NATS"
        log.warning("reconnected to %s", url)

    async def on_closed(self) -> None:
        log.info("NATS connection closed")
