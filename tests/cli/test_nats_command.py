"""`ctxbus nats` as a user runs it: a real subprocess, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bus import BusConfig, EmbeddedServer, TxLog, connect


def _ctxbus(*args: str, env_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(env_dir), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_version_and_help(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("ctxbus ")
    helped = subprocess.run([sys.executable, "-m", "coordinator.cli", "nats", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "sync_interval:" in helped.stdout


async def test_nats_runs_in_the_foreground_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = _ctxbus("nats", "--port", "0", env_dir=tmp_path)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip().removeprefix("NATS ready at ")
    data_dir = proc.stdout.readline().strip().removeprefix("data dir: ")
    assert url.startswith("nats://127.0.0.1:")
    assert Path(data_dir) == tmp_path / "nats"
    client = await connect(BusConfig(servers=[url]))
    log = TxLog(client)
    await log.ensure()
    await log.append("ctx.u.s.t.tx", b"kept", "m1")
    await client.close()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "data kept" in out
    # The store outlives the process: the next start has the entry.
    with EmbeddedServer(data_dir) as again:
        client = await connect(BusConfig(servers=[again.url]))
        assert await TxLog(client).last_seq("ctx.u.s.t.tx") == 1
        await client.close()


def test_port_in_use_is_one_line_with_a_hint(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    proc = _ctxbus("nats", "--port", str(nats_server.port), env_dir=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
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
    ],
)
def test_bad_arguments_exit_2_with_a_reason(args: list[str], says: str, tmp_path: Path) -> None:
    proc = _ctxbus(*args, env_dir=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert says in err


def test_unreachable_server_is_one_line_with_a_hint(tmp_path: Path) -> None:
    proc = _ctxbus("brief", "show", "-d", "a/b/c", "--nats", "nats://127.0.0.1:9", env_dir=tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxbus: error: could not connect to nats://127.0.0.1:9")
    assert "`ctxbus up` starts a local one" in lines[0]


def _children(pid: int) -> list[int]:
    """Pids of the processes whose parent is `pid` (Linux: read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("command", ["nats", "up"])
def test_a_dead_embedded_server_is_one_line(command: str, tmp_path: Path) -> None:
    proc = _ctxbus(command, "--port", "0", env_dir=tmp_path)
    assert proc.stdout is not None
    while "press Ctrl-C to stop" not in (line := proc.stdout.readline()):
        assert line, "the command ended before it was ready"
    (server_pid,) = _children(proc.pid)
    os.kill(server_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert lines[-1].startswith("ctxbus: error: nats-server exited unexpectedly; see "), err
    assert "Traceback" not in err and "ExceptionGroup" not in err
