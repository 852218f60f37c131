"""`ctxbus hook`: Claude Code hooks (`claude-code`) and their settings (`install`).

`ctxbus hook claude-code` is run by Claude Code, once per event: stdout carries only
the answer (JSON), logs go to STATE_DIR/hooks/claude-code.log, and it always exits 0.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import agent_store, console, default_state_dir

if TYPE_CHECKING:
    from ctxbus.bus import BusConfig

__all__ = ["commands"]

commands = command_set()

hook_app = typer.Typer(
    help="Keep Claude Code's model on the task: hooks that put the user's rules and the brief back in its context.",
    no_args_is_help=True,
)
commands.add_typer(hook_app, name="hook")

log = logging.getLogger("ctxbus.coordinator.cli.hook")

_WINDOW = 200_000
"""Claude's window: what the nudges are scaled for unless told otherwise."""


@hook_app.command("claude-code")
def claude_code(
    window: Annotated[
        str,
        typer.Option(
            "--window",
            envvar="CTXBUS_HOOK_WINDOW",
            metavar="TOKENS",
            help="The host model's context window, which the nudges are scaled for (at least 8192).",
        ),
    ] = str(_WINDOW),
) -> None:
    """Answer one Claude Code hook event: JSON on stdin, JSON on stdout.

    The agent is `CTXBUS_DOMAIN` / `CTXBUS_AGENT` when set, else derived from the
    project directory and the host's session id; the brief is read from
    `CTXBUS_NATS_URL` when set. Errors are logged and answered with `{}`.
    """
    from ctxbus.agents.hooks import run_claude_code

    _log_to_file(default_state_dir() / "hooks" / "claude-code.log")
    tokens = _WINDOW
    try:
        tokens = max(int(window), 8_192)
    except ValueError:  # a usage error would exit 2, which Claude Code reads as "block"
        log.warning("--window %r is not a whole number; using %d", window, _WINDOW)
    answer = run_claude_code(sys.stdin.buffer.read(), env=os.environ, store_of=agent_store, bus=_bus, window=tokens)
    sys.stdout.write(answer + "\n")
    sys.stdout.flush()


@hook_app.command("install")
def install(
    project: Annotated[
        Path,
        typer.Option("--project", file_okay=False, help="The project whose .claude/settings.json gets the hooks."),
    ] = Path("."),
) -> None:
    """Add the ctxbus hooks to a project's .claude/settings.json (merged, idempotent)."""
    from ctxbus.agents.hooks import HOOK_EVENTS, install_hooks

    path, changed = install_hooks(project.resolve(), _command())
    if changed:
        console.print(f"hooks for {', '.join(changed)} written to {path}")
    else:
        console.print(f"{path} has the ctxbus hooks already ({', '.join(HOOK_EVENTS)})")


def _command() -> str:
    """The command Claude Code runs: this installation's `ctxbus`, by its full path
    where it has one (Claude Code's PATH may not hold the virtualenv)."""
    script = Path(sys.executable).parent / "ctxbus"
    program = str(script) if script.is_file() else "ctxbus"
    return f"{shlex.quote(program)} hook claude-code"


def _bus() -> BusConfig | None:
    """The NATS settings when `CTXBUS_NATS_URL` is set, else None (no brief)."""
    urls = os.environ.get("CTXBUS_NATS_URL", "").strip()
    if not urls:
        return None
    from ctxbus.coordinator.cli._common import bus_config

    try:
        return bus_config(urls, name="ctxbus-hook")
    except Exception as exc:  # a bad URL or credentials file: no brief, never a failed hook
        log.warning("CTXBUS_NATS_URL not used: %s", exc)
        return None


def _log_to_file(path: Path) -> None:
    """Every log line to `path`, none to stderr or stdout (the host reads them)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
