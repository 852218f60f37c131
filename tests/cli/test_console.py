"""Where the commands' output lands: a terminal fits it to the screen; a pipe or a file
(a CI log, `| grep`) gets whole lines and whole tables, not rich's 80 columns."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from ctxbus.coordinator.cli._common import PIPE_WIDTH, _console

LINE = "word " * 60
PRINT_LINE = f"from ctxbus.coordinator.cli._common import console; console.print({LINE!r}.strip())"


def _environ_without_columns() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}


def test_output_to_a_pipe_keeps_each_line_whole() -> None:
    printed = subprocess.run(
        [sys.executable, "-c", PRINT_LINE], capture_output=True, text=True, env=_environ_without_columns(), check=True
    )
    assert printed.stdout == LINE.strip() + "\n"


def test_output_to_a_terminal_is_fitted_to_its_width() -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        subprocess.run(
            [sys.executable, "-c", PRINT_LINE],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env={**_environ_without_columns(), "TERM": "dumb"},
            check=True,
            timeout=30,
        )
        os.close(follower)
        shown = b""
        while chunk := _read(leader):
            shown += chunk
    finally:
        os.close(leader)
    lines = shown.decode().replace("\r", "").splitlines()
    assert len(lines) == 4 and all(len(line) <= 80 for line in lines), lines
    assert " ".join(lines).split() == LINE.split()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal's other end is closed: all was read
        return b""


def test_a_pipe_gets_tables_their_room_and_columns_still_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal, even under `pytest -s`
    piped = _console()
    assert (piped.width, piped.soft_wrap) == (PIPE_WIDTH, True)
    monkeypatch.setenv("COLUMNS", "100")
    assert _console().width == 100
