"""`ctxbus mcp` stops on SIGINT/SIGTERM/SIGHUP while its client is connected and silent.

The MCP SDK reads stdin in a worker thread; before, a signal waited for the client's
next line or hang-up, so an MCP host could not stop its server with a signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio.to_thread
import pytest

from tests._support import fresh_domain, running_coordinator

STOP_WITHIN = 10.0
"""Seconds a stopped server may take: a clean close is well under one."""


def _serve_then_signal(env: dict[str, str], signum: signal.Signals, pause: float) -> tuple[int | None, str]:
    """Start `ctxbus mcp` with a client that never writes nor hangs up, signal it `pause`
    seconds after it says it serves: its exit code (None if still running after
    STOP_WITHIN) and stderr."""
    mcp = subprocess.Popen(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "-v", "mcp", "--agent", "quiet-1"],
        stdin=subprocess.PIPE,  # held open, silent: the client is there, thinking
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert mcp.stderr is not None and mcp.stdin is not None
    try:
        for line in mcp.stderr:
            if "serving quiet-1" in line:
                break
        time.sleep(pause)
        mcp.send_signal(signum)
        try:
            code: int | None = mcp.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        mcp.stdin.close()
        mcp.kill()
        mcp.wait()
        err = mcp.stderr.read()
        for stream in (mcp.stdout, mcp.stderr):
            if stream is not None:
                stream.close()
    return code, err


@pytest.mark.parametrize(
    ("signum", "pause"),
    [(signal.SIGINT, 1.0), (signal.SIGTERM, 1.0), (signal.SIGHUP, 1.0), (signal.SIGINT, 0.0)],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGINT-as-soon-as-it-serves"],
)
async def test_a_signal_stops_the_server_without_waiting_for_the_client(
    signum: signal.Signals, pause: float, nats_url: str, tmp_path: Path
) -> None:
    domain = fresh_domain("mcp")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "CTXBUS_NATS_URL": nats_url, "CTXBUS_DOMAIN": str(domain)}
    async with running_coordinator(nats_url):  # the agent joins the task's log
        code, err = await anyio.to_thread.run_sync(_serve_then_signal, env, signum, pause)
    assert code == 0, f"exit code {code} (None: still running {STOP_WITHIN:.0f}s after {signum.name}); stderr:\n{err}"
    assert f"{signum.name}: stopping" in err and "Traceback" not in err, err
