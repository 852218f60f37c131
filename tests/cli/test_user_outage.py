"""Commands that run until Ctrl-C ride out a NATS outage instead of ending in a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread

from ctxbus.agents.brief import PresenceBeacon
from ctxbus.bus import BusConfig, EmbeddedServer, close_quietly, connect
from ctxbus.schemas import Presence
from tests._support import fresh_domain
from tests.cli._procs import READ_TIMEOUT, Command

DISCONNECTED = "disconnected from NATS, reconnecting (Ctrl-C to stop); rows as last read"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    # As in a terminal, so the view is redrawn at every refresh rather than once at the end.
    return env | {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm"}


async def test_top_says_it_is_disconnected_and_recovers_when_the_server_is_back(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    domain = fresh_domain("top")
    args = ("top", "-d", str(domain), "--nats", server.url, "--interval", "0.2")
    with Command(*args, env=_env(tmp_path)) as top:
        assert await anyio.to_thread.run_sync(top.read_until, lambda line: "no agents" in line), top.stderr
        await anyio.to_thread.run_sync(server.kill)
        said = await anyio.to_thread.run_sync(top.read_until, lambda line: DISCONNECTED in line)
        assert said, f"no line saying it is disconnected; stderr:\n{top.stderr}"
        assert top.proc.poll() is None, top.stderr

        await anyio.to_thread.run_sync(server.start)
        client = await connect(BusConfig(servers=[server.url]))
        try:

            def heartbeat() -> Presence:
                return Presence(agent="back-1", band="quiet", unused_tokens=1, tail_tokens=2, prompt_tokens=3)

            async with anyio.create_task_group() as tg:
                await tg.start(PresenceBeacon(client, domain, "back-1", heartbeat, interval=0.2).run)
                back = await anyio.to_thread.run_sync(top.read_until, lambda line: "back-1" in line)
                tg.cancel_scope.cancel()
        finally:
            await close_quietly(client)
        assert back, f"no row once the server was back; stderr:\n{top.stderr}"
        top.proc.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(top.finish)
    assert top.proc.returncode in (0, 130), err
    assert "Traceback" not in err, err


def test_log_follow_stopped_during_an_outage_ends_without_a_traceback(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    domain = fresh_domain("follow")
    env = _env(tmp_path) | {"CTXBUS_NATS_URL": server.url}
    # A coordinator creates the log and commits one note, which shows that `log -f` is
    # following; then the coordinator stops and the server goes away.
    with contextlib.ExitStack() as stack:  # both processes are killed, even if an assert fails
        coordinator = stack.enter_context(Command("coordinator", env=env))
        assert "serving" in coordinator.readline(), coordinator.stderr
        follow = stack.enter_context(Command("log", "-f", "-d", str(domain), env=env))
        with Command("brief", "propose", "add_note", "following now", "-d", str(domain), env=env) as propose:
            propose.finish()
        while "following now" not in (line := follow.readline()):
            assert line, follow.stderr  # '' is the end of its output
        coordinator.proc.send_signal(signal.SIGINT)
        coordinator.finish()
        server.kill()
        time.sleep(4.5)  # reconnecting, past the 3 s after which it asks the log for news
        assert follow.proc.poll() is None, follow.stderr
        follow.proc.send_signal(signal.SIGINT)
        _, err = follow.finish()
    assert follow.proc.returncode == 0, err  # Ctrl-C is how `log -f` ends, as `up` and `coordinator`
    assert "Traceback" not in err, err


def test_mcp_stopped_while_disconnected_ends_without_a_traceback(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    domain = fresh_domain("mcp")
    env = _env(tmp_path) | {"CTXBUS_NATS_URL": server.url, "CTXBUS_DOMAIN": str(domain)}
    with Command("coordinator", env=env) as coordinator:  # creates the log the agent joins
        assert "serving" in coordinator.readline(), coordinator.stderr
        coordinator.proc.send_signal(signal.SIGINT)
        coordinator.finish()
    mcp = subprocess.Popen(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "-v", "mcp", "--agent", "m1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert mcp.stderr is not None and mcp.stdin is not None
        for line in mcp.stderr:  # -v: INFO lines, up to the one that says it serves
            if "serving m1" in line:
                break
        server.kill()
        for line in mcp.stderr:  # disconnected, until a heartbeat could not be sent
            if "heartbeat" in line and "skipped" in line:
                break
        time.sleep(2.5)  # and the next one is buffered, to be sent on reconnect (or on close)
        mcp.stdin.close()  # the MCP client hangs up
        err = mcp.stderr.read()
        assert mcp.wait(READ_TIMEOUT) == 0, err
    finally:
        mcp.kill()
        mcp.wait()
        for stream in (mcp.stdout, mcp.stderr):
            if stream is not None:
                stream.close()
    assert "Traceback" not in err, err


def test_log_follow_on_a_server_without_a_log_says_so_in_one_line(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    env = _env(tmp_path) | {"CTXBUS_NATS_URL": server.url}
    with Command("log", "-f", "-d", str(fresh_domain("nolog")), env=env) as follow:
        _, err = follow.finish()
    assert follow.proc.returncode == 1, err
    assert "no ctxbus log on this server yet" in err and "Traceback" not in err, err
