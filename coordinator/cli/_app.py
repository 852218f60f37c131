"""The `ctxbus` application object and its entry point."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Annotated, TextIO

import typer
from rich.markup import escape

from coordinator.cli._common import errors
from schemas import CtxbusError

__all__ = ["app", "main"]

app = typer.Typer(
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
        typer.echo(f"ctxbus {version('ctxbus')}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-vv: debug).")] = 0,
    _version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    handler = _StderrNow()
    handler.setFormatter(_WithExtras("%(asctime)s %(levelname)s %(name)s: %(message)s"))
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
        _register_commands()
        app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="ctxbus")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except CtxbusError as exc:
        errors.print(f"[red]ctxbus: error:[/] {escape(str(exc))}", soft_wrap=True)  # it may quote user text
        return 1
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130
    return 0


def _register_commands() -> None:
    """Import the command modules; each adds its commands to `app` when imported."""
    from coordinator.cli import (  # noqa: F401
        _brief_cmds,
        _context_cmds,
        _mcp_cmds,
        _serve_cmds,
        _status_cmds,
        _swarm_cmds,
    )
