"""`ctxbus brief propose` refuses what no coordinator could take, before it connects."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cli._procs import Command

UNREACHABLE = "nats://127.0.0.1:9"
"""Nothing listens there: a proposal that got past the checks would fail to connect (exit 1)."""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["rewrite_history", "x"],
            r"Invalid value for OP: unknown operation 'rewrite_history'; use one of set_goal, .*, add_note, close",
        ),
        (["add_note", ""], r"Invalid value for OP/VALUE/options: .*text.*at least 1 character"),
        (["complete", "p1", "--outcome", "o" * 2001], r"Invalid value for OP/VALUE/options: .*outcome.*2,?000"),
        (
            ["add_note", "x", "--reason", "why"],
            r"Invalid value for --reason: add_note takes no --reason \(only reject, reopen, remove_constraint, close take it\)",
        ),
    ],
    ids=["unknown-op", "empty-text", "long-outcome", "field-of-another-op"],
)
def test_a_bad_proposal_is_one_clear_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}  # wide enough for the line
    with Command("brief", "propose", *args, "-d", "alice/s1/t1", "--nats", UNREACHABLE, env=env) as cli:
        out, err = cli.finish()
    assert cli.proc.returncode == 2, err
    assert out == ""
    assert "Traceback" not in err and "could not connect" not in err, err
    [line] = [line for line in err.splitlines() if "Invalid value" in line]
    assert re.search(says, line), err


def test_a_proposal_no_coordinator_answers_says_to_start_one_and_how_to_retry(nats_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}
    args = ("brief", "propose", "add_note", "hi", "-d", "alice/s1/nocoord", "--key", "k-7", "--nats", nats_url)
    with Command(*args, env=env) as cli:
        _, err = cli.finish(timeout=60)
    assert cli.proc.returncode == 1, err
    assert "no coordinator answered proposal k-7 within 10s (is one running? `ctxbus up`" in err, err
    assert "run the same command with --key k-7 to find out without committing it twice" in err, err
