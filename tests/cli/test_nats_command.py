"""`ctxbus nats` as a user runs it: a real subprocess, real signals."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio.to_thread
import pytest
from nats.aio.msg import Msg

from ctxbus.bus import BusConfig, EmbeddedServer, TxLog, connect
from ctxbus.bus.testing import ServerFactory
from ctxbus.coordinator import STATUS_SUBJECT
from tests.cli._procs import READ_TIMEOUT, Command


def _env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "CTXBUS_STATE_DIR": str(state_dir), "COLUMNS": "200"}


def _ctxbus(*args: str, env_dir: Path, timeout: float = READ_TIMEOUT) -> tuple[int, str, str]:
    """Run `ctxbus *args` to its end: exit code, stdout, stderr. Past `timeout` the test
    fails, and the command is killed with whatever it started (a nats-server runs in a
    session of its own, so killing the CLI alone would leave it running)."""
    with Command(*args, env=_env(env_dir)) as cli:
        out, err = cli.finish(timeout)
    assert cli.proc.returncode is not None
    return cli.proc.returncode, out, err


def test_version_and_help(tmp_path: Path) -> None:
    code, out, _ = _ctxbus("--version", env_dir=tmp_path)
    assert code == 0 and out.startswith("ctxbus ")
    code, out, _ = _ctxbus("nats", "--help", env_dir=tmp_path)
    assert code == 0 and "sync_interval:" in out


async def test_nats_runs_in_the_foreground_and_stops_on_sigterm(tmp_path: Path) -> None:
    with Command("nats", "--port", "0", env=_env(tmp_path)) as nats:
        url = nats.readline().strip().removeprefix("NATS ready at ")
        data_dir = nats.readline().strip().removeprefix("data dir: ")
        assert url.startswith("nats://127.0.0.1:"), f"{url!r}; stderr:\n{nats.stderr}"
        assert Path(data_dir) == tmp_path / "nats"
        nats.children()  # remembered, so `orphans()` can tell whether the server outlived the CLI
        client = await connect(BusConfig(servers=[url]))
        try:
            log = TxLog(client)
            await log.ensure()
            await log.append("ctx.u.s.t.tx", b"kept", "m1")
        finally:
            await client.close()
        nats.proc.send_signal(signal.SIGTERM)
        out, err = nats.finish()
        assert nats.proc.returncode == 0, err
        assert "data kept" in out
        assert nats.orphans() == [], "nats-server outlived `ctxbus nats`"
    # The store outlives the process: the next start has the entry.
    with EmbeddedServer(data_dir) as again:
        client = await connect(BusConfig(servers=[again.url]))
        try:
            assert await TxLog(client).last_seq("ctx.u.s.t.tx") == 1
        finally:
            await client.close()


def test_port_in_use_is_one_line_with_a_hint(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    code, _, err = _ctxbus("nats", "--port", str(nats_server.port), env_dir=tmp_path)
    assert code == 1
    assert err.strip().splitlines() == [
        f"ctxbus: error: port {nats_server.port} on 127.0.0.1 is already in use "
        "(another NATS server?); pick another with --port, or --port 0 for any free one"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nats", "--port", "70000"], "Invalid value for '--port': Input should be less than or equal to 65535"),
        (["nope"], "No such command 'nope'"),
        (["nats", "--port", "x"], "Invalid value for '--port': Input should be a valid integer"),
        (["brief", "show", "-d", "a/b"], "domain 'a/b' must have the form 'user/session/task'"),
        (["status", "--nats", "http://x"], "server URL 'http://x' must start with one of nats://"),
        (["brief", "propose", "add_note", "x", "-d", "a/b/c", "-a", "x/../y"], "agent name 'x/../y' contains '/'"),
        (["inspect", "../../x", "-d", "a/b/c"], "agent name '../../x' contains '.'"),
        (["coordinator", "--replicas", "7"], "Invalid value for '--replicas'"),
    ],
)
def test_bad_arguments_exit_2_with_a_reason(args: list[str], says: str, tmp_path: Path) -> None:
    code, _, err = _ctxbus(*args, env_dir=tmp_path)
    assert code == 2
    assert says in err


def test_unreachable_server_is_one_line_with_a_hint(tmp_path: Path) -> None:
    code, _, err = _ctxbus("brief", "show", "-d", "a/b/c", "--nats", "nats://127.0.0.1:9", env_dir=tmp_path, timeout=60)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxbus: error: could not connect to nats://127.0.0.1:9")
    assert "`ctxbus up` starts a local one" in lines[0]


@pytest.mark.parametrize("command", ["nats", "up"])
def test_a_dead_embedded_server_is_one_line(command: str, tmp_path: Path) -> None:
    with Command(command, "--port", "0", env=_env(tmp_path)) as cli:
        while "press Ctrl-C to stop" not in (line := cli.readline()):
            assert line, f"the command ended before it was ready; stderr:\n{cli.stderr}"
        (server_pid,) = cli.children()
        os.kill(server_pid, signal.SIGKILL)
        _, err = cli.finish()
    assert cli.proc.returncode == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith("ctxbus: error: nats-server exited unexpectedly; see "), err
    assert "Traceback" not in err and "ExceptionGroup" not in err


async def test_status_without_a_coordinator_exits_1_whatever_else_answers(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]))
    try:

        async def stranger(msg: Msg) -> None:  # something else listening on the status subject
            await msg.respond(b"hello")

        await client.subscribe(STATUS_SUBJECT, cb=stranger)
        await client.flush()
        code, out, err = await anyio.to_thread.run_sync(
            lambda: _ctxbus("status", "--nats", server.url, env_dir=tmp_path, timeout=60)
        )
    finally:
        await client.close()
    assert code == 1, err
    assert "no coordinator is serving" in out
    assert "ignoring an answer on ctxbus.status that is not a coordinator's status: b'hello'" in err
