"""Every command's help text survives rich's markup: nothing a user should read is eaten."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from rich.errors import StyleSyntaxError
from rich.style import Style

from coordinator.cli import app
from coordinator.cli._app import _register_commands

_RICH_TAG = re.compile(r"(?<!\\)\[([a-z#/@][^\[]*?)\]")
"""What rich takes for a markup tag and drops from the output (rich's own pattern)."""


def _eats_text(help_text: str | None) -> bool:
    """Whether rich would drop a bracketed part of `help_text` that is not a style."""
    for tag in _RICH_TAG.findall(help_text or ""):
        if tag.startswith("/"):
            continue  # closes a style
        try:
            Style.parse(tag)
        except StyleSyntaxError:
            return True
    return False


def _commands(command: Any, path: str = "ctxbus") -> Iterator[tuple[str, Any]]:
    """Every command under `command` (typer's own copy of click's, hence duck-typed)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_no_help_text_reads_as_rich_markup() -> None:
    _register_commands()  # what `main` does before it runs the app
    eaten = [
        f"{path} {param.name}: {param.help!r}"
        for path, command in _commands(typer.main.get_command(app))
        for param in command.params
        if _eats_text(getattr(param, "help", None))
    ]
    eaten += [
        f"{path}: {command.help!r}"
        for path, command in _commands(typer.main.get_command(app))
        if _eats_text(command.help)
    ]
    assert not eaten, "write \\[ for a literal bracket:\n" + "\n".join(eaten)
