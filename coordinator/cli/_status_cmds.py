"""What is running: `ctxbus status` and the live `ctxbus top`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated

import anyio
import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agents.brief import read_presence
from bus import STATUS_SUBJECT, BusError, NatsClient, close_quietly, connect, gather, run_async
from coordinator.cli._app import command_set
from coordinator.cli._common import (
    DEFAULT_NATS_URL,
    DomainOption,
    JsonOption,
    NatsOption,
    bus_config,
    console,
    errors,
    parse_domain,
    print_json,
)
from coordinator.cli._running import until_signal
from schemas import CoordinatorStatus, Domain, Presence, WireError

__all__ = ["commands"]

commands = command_set()


@commands.command()
def status(
    domain: Annotated[
        Domain | None,
        typer.Option(
            "--domain",
            "-d",
            envvar="CTXBUS_DOMAIN",
            metavar="USER/SESSION/TASK",
            parser=parse_domain,
            help="Also list this task's agents.",
        ),
    ] = None,
    nats: NatsOption = DEFAULT_NATS_URL,
    as_json: JsonOption = False,
) -> None:
    """Which coordinators are serving, how busy they are, which agents are on a task.

    Exits with status 1 if no coordinator answers, so it serves as a health check.
    """
    if not run_async(_status, nats, domain, as_json):
        raise typer.Exit(1)


_STATUS_WAIT = 1.0
"""Seconds to collect coordinators' answers: each answers at once, from memory."""


async def _status(urls: str, domain: Domain | None, as_json: bool) -> bool:
    """Print the status; whether any coordinator answered."""
    client = await connect(bus_config(urls))
    try:
        answers = await gather(client, STATUS_SUBJECT, b"", wait=_STATUS_WAIT)
        coordinators = sorted(filter(None, map(_coordinator_status, answers)), key=lambda c: c.coordinator)
        agents = await read_presence(client, domain) if domain else []
    finally:
        await close_quietly(client)
    if as_json:
        print_json(
            {
                "coordinators": [c.model_dump(mode="json") for c in coordinators],
                "agents": [a.model_dump(mode="json") for a in agents],
            }
        )
    else:
        if not coordinators:
            console.print("[yellow]no coordinator answered[/]: start one with `ctxbus up` or `ctxbus coordinator`")
        for coord in coordinators:  # the id and the error are the coordinator's words: not markup
            console.print(
                f"coordinator [bold]{escape(coord.coordinator)}[/] up {coord.uptime_s:.0f}s: "
                f"{coord.commits} commits ({coord.commits_per_s}/s), {len(coord.domains)} domains, "
                f"last error: {escape(coord.last_error or 'none')}"
            )
        if domain is not None:
            console.print(_agents_table(domain, agents))
    return bool(coordinators)


def _coordinator_status(answer: bytes) -> CoordinatorStatus | None:
    """A coordinator's status answer; None (and a note on stderr) for anything else.

    Anything may answer on the status subject (another program, a coordinator of another
    version): one bad answer must not hide the coordinators that did answer.
    """
    try:
        return CoordinatorStatus.decode(answer)
    except WireError as exc:
        errors.print(
            f"ignoring an answer on {STATUS_SUBJECT} that is not a coordinator's status: {answer[:60]!r} ({exc})",
            markup=False,  # the answer and the error quote it: a `[` in them is not markup
            soft_wrap=True,  # one line, whatever the terminal's width, for grep
        )
        return None


@commands.command()
def top(
    domain: DomainOption,
    nats: NatsOption = DEFAULT_NATS_URL,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between refreshes.")] = 1.0,
) -> None:
    """A live table of a task's agents: band, U/T, prompt tokens, brief revision, lag.

    Runs until Ctrl-C, through NATS outages too: while the server cannot be read, a
    line above the table says so, and the rows are the last ones read. Into a pipe or
    a file it prints one table per refresh (`ctxbus status -d ... --json` suits scripts).
    """
    run_async(until_signal, lambda: _top(nats, domain, interval))  # Ctrl-C is how it ends: exit 0


async def _top(urls: str, domain: Domain, interval: float) -> None:
    client: NatsClient = await connect(bus_config(urls))
    try:
        if console.is_terminal:
            # Log lines print above the table, unless stderr goes elsewhere (`2> file`).
            with Live(
                _agents_table(domain, []), console=console, refresh_per_second=4, redirect_stderr=sys.stderr.isatty()
            ) as live:
                await _watch(client, domain, interval, live.update)
        else:  # a pipe or a file: a live view would show only its last frame, at the end
            await _watch(client, domain, interval, console.print)
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(client)


async def _watch(client: NatsClient, domain: Domain, interval: float, show: Callable[[RenderableType], object]) -> None:
    """Read the agents' heartbeats every `interval` seconds and `show` them, until cancelled."""
    agents: list[Presence] = []
    while True:
        problem = None
        if not client.is_connected:  # a read now would only wait for its timeout
            problem = "disconnected from NATS, reconnecting"
        else:
            try:
                agents = await read_presence(client, domain)
            except BusError as exc:  # the server went away, or is recovering
                problem = f"cannot read the agents ({exc}), trying again"
        show(_top_view(domain, agents, problem))
        await anyio.sleep(interval)


def _top_view(domain: Domain, agents: list[Presence], problem: str | None) -> RenderableType:
    """The table; while the agents cannot be read, a red line above it says why, and the
    rows are the last ones read (their "seen" column keeps counting)."""
    table = _agents_table(domain, agents)
    if problem is None:
        return table
    line = Text(f"{problem} (Ctrl-C to stop); rows as last read", style="bold red")
    return Group(line, table)


def _agents_table(domain: Domain, agents: list[Presence]) -> Table:
    table = Table(title=f"agents on {domain}", show_edge=False)
    for column in ("agent", "band", "U / T", "prompt", "brief rev", "lag", "seen"):
        # On a narrow screen a long name goes on over lines, rather than being cut to `claude…`.
        table.add_column(column, justify="right" if column not in ("agent", "band") else "left", overflow="fold")
    now = time.time()
    for a in agents:
        table.add_row(
            Text(a.agent),
            Text(a.band),
            f"{a.unused_tokens:,} / {a.tail_tokens:,}",
            f"{a.prompt_tokens:,}",
            str(a.brief_revision),
            str(a.lag),
            f"{now - a.at:.0f}s ago",
        )
    if not agents:
        table.caption = "no live agents"
    return table
