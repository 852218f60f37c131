"""`ctxbus swarm demo` (the main job on the embedded default, in one command) and
`ctxbus swarm run` (agent loops on a real model).

This module only wires things up and draws them: the embedded NATS server and an
in-process coordinator come from here, the agent processes and the scenario from
`agents.swarm`, which never imports the coordinator.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import anyio
import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ctxbus.agents.swarm import (
    DEADLINE_FLOOR,
    DEFAULT_AGENTS,
    DEFAULT_MAX_TURNS,
    DEFAULT_RUN_WINDOW,
    DEFAULT_STEP_DELAY,
    DEFAULT_STEPS,
    MAX_AGENTS,
    RUN_TOOLS,
    RUNNER_CREDENTIALS,
    STEP_MARGIN,
    InvalidSwarmConfig,
    RunConfig,
    SwarmConfig,
    SwarmPlan,
    SwarmReport,
    SwarmRunner,
    agent_name,
    check_settings,
)
from ctxbus.bus import AuthStore, BusConfig, Credentials, EmbeddedServer, close_quietly, connect, run_async
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._auth_cmds import TENANT_COORDINATOR
from ctxbus.coordinator.cli._common import console, coordinator_config, errors, parse_domain, print_json
from ctxbus.coordinator.cli._running import INTERRUPTED, one_error, until_signal
from ctxbus.schemas import Domain, brief_hash

__all__ = ["commands"]

commands = command_set()

swarm_app = typer.Typer(
    help="Run a swarm of agents on one task: scripted (demo), or on a real model (run).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
commands.add_typer(swarm_app, name="swarm")

_BAND_STYLE = {"quiet": "dim", "gentle": "cyan", "firm": "yellow", "urgent": "red", "channel2": "bold magenta"}
_STATE_STYLE = {
    "running": "green", "killed": "bold red", "finished": "cyan", "reported": "bold green", "failed": "red",
    "stopped": "yellow",
}  # fmt: skip

_DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Keep every agent's SQLite file and log here (and NATS' store, when embedded).",
        show_default="a temp dir, removed after a clean run",
    ),
]
_JsonReportOption = Annotated[
    bool,
    typer.Option("--json", help="No live view; print the report as JSON (data_kept: whether data_dir is still there)."),
]


@swarm_app.command("demo")
def demo(
    agents: Annotated[
        int, typer.Option("--agents", "-n", metavar="N", help=f"Agent processes to run, 2 to {MAX_AGENTS}.")
    ] = DEFAULT_AGENTS,
    steps: Annotated[int, typer.Option(help="Tool calls each agent makes (40 or more).")] = DEFAULT_STEPS,
    step_delay: Annotated[
        float, typer.Option(metavar="SECONDS", help="Time the scripted model 'thinks' per step; 0 runs flat out.")
    ] = DEFAULT_STEP_DELAY,
    kill_at: Annotated[
        int | None,
        typer.Option(metavar="STEP", help="SIGKILL agent-2 after this step.", show_default="40% of --steps"),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="Give up (exit 1, data kept) if the run is not over by then.",
            show_default=f"{DEADLINE_FLOOR:.0f} + --steps x (--step-delay + {STEP_MARGIN:g})",
        ),
    ] = None,
    data_dir: _DataDirOption = None,
    as_json: _JsonReportOption = False,
    auth: Annotated[
        bool,
        typer.Option(
            "--auth",
            help="Run with tenants and roles enforced by NATS (as `ctxbus up --auth`): the coordinator, "
            "each agent and the runner connect as principals of their own, with their role's permissions.",
        ),
    ] = False,
) -> None:
    """Run N agents on one task and prove that ctxbus keeps them lean and in agreement.

    Starts an embedded NATS server (any free port, so it never clashes with `ctxbus up`),
    a coordinator, and N agent processes. Each agent plays a scripted model (no LLM,
    same story every run) on a real ctxbus runtime:

    - users state hard constraints: agent-1's user three at the start ("never edit
      vendor/", "budget <= 100k tokens", "no new dependencies"), which agent-1 puts in
      the shared brief; every other agent's user one ("never edit vendor/"); later every
      user adds "do not change the signature of Cache.get". Each agent pins its own;
    - each agent's tools return long output (greps, file reads, pytest runs; CI logs
      big enough to be archived and searched with ctx_search / ctx_read);
    - agent-1 rejects a Redis lock; halfway through, agent-2 tries to adopt it anyway and
      the coordinator refuses, naming who rejected it and why;
    - nudges rise with the tail, up to Channel 2 (a synthetic message, exactly once per
      cycle); the agent answers with ctx_reduce;
    - agent-2 is SIGKILLed mid-run and restarted: it resumes from its own SQLite store.

    The report compares each agent's prompt with its full history and checks the
    invariants: the same brief hash on every agent, exactly one Channel 2 message per
    delivered cycle, the refused re-adoption, the resumed agent, each agent's own
    constraints still in its pinned layer (looked for outside the brief, which holds
    them too) and agent-1's three in the brief of every prompt. Exit code 0 only if all
    hold, 1 otherwise (with what broke). Takes about half a minute with the defaults;
    watch it live with `ctxbus top` too. A run is given up after --deadline seconds,
    which grows with --steps and --step-delay unless given.
    """
    try:
        check_settings(agents=agents, steps=steps, step_delay=step_delay, kill_at=kill_at, deadline=deadline)
    except InvalidSwarmConfig as exc:
        raise typer.BadParameter(exc.message, param_hint=exc.option) from None
    if data_dir is not None and any((data_dir / "agents").glob("*.db")):
        raise typer.BadParameter(
            f"{data_dir} already holds a swarm run; pass a new or empty directory", param_hint="--data-dir"
        )
    root = data_dir or Path(tempfile.mkdtemp(prefix="ctxbus-swarm-"))
    domain = Domain.parse(f"demo/{uuid.uuid4().hex[:8]}/cache-fix")

    store = _demo_principals(root / "auth", domain, agents) if auth else None

    def config_for(url: str) -> SwarmConfig:
        return SwarmConfig(
            nats_url=url, domain=domain, data_dir=root,
            agents=agents, steps=steps, step_delay=step_delay, kill_at=kill_at, deadline=deadline,
            credentials_dir=None if store is None else store.credentials_path(domain.user, "x").parent,
        )  # fmt: skip

    _finish(run_async(_demo, root, config_for, as_json, store), root, keep=data_dir is not None, as_json=as_json)


def _finish(report: SwarmReport | None, root: Path, *, keep: bool, as_json: bool) -> NoReturn:
    """Print the report (or that the run was interrupted), drop the data of a clean run
    in a temp dir, and exit: 0 if every invariant held, 1 if not."""
    if report is None:
        errors.print(f"interrupted: every process stopped; agent stores and logs kept in {escape(str(root))}")
        raise typer.Exit(INTERRUPTED)
    keep = keep or not report.ok  # a failed run's files say what went wrong
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    if as_json:
        print_json({**report.model_dump(mode="json"), "data_kept": keep})
    else:
        _print_report(report)
        if keep:
            console.print(f"[dim]data kept in {escape(str(root))}[/]")
    raise typer.Exit(0 if report.ok else 1)


@swarm_app.command("run")
def run(
    base_url: Annotated[
        str,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="The model's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM), "
            "http://127.0.0.1:11434/v1 (Ollama), http://127.0.0.1:8080/v1 (llama.cpp).",
        ),
    ],
    model: Annotated[str, typer.Option("--model", metavar="NAME", help="The model's name at that endpoint.")],
    task: Annotated[
        Path, typer.Option("--task", metavar="FILE.md", help="The task: every agent's first user message.")
    ],
    agents: Annotated[
        int, typer.Option("--agents", "-n", metavar="N", help=f"Agent processes to run, 1 to {MAX_AGENTS}.")
    ] = DEFAULT_AGENTS,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            metavar="TOOL",
            help=f"Optional tools besides the built-in ones ({', '.join(RUN_TOOLS)}): bash runs in --workdir "
            "with a timeout and an output cap (not a sandbox).",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Where bash runs.", show_default="the current directory"),
    ] = None,
    window: Annotated[int, typer.Option(metavar="TOKENS", help="The model's context window.")] = DEFAULT_RUN_WINDOW,
    max_turns: Annotated[
        int, typer.Option(metavar="K", help="Model calls per agent at most (counted across restarts).")
    ] = DEFAULT_MAX_TURNS,
    nats: Annotated[
        str | None,
        typer.Option(
            "--nats",
            metavar="URL",
            help="Run on this NATS server (with JetStream) instead of an embedded one; a coordinator runs here too.",
        ),
    ] = None,
    domain: Annotated[
        Domain | None,
        typer.Option(
            "--domain",
            "-d",
            metavar="USER/SESSION/TASK",
            parser=parse_domain,
            help="The task's domain.",
            show_default="run/<random>/task",
        ),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(metavar="SECONDS", help="Give up (exit 1, data kept) if the run is not over by then."),
    ] = None,
    data_dir: _DataDirOption = None,
    as_json: _JsonReportOption = False,
) -> None:
    """Run N agents on a real model and one task: an agent loop per process, one shared brief.

    Each agent is a loop (`ctxbus.agents.loop`): compose its context inside --window, ask the
    model at --base-url (any OpenAI-compatible endpoint: vLLM, Ollama, llama.cpp's
    server, LiteLLM, OpenAI), run the tools it calls, record the results. The tools are
    ctx_search, ctx_read, ctx_reduce, brief_get and brief_propose, and bash with
    `--tools bash`. A loop stops at the model's final answer, at --max-turns, or when
    the brief is closed. The API key comes from CTXBUS_MODEL_API_KEY or OPENAI_API_KEY
    (local servers need none). Model calls are retried on 429, 5xx, timeouts and an
    endpoint that is down; one that stays down stops its agent with an error, its store
    kept for a restart.

    Starts an embedded NATS server (unless --nats) and a coordinator. The report compares
    each agent's prompt with its full history, shows the prompt and cached tokens the
    endpoint reported, the nudge bands, Channel 1 reminders and Channel 2 deliveries,
    and checks that every agent holds the same brief. Exit code 0 if every agent
    reported and the invariants hold, 1 otherwise.
    """
    root = data_dir or Path(tempfile.mkdtemp(prefix="ctxbus-run-"))
    if data_dir is not None and any((data_dir / "agents").glob("*.db")):
        raise typer.BadParameter(
            f"{data_dir} already holds a swarm run; pass a new or empty directory", param_hint="--data-dir"
        )
    chosen = domain or Domain.parse(f"run/{uuid.uuid4().hex[:8]}/task")
    try:
        settings = RunConfig(
            nats_url=nats or "nats://127.0.0.1:1", domain=chosen, data_dir=root, base_url=base_url, model=model,
            task=task.resolve(), agents=agents, tools=tuple(t for given in tools or () for t in given.split(",") if t),
            workdir=(workdir or Path.cwd()).resolve(), window=window, max_turns=max_turns, deadline=deadline,
        )  # fmt: skip
    except InvalidSwarmConfig as exc:
        raise typer.BadParameter(exc.message, param_hint=exc.option) from None

    def config_for(url: str) -> RunConfig:
        return dataclasses.replace(settings, nats_url=url)

    report = run_async(_demo, root, config_for, as_json, None, nats)
    _finish(report, root, keep=data_dir is not None, as_json=as_json)


def _demo_principals(directory: Path, domain: Domain, agents: int) -> AuthStore:
    """An auth directory for the demo: its tenant (the domain's user) with a
    coordinator, an agent principal per agent, and the runner as an operator."""
    from ctxbus.bus import AuthStore, Role

    store = AuthStore.init(directory)
    store.add_tenant(domain.user)
    store.add_principal(domain.user, TENANT_COORDINATOR, Role.COORDINATOR)
    for index in range(agents):
        store.add_principal(domain.user, agent_name(index), Role.AGENT)
    store.add_principal(domain.user, RUNNER_CREDENTIALS, Role.OPERATOR)
    return store


async def _demo(
    root: Path,
    config_for: Callable[[str], SwarmPlan],
    quiet: bool,
    store: AuthStore | None,
    nats: str | None = None,
) -> SwarmReport | None:
    """Server (embedded, unless `nats` names one), coordinator, swarm; None if
    SIGINT/SIGTERM stopped the run (cancelling the run kills the agent processes; the
    server is stopped even while it starts)."""
    reports: list[SwarmReport] = []

    async def swarm_on(url: str) -> None:
        config = config_for(url)
        credentials = None if store is None else store.credentials(config.domain.user, TENANT_COORDINATOR)
        client = await connect(BusConfig(servers=[url], name="swarm-demo", credentials=credentials))
        try:
            with one_error():
                async with anyio.create_task_group() as tg:
                    coordinator = Coordinator(client, _demo_coordinator_config(credentials))
                    await tg.start(coordinator.run)
                    report = await _swarm(config, quiet)
                    reports.append(report.failing(*_cache_failures(coordinator, config.domain, report)))
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await close_quietly(client)

    async def body() -> None:
        if nats is not None:
            await swarm_on(nats)
            return
        server = EmbeddedServer(root / "nats", port=0, auth=store)
        try:
            await anyio.to_thread.run_sync(server.start)
            await swarm_on(server.url)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)

    await until_signal(body)
    return reports[0] if reports else None


_DEMO_SNAPSHOT_EVERY = 5
"""Commits between snapshots in the demo: often enough that its report checks the brief a
joiner loads from a snapshot, not only a replay of the whole log."""


def _demo_coordinator_config(credentials: Credentials | None) -> CoordinatorConfig:
    config = coordinator_config("swarm-demo", credentials=credentials)
    return dataclasses.replace(config, snapshot_every=_DEMO_SNAPSHOT_EVERY)


def _cache_failures(coordinator: Coordinator, domain: Domain, report: SwarmReport) -> list[str]:
    """The brief the demo's coordinator holds must be the one the log gives."""
    committer = coordinator.committer(domain)
    cached = committer.brief if committer is not None else None
    if cached is None:
        return ["the coordinator holds no brief of the domain, so its cache could not be checked against the log"]
    if cached.revision != report.log_revision:
        return [f"the coordinator's cached brief is at rev {cached.revision}, the log at rev {report.log_revision}"]
    if brief_hash(cached) != report.log_hash:
        return [f"the coordinator's cached brief has hash {brief_hash(cached)[:12]}, the log {report.log_hash[:12]}"]
    return []


async def _swarm(config: SwarmPlan, quiet: bool) -> SwarmReport:
    runner = SwarmRunner(config)
    if quiet:
        return await runner.run()
    url, domain = config.nats_url, config.domain
    console.print(f"NATS at [bold]{url}[/], data in {escape(str(config.data_dir))}, task [bold]{domain}[/]")
    console.print(f"[dim]watch from another terminal: ctxbus top -d {domain} --nats {url}[/]")
    return await _watched(runner)


async def _watched(runner: SwarmRunner) -> SwarmReport:
    """Run with a live table; event lines scroll above it as they arrive. The last frame
    is drawn however the run ends, so an interrupted run shows its agents stopped."""
    printed = 0

    def refresh(live: Live) -> None:
        nonlocal printed
        printed = _print_events(live.console, runner, printed)
        live.update(_live_table(runner))

    # Log lines print above the table, unless stderr goes elsewhere (`2> file`).
    redirect = sys.stderr.isatty()
    with Live(_live_table(runner), console=console, refresh_per_second=8, redirect_stderr=redirect) as live:
        try:
            async with anyio.create_task_group() as tg:

                async def tick() -> None:
                    while True:
                        refresh(live)
                        await anyio.sleep(0.2)

                tg.start_soon(tick)
                report = await runner.run()
                tg.cancel_scope.cancel()
        finally:
            refresh(live)
    return report


def _print_events(out: Console, runner: SwarmRunner, printed: int) -> int:
    """Print the events recorded after the first `printed`; returns the new count.

    Counted by `events_seen`, not by position in `events`: once that is full, it stays
    the same length while events keep coming.
    """
    kept = list(runner.events)
    new = runner.events_seen - printed
    if new > len(kept):
        out.print(Text(f"... {new - len(kept)} earlier events not shown", style="dim"))
    for note in kept[len(kept) - min(new, len(kept)) :]:
        style = "red" if "[unexpected]" in note.text or "SIGKILL" in note.text else ""
        out.print(Text(f"{note.agent:>8} step {note.step:>3}  {note.text}", style=style))
    return runner.events_seen


_LIVE_COLUMNS = ("agent", "state", "pid", "step", "band", "U / T", "prompt", "history", "ch2", "brief rev")
_LIVE_COMPACT = ("agent", "state", "step", "band", "U / T", "ch2", "brief rev")
"""The live table's columns on a screen too narrow for all of them."""
_UNBOUNDED = 100_000
"""Columns to measure a table's natural width in: rich clamps a measure to the screen."""
_LEFT = {"agent", "state", "band", "bands reached", "brief hash"}


def _fits(table: Table) -> bool:
    """Whether `table` fits the screen whole: squeezed, rich cuts names and figures to `age…`."""
    unbounded = console.options.update_width(_UNBOUNDED)
    return console.measure(table, options=unbounded).maximum <= console.width


def _live_table(runner: SwarmRunner) -> Table:
    table = _agents_table(runner, _LIVE_COLUMNS)
    return table if _fits(table) else _agents_table(runner, _LIVE_COMPACT)


def _agents_table(runner: SwarmRunner, columns: tuple[str, ...]) -> Table:
    table = Table(title=f"swarm on {runner.config.domain}", show_edge=False, title_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in _LEFT else "right")
    for a in runner.agents:
        p = a.progress
        state = a.state + (" (restarted)" if a.killed_at is not None and a.state != "killed" else "")
        cells: dict[str, str | Text] = {
            "agent": a.name,
            "state": Text(state, style=_STATE_STYLE.get(a.state, "")),
            "pid": str(a.pid or ""),
            "step": f"{p.step}/{p.steps}" if p else "-",
            "band": Text(p.band, style=_BAND_STYLE.get(p.band, "")) if p else "-",
            "U / T": f"{p.u:,} / {p.t:,}" if p else "-",
            "prompt": f"{p.prompt_tokens:,}" if p else "-",
            "history": f"{p.history_tokens:,}" if p else "-",
            "ch2": str(p.channel2) if p else "-",
            "brief rev": str(a.result.revision if a.result else p.revision) if p else "-",
        }
        table.add_row(*(cells[name] for name in columns))
    return table


_REPORT_COLUMNS = ("agent", "prompt", "full history", "saved", "bands reached", "reminders", "ctx_reduce",
                   "ch2 delivered", "ch2 msgs", "brief rev", "brief hash", "starts")  # fmt: skip
_MODEL_COLUMNS = ("turns", "API prompt", "API cached", "stopped")
"""Shown after the others for a run on a real model (`swarm run`)."""


def _print_report(report: SwarmReport) -> None:
    console.print()
    title = f"report: {report.domain}, {report.elapsed_s:.0f}s"
    scripted = report.victim is not None
    columns = _REPORT_COLUMNS if scripted else _REPORT_COLUMNS + _MODEL_COLUMNS
    rows: list[tuple[str, list[str | Text]]] = []
    for a in report.agents:
        delivered = sum(c.lease == "delivered" for c in a.channel2_cycles)
        cached = a.model_cached_tokens / max(a.model_prompt_tokens, 1)
        model = [] if scripted else [
            str(a.steps), f"{a.model_prompt_tokens:,}", f"{a.model_cached_tokens:,} ({cached:.0%})", a.stopped or "-",
        ]  # fmt: skip
        rows.append((a.agent, [
            a.agent,
            f"{a.prompt_tokens:,}",
            f"{a.history_tokens:,}",
            f"{1 - a.prompt_tokens / max(a.history_tokens, 1):.0%}",
            " > ".join(a.bands),
            str(a.reminders),
            f"{a.reduces} ({a.dropped} tags)" if scripted else str(a.reduces),
            str(delivered),
            str(a.channel2_messages),
            str(a.revision),
            a.hash[:12],
            str(a.starts),
            *model,
        ]))  # fmt: skip
    for u in report.unreported:
        rows.append((u.agent, [Text(u.agent, style="red"), Text(f"no report ({u.state})", style="red")]))
    rows.sort(key=lambda row: _agent_number(row[0]))
    table = Table(title=title, show_edge=False, title_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in _LEFT else "right")
    for _, cells in rows:
        table.add_row(*cells, *["-"] * (len(columns) - len(cells)))
    if not _fits(table):
        table = _report_records(title, [cells for _, cells in rows], columns)
    console.print(table)
    reported, everyone = len(report.agents), len(report.agents) + len(report.unreported)
    scope = "every agent" if not report.unreported else f"every reporting agent ({reported} of {everyone})"
    hashes = {a.hash for a in report.agents}
    if not report.agents:
        same = "no agent reported"
    elif len(hashes) == 1 and report.log_hash in hashes:
        same = f"the same on {scope}"
        if report.replay_hash == report.log_hash:
            joiner = f"the snapshot at rev {report.snapshot_revision}" if report.snapshot_revision else "no snapshot"
            same += f", a joiner from {joiner} and a replay of the log"
    else:
        same = "NOT the same everywhere"
    console.print(f"brief: rev {report.log_revision}, hash {report.log_hash[:12]}, {same}")
    only = f" (on the {reported} of {everyone} that reported)" if report.unreported else ""
    _print_cache_cost(report)
    if not scripted:
        _print_model_totals(report)
    if scripted and report.agents and not any(a.missing_constraints for a in report.agents):
        console.print(f"constraints: each agent's own, as its user stated them, are still pinned in its context{only}")
    if scripted and report.agents and not any(a.missing_from_brief for a in report.agents):
        console.print(f"constraints: the brief in every agent's final prompt still holds agent-1's three{only}")
    for r in report.refusals:
        console.print(f"re-adoption refused: {r.agent} proposed {r.option!r}: {r.reason}", markup=False)
    victim = next((a for a in report.agents if a.agent == report.victim), None)
    if victim is not None and victim.killed_at is not None:
        console.print(
            f"{victim.agent}: SIGKILL after step {victim.killed_at}, resumed at step {victim.resumed_from} from its store"
        )
    if not report.errors_logged:
        console.print("errors logged: none (coordinator and every agent)")
    if report.ok:
        console.print("[bold green]all invariants hold[/]")
    for failure in report.failures:
        console.print(f"[bold red]FAILED:[/] {escape(failure)}")


def _print_cache_cost(report: SwarmReport) -> None:
    """What the agents' prompts cost with a provider's prompt cache, against sending each
    agent's whole history at every call (cached the same way), all agents together."""
    measured = [a for a in report.agents if a.cost and a.full_cost]
    if not measured:
        return
    shares = ", ".join(f"{a.agent} {a.cached_share:.0%}" for a in measured if a.cached_share is not None)
    ratios = []
    for preset in sorted(measured[0].cost):
        ours = sum(a.cost.get(preset, 0.0) for a in measured)
        full = sum(a.full_cost.get(preset, 0.0) for a in measured)
        ratios.append(f"{preset} {ours / max(full, 1):.2f}x")
    console.print(f"prompt cache: cached share {shares}; input cost against the whole history: {', '.join(ratios)}")


def _print_model_totals(report: SwarmReport) -> None:
    """What the endpoint reported, all agents together, and the nudges the models were shown."""
    prompt = sum(a.model_prompt_tokens for a in report.agents)
    cached = sum(a.model_cached_tokens for a in report.agents)
    composed = sum(a.prompt_tokens for a in report.agents)
    history = sum(a.history_tokens for a in report.agents)
    console.print(
        f"model: {prompt:,} prompt tokens reported over every turn, {cached:,} of them cached "
        f"({cached / max(prompt, 1):.0%}); final prompts {composed:,} tokens against {history:,} of full history"
    )
    reminders = sum(a.reminders for a in report.agents)
    delivered = sum(c.lease == "delivered" for a in report.agents for c in a.channel2_cycles)
    console.print(f"nudges: {reminders} Channel 1 reminders shown, {delivered} Channel 2 cycles delivered")


def _report_records(title: str, rows: list[list[str | Text]], columns: tuple[str, ...] = _REPORT_COLUMNS) -> Table:
    """The report as one record per agent, its figures named in words: what a screen too
    narrow for the table shows instead."""
    grid = Table.grid(padding=(0, 2))
    grid.title, grid.title_justify = title, "left"
    grid.add_column(no_wrap=True)
    grid.add_column()
    for cells in rows:
        if len(cells) < len(columns):  # an agent that never reported
            grid.add_row(*cells)
            continue
        f = dict(zip(columns, cells, strict=True))
        model = (
            f"\nturns {f['turns']}; API prompt {f['API prompt']}, cached {f['API cached']}; stopped {f['stopped']}"
            if "turns" in f
            else ""
        )
        grid.add_row(
            f["agent"],
            f"prompt {f['prompt']} tokens, full history {f['full history']} ({f['saved']} saved)\n"
            f"bands {f['bands reached']}; reminders {f['reminders']}; ctx_reduce {f['ctx_reduce']}\n"
            f"ch2 delivered {f['ch2 delivered']}, ch2 msgs {f['ch2 msgs']}; "
            f"brief rev {f['brief rev']}, hash {f['brief hash']}; starts {f['starts']}{model}",
        )
    return grid


def _agent_number(name: str) -> int:
    """`agent-3` -> 3, so rows read in swarm order (agent-10 after agent-9)."""
    return int(name.rpartition("-")[2])
