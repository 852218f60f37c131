"""The `ctxbus` application object and its entry point.

Commands load lazily. The root group knows each command's name, panel and one-line
summary from `COMMANDS`, which is all `ctxbus --help` shows, and imports a command's
module only when that command runs (or shows its own help). So `ctxbus --version` and
`ctxbus --help` import typer alone, and every command imports only what it uses: the
daemon, NATS, pydantic, tiktoken and MCP each cost a good part of a second to import on
a small machine (`bench/cli.py` measures it).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, TextIO

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

__all__ = ["COMMANDS", "app", "load_command", "main"]


@dataclass(frozen=True)
class Listed:
    """What the root's help shows of a command before its module is loaded."""

    module: str
    """The module under `coordinator.cli` that defines it, in a `typer.Typer` named `commands`."""
    panel: str
    """The heading it is listed under."""
    summary: str
    """Its help's first paragraph (a test checks that the two agree)."""


COMMANDS: Final = {
    "swarm": Listed(
        "_swarm_cmds", "Start here", "Run a swarm of agents on one task: scripted (demo), or on a real model (run)."
    ),
    "up": Listed(
        "_serve_cmds", "Servers", "Start NATS and a coordinator in one foreground process: everything agents need."
    ),
    "nats": Listed("_serve_cmds", "Servers", "Run the embedded NATS server (JetStream) in the foreground."),
    "coordinator": Listed(
        "_serve_cmds", "Servers", "Run the coordinator daemon against an existing NATS server or cluster."
    ),
    "brief": Listed("_brief_cmds", "Shared brief", "Show the shared brief of a task, or propose a change to it."),
    "log": Listed("_brief_cmds", "Shared brief", "Print the task's transaction log: every commit, in order."),
    "status": Listed(
        "_status_cmds", "Watching", "Which coordinators are serving, how busy they are, which agents are on a task."
    ),
    "top": Listed(
        "_status_cmds", "Watching", "A live table of a task's agents: band, U/T, prompt tokens, brief revision, lag."
    ),
    "web": Listed(
        "_web_cmds", "Watching", "Serve a live page of the swarm: agents, contexts, the brief's history, health."
    ),
    "auth": Listed(
        "_auth_cmds", "Servers", "Tenants and roles: write the NATS config and each principal's credentials."
    ),
    "mcp": Listed("_mcp_cmds", "Agents", "Serve an agent's brief and context tools to an MCP client over stdio."),
    "hook": Listed(
        "_hook_cmds",
        "Agents",
        "Keep Claude Code's model on the task: hooks that put the user's rules and the brief back in its context.",
    ),
    "replay": Listed(
        "_context_cmds", "Context", "Run recorded sessions through a local context: savings, bands, what was trimmed."
    ),
    "inspect": Listed(
        "_context_cmds", "Context", "Show what an agent's model sees, layer by layer, with token counts."
    ),
}
"""Every command, in the order `ctxbus --help` lists them."""

_loaded: dict[str, TyperGroup] = {}
"""The commands of each module imported so far, built once."""


def load_command(name: str) -> typer.core.TyperCommand | TyperGroup:
    """Import the module of command `name` and return the command it defines.

    :raises KeyError: if `name` is not in `COMMANDS`.
    """
    listed = COMMANDS[name]
    group = _loaded.get(listed.module)
    if group is None:
        module = importlib.import_module(f"{__package__}.{listed.module}")
        commands = module.commands
        if not isinstance(commands, typer.Typer):
            raise TypeError(f"{module.__name__}.commands is not a typer.Typer")
        group = _loaded[listed.module] = typer.main.get_group(commands)
    command = group.commands[name]
    command.rich_help_panel = listed.panel  # type: ignore[attr-defined]  # typer's commands and groups have it
    return command  # type: ignore[return-value]


class _LazyGroup(TyperGroup):
    """The root group: lists `COMMANDS` without importing them; loads the one that runs.

    Its command table holds a placeholder per command, which is all the root's help
    (and typer's "did you mean" on a typo) reads; `resolve_command` loads the real
    command before it runs, and once its module is loaded `get_command` returns it.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = {
            name: TyperCommand(name=name, short_help=listed.summary, rich_help_panel=listed.panel)
            for name, listed in COMMANDS.items()
        }

    # typer.Context is what typer passes; typer types these with its own click's base class.
    def get_command(  # type: ignore[override]
        self, ctx: typer.Context, cmd_name: str
    ) -> typer.core.TyperCommand | TyperGroup | None:
        listed = COMMANDS.get(cmd_name)
        if listed is not None and f"{__package__}.{listed.module}" in sys.modules:
            return load_command(cmd_name)
        return self.commands.get(cmd_name)  # type: ignore[return-value]

    def resolve_command(  # type: ignore[override]
        self, ctx: typer.Context, args: list[str]
    ) -> tuple[str | None, typer.core.TyperCommand | TyperGroup | None, list[str]]:
        if args and args[0] in COMMANDS:
            load_command(args[0])
        return super().resolve_command(ctx, args)  # type: ignore[return-value]


def command_set() -> typer.Typer:
    """The `typer.Typer` a command module registers its commands on, as `commands`."""
    return typer.Typer(rich_markup_mode="markdown", add_completion=False)


app = typer.Typer(
    cls=_LazyGroup,
    name="ctxbus",
    help=(
        "Keep a swarm of AI agents inside their context budgets, sharing one task brief over NATS.\n\n"
        "Start here: **ctxbus swarm demo** runs everything on an embedded NATS server; "
        "**ctxbus up** starts NATS and a coordinator for your own agents."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ctxbus {version('ctxbus')}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv: debug).")] = 0,
    _version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    credentials: Annotated[
        str | None,
        typer.Option(
            "--credentials",
            envvar="CTXBUS_CREDENTIALS",
            metavar="FILE",
            help="Connect as this principal (a file `ctxbus auth` wrote); needed on a server with auth.",
            show_default=False,
        ),
    ] = None,
) -> None:
    if credentials:
        import os

        os.environ["CTXBUS_CREDENTIALS"] = credentials  # read where a command connects, and by its children
    handler = _StderrNow()
    handler.setFormatter(_WithExtras("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    from ctxbus.bus import (  # every command that logs talks to NATS: bus is loaded anyway
        RepeatFilter,
        configure_from_env,
    )

    handler.addFilter(RepeatFilter())  # an outage's retries: one line, then a count
    configure_from_env("ctxbus")  # traces over OTLP, where OTEL_EXPORTER_OTLP_ENDPOINT asks for them
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)], handlers=[handler])


class _StderrNow(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to `sys.stderr` as it is when a record comes, not as it was at start: a live
    view (`top`, `swarm demo`) redirects it, and prints log lines above itself, where
    writing past it would leave a torn copy of the table on the screen."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: object) -> None:
        pass  # set by `StreamHandler.__init__`; always `sys.stderr` here


_STANDARD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class _WithExtras(logging.Formatter):
    """The usual line, then the record's structured extras as `key=value`: log calls
    pass facts (url, pid, domain, tag) as extras, and a line without them hides them."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        extras = {key: value for key, value in vars(record).items() if key not in _STANDARD_FIELDS}
        return line + "".join(f" {key}={value}" for key, value in extras.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ctxbus` console script; returns the exit code.

    Errors ctxbus raises on purpose become one line on stderr (with a hint where one
    helps) and exit code 1; usage errors are typer's: a message and exit code 2.
    """
    try:
        app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="ctxbus")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        from ctxbus.coordinator.cli._common import errors

        errors.print("interrupted")
        return 130
    except Exception as exc:
        from ctxbus.schemas import CtxbusError  # imported already by whatever raised one

        if not isinstance(exc, CtxbusError):
            raise
        from rich.markup import escape

        from ctxbus.coordinator.cli._common import errors

        errors.print(f"[red]ctxbus: error:[/] {escape(str(exc))}", soft_wrap=True)  # it may quote user text
        return 1
    return 0
