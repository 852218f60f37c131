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
from rich.table import Table
from rich.text import Text

from ctxbus.agents.brief import read_presence
from ctxbus.bus import STATUS_SUBJECT, BusError, NatsClient, close_quietly, connect, run_async
from ctxbus.coordinator import CoordinatorView, ServingState, survey
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import (
    DEFAULT_NATS_URL,
    DomainOption,
    JsonOption,
    NatsOption,
    bus_config,
    console,
    domain_filter,
    errors,
    print_json,
)
from ctxbus.coordinator.cli._running import until_signal
from ctxbus.schemas import Domain, Presence

__all__ = ["commands"]

commands = command_set()


@commands.command()
def status(
    domain: Annotated[Domain | None, domain_filter("Also list this task's agents.")] = None,
    nats: NatsOption = DEFAULT_NATS_URL,
    as_json: JsonOption = False,
) -> None:
    """Which coordinators are serving, how busy they are, which agents are on a task.

    Exits with status 1 if no coordinator answers, so it serves as a health check.
    """
    if not run_async(_status, nats, domain, as_json):
        raise typer.Exit(1)


async def _status(urls: str, domain: Domain | None, as_json: bool) -> bool:
    """Print the status; whether any coordinator is serving."""
    client = await connect(bus_config(urls, domain=domain))
    try:
        coordinators, foreign = await survey(client)
        agents = await read_presence(client, domain) if domain else []
    finally:
        await close_quietly(client)
    for answer in foreign:
        errors.print(
            f"ignoring an answer on {STATUS_SUBJECT} that is not a coordinator's status: {answer}",
            markup=False,  # the answer and the error quote it: a `[` in them is not markup
            soft_wrap=True,  # one line, whatever the terminal's width, for grep
        )
    now = time.time()
    if as_json:
        print_json(
            {
                "coordinators": [_coordinator_json(c, now) for c in coordinators],
                "agents": [{**a.model_dump(mode="json"), "stale": a.stale(now), "age_s": round(a.age(now), 1)}
                           for a in agents],
            }
        )  # fmt: skip
    else:
        if not any(c.state is ServingState.SERVING for c in coordinators):
            silent = sum(c.state is ServingState.NOT_ANSWERING for c in coordinators)
            hint = "start one with `ctxbus up` or `ctxbus coordinator`"
            if silent:
                hint = f"{silent} not answering (below): wake or restart it, or {hint}"
            console.print(f"[yellow]no coordinator is serving[/]: {hint}")
        for coord in coordinators:
            console.print(_coordinator_lines(coord, now))
        if domain is not None:
            console.print(_agents_table(domain, agents))
    return any(c.state is ServingState.SERVING for c in coordinators)


def _coordinator_json(view: CoordinatorView, now: float) -> dict[str, object]:
    silent = view.silent_for(now)
    return {
        "coordinator": view.coordinator,
        "state": view.state.value,
        "last_heartbeat_s": None if silent is None else round(silent, 1),
        **(view.status.model_dump(mode="json") if view.status else {}),
    }


def _coordinator_lines(view: CoordinatorView, now: float) -> Text:
    """One coordinator: its state, and what it says of itself when it answers."""
    name = Text(view.coordinator, style="bold")  # the coordinator's words: not markup
    if view.status is None:
        silent = view.silent_for(now)
        ago = "" if silent is None else f" (last heartbeat {silent:.0f}s ago)"
        if view.state is ServingState.STOPPED:
            return Text.assemble("coordinator ", name, (f" stopped{ago}", "dim"))
        return Text.assemble("coordinator ", name, (f" not answering{ago}: frozen, stuck or killed", "bold red"))
    st = view.status
    lines = Text.assemble(
        "coordinator ", name, (" serving", "green"),
        f": up {st.uptime_s:.0f}s, {st.commits} commits ({st.commits_per_s}/s), {len(st.domains)} domains",
    )  # fmt: skip
    for label, counts in (("rejections", st.rejections), ("expired", st.expired), ("dead letters", st.dead_letters)):
        if counts:
            lines.append(f"\n  {label}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if st.self_check_failures:
        lines.append(f"\n  self-check failures: {st.self_check_failures}", style="bold red")
    if st.last_error is None:
        lines.append("\n  last error: none")
    else:
        when = "" if st.last_error_at is None else f" ({max(0.0, now - st.last_error_at):.0f}s ago)"
        lines.append(f"\n  last error{when}: {st.last_error}", style="yellow")
    return lines


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
    client: NatsClient = await connect(bus_config(urls, domain=domain))
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
    """Read the agents' and coordinators' heartbeats every `interval` seconds and `show`
    them, until cancelled."""
    agents: list[Presence] = []
    coordinators: list[CoordinatorView] = []
    while True:
        problem = None
        if not client.is_connected:  # a read now would only wait for its timeout
            problem = "disconnected from NATS, reconnecting"
        else:
            try:
                agents = await read_presence(client, domain)
                coordinators, _ = await survey(client, wait=min(interval / 2, 1.0))
            except BusError as exc:  # the server went away, or is recovering
                problem = f"cannot read the agents ({exc}), trying again"
        show(_top_view(domain, agents, coordinators, problem))
        await anyio.sleep(interval)


def _top_view(
    domain: Domain, agents: list[Presence], coordinators: list[CoordinatorView], problem: str | None
) -> RenderableType:
    """The coordinators, one line each, then the agents' table; while they cannot be
    read, a red line above says why, and the rows are the last ones read (their "seen"
    column keeps counting)."""
    now = time.time()
    parts: list[RenderableType] = []
    if problem is not None:
        parts.append(Text(f"{problem} (Ctrl-C to stop); rows as last read", style="bold red"))
    parts.extend(_coordinator_summary(c, now) for c in coordinators)
    if not coordinators:
        parts.append(Text("no coordinator is serving", style="yellow"))
    parts.append(_agents_table(domain, agents))
    return Group(*parts)


def _coordinator_summary(view: CoordinatorView, now: float) -> Text:
    """A coordinator in one line, for `top`."""
    if view.status is not None:
        return Text.assemble(
            "coordinator ", (view.coordinator, "bold"), (" serving", "green"), f", {view.status.commits} commits"
        )
    return _coordinator_lines(view, now)


def _agents_table(domain: Domain, agents: list[Presence]) -> Table:
    table = Table(title=f"agents on {domain}", show_edge=False)
    for column in ("agent", "state", "band", "U / T", "prompt", "brief rev", "lag", "seen"):
        # On a narrow screen a long name goes on over lines, rather than being cut to `claude…`.
        table.add_column(
            column, justify="right" if column not in ("agent", "state", "band") else "left", overflow="fold"
        )
    now = time.time()
    for a in agents:
        stale = a.stale(now)
        table.add_row(
            Text(a.agent),
            Text("stale" if stale else "live", style="bold red" if stale else "green"),
            Text(a.band),
            f"{a.unused_tokens:,} / {a.tail_tokens:,}",
            f"{a.prompt_tokens:,}",
            str(a.brief_revision),
            str(a.lag),
            f"{a.age(now):.0f}s ago",
        )
    if not agents:
        table.caption = "no agents"
    elif any(a.stale(now) for a in agents):
        table.caption = "stale: no heartbeat for a while (frozen, stuck, or killed)"
    return table
