"""Ctrl-C while `ctxbus up` or `swarm demo` starts its nats-server stops that server.

The server runs in a session of its own, so a terminal's Ctrl-C reaches only the CLI:
if the CLI let go without stopping it, it lived on as an orphan holding the store's
lock, and the next `ctxbus up` on that store was refused.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ctxbus.bus import PidLock
from ctxbus.bus._server import STORE_LOCK_FILE
from tests.cli._procs import READ_TIMEOUT, Command

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")


def _server_of(cli: Command) -> int:
    """The pid of the nats-server the command starts, as soon as it exists."""
    deadline = time.monotonic() + READ_TIMEOUT
    while time.monotonic() < deadline:
        for pid in cli.children():  # remembered, so `orphans()` checks them later
            try:
                if b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        time.sleep(0.001)
    pytest.fail(f"no nats-server started within {READ_TIMEOUT:.0f}s; stderr:\n{cli.stderr}")


@pytest.mark.parametrize(
    ("command", "store"),
    [(["up", "--port", "0"], "."), (["swarm", "demo", "--agents", "2"], "nats")],
    ids=["up", "swarm-demo"],
)
def test_ctrl_c_during_startup_stops_the_server_and_frees_its_store(
    command: list[str], store: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    for _ in range(_ATTEMPTS):
        with Command(*command, "--data-dir", str(data), env=env) as cli:
            server = _server_of(cli)
            # Stopped, the server cannot get ready: the Ctrl-C lands while the CLI waits for it.
            os.kill(server, signal.SIGSTOP)
            try:
                cli.proc.send_signal(signal.SIGINT)
                time.sleep(0.5)
            finally:
                os.kill(server, signal.SIGCONT)
            out, err = cli.finish()
            assert cli.orphans() == [], f"nats-server outlived `ctxbus {command[0]}`; stderr:\n{err}"
        _assert_store_free(data / store)
        if "NATS ready" not in out:
            break
        # The server was ready before it was stopped (a busy machine): a plain Ctrl-C.
        assert cli.proc.returncode == 0, err
    else:
        pytest.fail(f"the server was ready before every one of {_ATTEMPTS} Ctrl-Cs")
    assert cli.proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err


def test_a_closed_terminal_stops_up_and_its_server(tmp_path: Path) -> None:
    """SIGHUP (the terminal went away) stops `ctxbus up` as Ctrl-C does."""
    data = tmp_path / "data"
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    with Command("up", "--port", "0", "--data-dir", str(data), env=env) as cli:
        assert cli.readline().startswith("NATS ready at "), cli.stderr
        assert [pid for pid in cli.children() if b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        cli.proc.send_signal(signal.SIGHUP)
        _, err = cli.finish()
        assert cli.orphans() == [], f"nats-server outlived `ctxbus up`; stderr:\n{err}"
    assert "Traceback" not in err, err
    _assert_store_free(data)


_ATTEMPTS = 5


def _assert_store_free(store: Path) -> None:
    lock = PidLock(store / STORE_LOCK_FILE)
    assert lock.acquire(), f"the store is still locked by pid {lock.holder()}"
    lock.release()
