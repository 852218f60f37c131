"""Every command's help text survives its rendering: nothing a user should read is eaten;
and the root's help, drawn without loading the commands, is the one they would draw."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from ctxbus.coordinator import cli
from ctxbus.coordinator.cli import app
from ctxbus.coordinator.cli._app import COMMANDS, load_command

_WORD = re.compile(r"[A-Za-z0-9]+")
"""What must reach the screen: markdown may restyle punctuation (`code`, **bold**), but
every word and number stays."""


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """`command` and every command under it (typer's own copy of click's, hence duck-typed)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _all_commands() -> list[tuple[tuple[str, ...], Any]]:
    found: list[tuple[tuple[str, ...], Any]] = [((), typer.main.get_command(app))]
    for name in COMMANDS:
        found.extend(_commands(load_command(name), (name,)))
    return found


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(*pc, id=" ".join(pc[0]) or "ctxbus") for pc in _all_commands()]
)
def test_every_word_of_a_commands_help_reaches_the_screen(path: tuple[str, ...], command: Any) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"}, terminal_width=100)
    assert shown.exit_code == 0, shown.output
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
    if not path:  # the root lists every command with its summary
        texts += [f"{name} {listed.summary}" for name, listed in COMMANDS.items()]
    screen = _WORD.findall(shown.output)
    missing = [word for text in texts for word in _WORD.findall(text) if word not in screen]
    assert not missing, f"ctxbus {' '.join(path)} --help lost: {missing}\n{shown.output}"


def _root_help(*, load_every_command: bool) -> str:
    load = "from ctxbus.coordinator.cli._app import COMMANDS, load_command; [load_command(n) for n in COMMANDS]; "
    code = f"{load if load_every_command else ''}from ctxbus.coordinator.cli import main; main(['--help'])"
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout


def test_the_root_help_lists_each_command_as_the_command_itself_would() -> None:
    """`COMMANDS` holds each command's panel and summary so that `ctxbus --help` need not
    import them: what it shows must be what the loaded commands show."""
    lazy = _root_help(load_every_command=False)
    assert all(name in lazy for name in COMMANDS)
    assert lazy == _root_help(load_every_command=True)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []], ids=["--version", "--help", "no arguments"])
def test_the_root_imports_no_command(argv: list[str]) -> None:
    """What makes `ctxbus --version` and `--help` quick (`bench/cli.py` times them): none
    of the heavy modules is imported."""
    heavy = [
        "nats",
        "pydantic",
        "tiktoken",
        "mcp",
        "anyio",
        "ctxbus.schemas",
        "ctxbus.bus",
        "ctxbus.agents",
        "ctxbus.coordinator._service",
    ]
    code = (
        "import sys; from ctxbus.coordinator.cli import main; main(sys.argv[1:]); "
        f"print(*[m for m in {heavy!r} if m in sys.modules])"
    )
    shown = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    assert shown.stdout.splitlines()[-1] == ""


def test_every_command_a_module_defines_is_listed() -> None:
    """A command missing from `COMMANDS` could never run: the root only loads what it lists."""
    defined: dict[str, str] = {}
    for module in pkgutil.iter_modules(cli.__path__):
        if module.name.endswith("_cmds"):
            commands = importlib.import_module(f"ctxbus.coordinator.cli.{module.name}").commands
            defined.update((name, module.name) for name in typer.main.get_group(commands).commands)
    assert defined == {name: listed.module for name, listed in COMMANDS.items()}
