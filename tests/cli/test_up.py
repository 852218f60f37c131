"""`ctxbus up` end to end: NATS + coordinator in one process, driven by other commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxbus.bus import uses_uvloop
from tests.cli._procs import Command


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.fixture
def up(tmp_path: Path) -> Iterator[dict[str, str]]:
    """`ctxbus up --port 0` running; yields the environment pointing commands at it.

    Stopped with SIGINT as a user would; if anything fails, it and its nats-server are killed.
    """
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    with Command("up", "--port", "0", env=env) as cli:
        url = cli.readline().strip().removeprefix("NATS ready at ")
        assert url.startswith("nats://"), f"{url!r}; stderr:\n{cli.stderr}"
        cli.readline()  # data dir
        coordinator_line = cli.readline()
        loop = "uvloop" if uses_uvloop() else "asyncio"
        assert f"(event loop: {loop})" in coordinator_line, coordinator_line
        cli.readline()  # hint
        assert len(cli.children()) == 1, "`ctxbus up` runs one nats-server"
        yield {**env, "CTXBUS_NATS_URL": url, "CTXBUS_DOMAIN": "alice/s1/t1"}
        cli.proc.send_signal(signal.SIGINT)
        out, err = cli.finish()
        assert cli.proc.returncode == 0, err
        assert "data kept" in out
        assert "auth is off: NATS listens on 127.0.0.1 only and admits anyone who connects there" in err
        assert cli.orphans() == [], "nats-server outlived `ctxbus up`"


def test_two_agents_propose_and_every_reader_agrees(up: dict[str, str]) -> None:
    first = _run("brief", "propose", "set_goal", "ship the cache", "--agent", "alice", "--json", env=up)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"status": "committed", "revision": 1, "duplicate": False}
    assert (
        _run("brief", "propose", "reject", "redis lock", "--reason", "no redis in prod", "-a", "bob", env=up).returncode
        == 0
    )
    refused = _run("brief", "propose", "add_decision", "Redis lock", "-a", "carol", env=up)
    assert refused.returncode == 1
    assert "rejected at rev 2 by bob: no redis in prod" in refused.stdout

    shown = json.loads(_run("brief", "show", "--json", env=up).stdout)
    assert shown["brief"]["revision"] == 2
    assert shown["brief"]["goal"]["text"] == "ship the cache"
    assert [r["option"] for r in shown["brief"]["rejected"]] == ["redis lock"]

    log = [json.loads(line) for line in _run("log", "--json", env=up).stdout.splitlines()]
    assert [entry["author"] for entry in log] == ["alice", "bob"]

    status = json.loads(_run("status", "--json", env=up).stdout)
    (coordinator,) = status["coordinators"]
    assert coordinator["commits"] == 2
    assert coordinator["domains"] == ["alice/s1/t1"]
    assert "agents on alice/s1/t1" in _run("status", env=up).stdout, "the domain comes from CTXBUS_DOMAIN"
