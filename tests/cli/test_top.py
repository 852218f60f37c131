"""`ctxbus top` as a user watches it: a live table that follows the agents' heartbeats."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from ctxbus.agents.brief import PresenceBeacon
from ctxbus.bus import NatsClient
from ctxbus.coordinator.cli._common import console
from ctxbus.coordinator.cli._status_cmds import _agents_table
from ctxbus.schemas import Domain, Presence
from tests.cli._procs import Command


def _shows_row(top: Command, *cells: str) -> bool:
    """Whether a table row comes to show every one of `cells` (see `Command.read_until`)."""
    return top.read_until(lambda line: all(cell in line for cell in cells))


async def test_top_shows_an_agent_while_its_heartbeat_lives(
    nats_url: str, nats_client: NatsClient, tmp_path: Path
) -> None:
    domain = Domain.parse(f"top/s/{uuid.uuid4().hex[:8]}")
    # As in a terminal, so the table is redrawn at every refresh rather than once at the end.
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    env |= {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm"}
    agent = ("agent-7", "firm", "1,500 / 4,000", "12,345")

    def heartbeat() -> Presence:
        return Presence(agent="agent-7", band="firm", unused_tokens=1500, tail_tokens=4000, prompt_tokens=12345)

    with Command("top", "-d", str(domain), "--nats", nats_url, "--interval", "0.2", env=env) as top:
        assert await anyio.to_thread.run_sync(_shows_row, top, "no agents"), top.stderr
        async with anyio.create_task_group() as tg:
            await tg.start(PresenceBeacon(nats_client, domain, "agent-7", heartbeat, interval=0.2).run)
            shown = await anyio.to_thread.run_sync(_shows_row, top, *agent)
            tg.cancel_scope.cancel()
        assert shown, f"no row {agent} while the agent's heartbeat lived; stderr:\n{top.stderr}"
        # The agent stopped: it took its heartbeat away, and its row is gone.
        assert await anyio.to_thread.run_sync(_shows_row, top, "no agents"), top.stderr
        top.proc.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(top.finish)
    assert top.proc.returncode == 0, err  # Ctrl-C is how one leaves top
    assert "Traceback" not in err, err


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
async def test_top_stops_on_any_stop_signal_as_on_ctrl_c(nats_url: str, tmp_path: Path, stop: signal.Signals) -> None:
    """Killed by SIGTERM, top would leave the terminal's cursor hidden and a pipe empty."""
    domain = Domain.parse(f"top/s/{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    env |= {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm"}
    with Command("top", "-d", str(domain), "--nats", nats_url, "--interval", "0.2", env=env) as top:
        assert await anyio.to_thread.run_sync(_shows_row, top, "no agents"), top.stderr
        top.proc.send_signal(stop)
        _, err = await anyio.to_thread.run_sync(top.finish)
    assert top.proc.returncode == 0, err  # not killed by it: the live view was closed, its cursor shown
    assert "Traceback" not in err, err


def test_a_narrow_screen_folds_a_long_agent_name_rather_than_cutting_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 60)
    name = "claude-code-agent-number-2"
    seen = Presence(agent=name, band="firm", unused_tokens=150_000, tail_tokens=400_000, prompt_tokens=123_456)
    with console.capture() as capture:
        console.print(_agents_table(Domain.parse("top/s/narrow"), [seen]))
    rows = [line.split("│")[0].strip() for line in capture.get().splitlines() if "│" in line]
    assert "".join(rows) == name


async def test_top_into_a_pipe_prints_a_table_per_refresh_as_it_goes(nats_url: str, tmp_path: Path) -> None:
    """A live view into a pipe shows only its last frame, once it ends: `| tee` saw nothing."""
    domain = Domain.parse(f"top/s/{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path)}
    with Command("top", "-d", str(domain), "--nats", nats_url, "--interval", "0.2", env=env) as top:
        for _ in range(3):  # three tables while it runs
            assert await anyio.to_thread.run_sync(_shows_row, top, f"agents on {domain}"), top.stderr
        top.proc.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(top.finish)
    assert top.proc.returncode == 0, err


_BEATING = """
import sys
import anyio
from ctxbus.agents.brief import PresenceBeacon
from ctxbus.bus import BusConfig, connect, run_async
from ctxbus.schemas import Domain, Presence

async def main() -> None:
    client = await connect(BusConfig(servers=[sys.argv[1]]))
    seen = Presence(agent="frozen-1", band="gentle", unused_tokens=10, tail_tokens=20, prompt_tokens=30)
    async with anyio.create_task_group() as tg:
        await tg.start(PresenceBeacon(client, Domain.parse(sys.argv[2]), "frozen-1", lambda: seen, interval=0.2).run)
        print("beating", flush=True)

run_async(main)
"""


async def test_top_shows_a_frozen_agent_as_stale_with_its_age_and_live_again_once_it_wakes(
    nats_url: str, tmp_path: Path
) -> None:
    """An agent process that stops beating (SIGSTOP: frozen, stuck, or a long pause) stays
    in the table, marked stale, rather than vanishing as a stopped one does."""
    domain = Domain.parse(f"top/s/{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    agent = await anyio.open_process([sys.executable, "-c", _BEATING, nats_url, str(domain)], env=env)
    try:
        assert agent.stdout is not None
        with anyio.fail_after(60):
            assert b"beating" in await agent.stdout.receive()
        with Command("top", "-d", str(domain), "--nats", nats_url, "--interval", "0.2", env=env) as top:
            assert await anyio.to_thread.run_sync(_shows_row, top, "frozen-1", "live"), top.stderr
            agent.send_signal(signal.SIGSTOP)
            assert await anyio.to_thread.run_sync(_shows_row, top, "frozen-1", "stale"), top.stderr
            agent.send_signal(signal.SIGCONT)
            assert await anyio.to_thread.run_sync(_shows_row, top, "frozen-1", "live"), top.stderr
            top.proc.send_signal(signal.SIGINT)
            await anyio.to_thread.run_sync(top.finish)
    finally:
        agent.send_signal(signal.SIGCONT)
        agent.kill()
        await agent.aclose()
