"""Bad arguments a first-time user tries: one clear line and exit code 2, before connecting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxbus.schemas import KEY_MAX
from tests.cli._procs import Command

UNREACHABLE = "nats://127.0.0.1:9"
"""Nothing listens there: a command that got past its checks would fail to connect (exit 1)."""


def _usage_error(*args: str, tmp_path: Path) -> str:
    """Run the command; assert it is refused as a usage error; the stderr line saying why."""
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}  # wide enough for the line
    with Command(*args, "--nats", UNREACHABLE, env=env) as cli:
        out, err = cli.finish()
    assert cli.proc.returncode == 2, err
    assert out == "" and "Traceback" not in err and "could not connect" not in err, err
    [line] = [line for line in err.splitlines() if "Invalid value" in line]
    return line


@pytest.mark.parametrize(("key", "length"), [("k" * (KEY_MAX + 1), KEY_MAX + 1), ("", 0)], ids=["too-long", "empty"])
def test_a_key_the_schema_refuses_is_refused_by_the_option(key: str, length: int, tmp_path: Path) -> None:
    line = _usage_error("brief", "propose", "add_note", "x", "-d", "a/b/c", "--key", key, tmp_path=tmp_path)
    assert f"Invalid value for '--key': must be 1 to {KEY_MAX} characters long, got {length}" in line


def test_a_non_ascii_letter_in_a_domain_is_explained(tmp_path: Path) -> None:
    line = _usage_error("brief", "show", "-d", "alice/sé/t1", tmp_path=tmp_path)
    assert "session 'sé' contains 'é'; only ASCII letters, digits, '_' and '-' are allowed" in line


@pytest.mark.parametrize("url", ["", "  "])
def test_no_nats_url_is_a_usage_error_that_says_how_to_get_one(url: str, tmp_path: Path) -> None:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}
    with Command("brief", "show", "-d", "a/b/c", "--nats", url, env=env) as cli:
        _, err = cli.finish()
    assert cli.proc.returncode == 2, err
    assert "Invalid value for --nats: no server URL given; start one with `ctxbus up`" in err, err
