"""`ctxbus brief propose` refuses what no coordinator could take, before it connects."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from ctxbus.bus import BusConfig, Verb, close_quietly, connect, subject
from ctxbus.bus.testing import ServerFactory
from ctxbus.schemas import Domain
from tests.cli._procs import READ_TIMEOUT, Command

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


async def _lost_first_answer(server_url: str, tmp_path: Path, *key: str) -> tuple[str, str]:
    """Propose with the only coordinator frozen (SIGSTOP) until the CLI has sent its
    proposal twice, its first attempt having timed out: thawed, the coordinator commits
    the first and answers the second as a duplicate. Returns the CLI's stdout and the
    log as `ctxbus log --json` prints it."""
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400", "CTXBUS_NATS_URL": server_url}
    domain = "alice/s1/lost"
    client = await connect(BusConfig(servers=[server_url]))
    try:
        attempts = await client.subscribe(
            subject(Domain.parse(domain), Verb.PROPOSE)
        )  # a copy of each, beside the group
        with Command("coordinator", "--id", "frozen", env=env) as coordinator:
            assert coordinator.readline().startswith("coordinator frozen serving"), coordinator.stderr
            os.kill(coordinator.proc.pid, signal.SIGSTOP)
            try:
                with Command("brief", "propose", "add_pending", "write it once", "-d", domain, *key, env=env) as cli:
                    for _ in range(2):
                        await attempts.next_msg(timeout=READ_TIMEOUT)
                    os.kill(coordinator.proc.pid, signal.SIGCONT)
                    out, err = cli.finish()
                assert cli.proc.returncode == 0, err
            finally:
                os.kill(coordinator.proc.pid, signal.SIGCONT)
            with Command("log", "-d", domain, "--json", env=env) as log:
                logged, err = log.finish()
            assert log.proc.returncode == 0, err
    finally:
        await close_quietly(client)
    return out, logged


async def test_a_lost_answer_found_committed_by_the_clis_own_retry_is_not_called_the_users(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    out, logged = await _lost_first_answer(nats_server_factory().url, tmp_path)
    assert out.strip() == (
        "committed at revision 1 (its first answer was lost on the way: asked again, "
        "the coordinator said it had committed it, once)"
    )
    assert [json.loads(line)["revision"] for line in logged.splitlines()] == [1], "committed once"


async def test_a_retry_under_the_users_key_is_called_theirs(nats_server_factory: ServerFactory, tmp_path: Path) -> None:
    out, _ = await _lost_first_answer(nats_server_factory().url, tmp_path, "--key", "k-1")
    assert out.strip() == (
        "committed at revision 1, earlier, under key 'k-1': your retry changed nothing "
        "(a different change needs a new --key)"
    )
