"""Every command's help text survives its rendering: nothing a user should read is eaten."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.cli._app import _register_commands

_WORD = re.compile(r"[A-Za-z0-9]+")
"""What must reach the screen: markdown may restyle punctuation (`code`, **bold**), but
every word and number stays."""


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under `command` (typer's own copy of click's, hence duck-typed)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _all_commands() -> list[tuple[tuple[str, ...], Any]]:
    _register_commands()  # what `main` does before it runs the app
    return list(_commands(typer.main.get_command(app)))


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(*pc, id=" ".join(pc[0]) or "ctxbus") for pc in _all_commands()]
)
def test_every_word_of_a_commands_help_reaches_the_screen(path: tuple[str, ...], command: Any) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"}, terminal_width=100)
    assert shown.exit_code == 0, shown.output
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
    screen = _WORD.findall(shown.output)
    missing = [word for text in texts for word in _WORD.findall(text) if word not in screen]
    assert not missing, f"ctxbus {' '.join(path)} --help lost: {missing}\n{shown.output}"
