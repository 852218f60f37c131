"""`ctxbus web`: serve a live page of the swarm on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape

from ctxbus.bus import close_quietly, connect, run_async
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import (
    DEFAULT_NATS_URL,
    NatsOption,
    bus_config,
    console,
    default_state_dir,
    domain_filter,
    verifier_of,
)
from ctxbus.coordinator.cli._running import until_signal
from ctxbus.schemas import Domain

__all__ = ["commands"]

commands = command_set()

DEFAULT_PORT = 8420


@commands.command()
def web(
    nats: NatsOption = DEFAULT_NATS_URL,
    domain: Annotated[Domain | None, domain_filter("Show this task only (every domain seen by default).")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on; 0 picks a free one.")] = DEFAULT_PORT,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on. Anything but loopback needs `ctxbus --credentials FILE web`."),
    ] = "127.0.0.1",
    store_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--store-dir",
            help="Where agents' SQLite stores are (DIR/AGENT.db or DIR/USER/SESSION/TASK/AGENT.db); "
            "repeat for several \\[default: STATE_DIR/agents].",
            show_default=False,
        ),
    ] = None,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between reads of the bus.")] = 1.0,
) -> None:
    """Serve a live page of the swarm: agents, contexts, the brief's history, health.

    Views: the swarm (every domain, its agents and coordinators), an agent (U and T over
    time with the band thresholds, prompt tokens per layer, cached share, what its model
    sees now where its store is readable here), the brief (now, its log as a searchable
    timeline, any revision) and health (dead letters, rejection codes, commit latency,
    last errors). The page updates itself (server-sent events) and needs no internet.
    JSON for each view is under /api/. Listens on 127.0.0.1 unless --host says otherwise;
    with `ctxbus --credentials FILE web` it shows only that principal's tenant. Runs
    until Ctrl-C.
    """
    import os

    from ctxbus.coordinator.cli._common import CREDENTIALS_ENV
    from ctxbus.coordinator.cli._web import is_loopback

    credentials = os.environ.get(CREDENTIALS_ENV)
    if not is_loopback(host) and not credentials:
        raise typer.BadParameter(
            f"{host} is not a loopback address: anyone who reaches it would see every tenant's briefs; "
            "listen on 127.0.0.1, or start it with `ctxbus --credentials FILE web` to show one tenant",
            param_hint="--host",
        )
    dirs = store_dir or [default_state_dir() / "agents"]
    run_async(until_signal, lambda: _web(nats, domain, host, port, dirs, interval))


async def _web(urls: str, domain: Domain | None, host: str, port: int, dirs: list[Path], interval: float) -> None:
    from ctxbus.coordinator.cli._web import read_store, serving_web

    bus = bus_config(urls, name="ctxbus-web", domain=domain)
    client = await connect(bus)
    try:
        tenant = bus.credentials.tenant if bus.credentials is not None else None
        try:
            context = serving_web(
                client, inspect=read_store, host=host, port=port, store_dirs=dirs, tenant=tenant, only=domain,
                verifier=verifier_of(bus), interval=interval,
            )  # fmt: skip
            async with context as url:
                shown = f" ({escape(str(domain))} only)" if domain else ""
                tenant_note = f", tenant {escape(tenant)}" if tenant else ""
                console.print(f"serving {url}{shown}{tenant_note}; Ctrl-C to stop", soft_wrap=True)
                await anyio.sleep_forever()
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}", param_hint="--port"
            ) from None
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)
