"""What users and the bus wrote is printed as written: a `[` in it is text, never Rich markup.

Brief items, rejection reasons, coordinator ids and errors come from people and other
processes. Read as markup, `[/]` crashed `ctxbus log` for good (the entry stays in the
log) and `[red]x[/red]` was shown as `x`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread

from ctxbus.bus import BusConfig, connect
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from tests._support import fresh_domain
from tests.cli._procs import READ_TIMEOUT, Command

CLOSE_TAG = "close tag [/] here"
STYLED = "[red]evil[/red]"
REASON = "no [b]redis[/b] in prod"


def _ctxbus(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


async def test_brief_text_log_rejections_and_status_print_brackets_as_written(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain("markup")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "400"}
    env |= {"CTXBUS_NATS_URL": nats_url, "CTXBUS_DOMAIN": str(domain)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _ctxbus(*args, env=env)

    client = await connect(BusConfig(servers=[nats_url]))
    try:
        coordinator = Coordinator(client, CoordinatorConfig(coordinator_id="coord [/] one"))
        async with anyio.create_task_group() as tg:
            await tg.start(coordinator.run)
            for args in (("add_note", CLOSE_TAG), ("reject", "opt[/]x", "--reason", REASON), ("add_decision", STYLED)):
                done = await anyio.to_thread.run_sync(lambda a=args: run("brief", "propose", *a))
                assert done.returncode == 0, done.stdout + done.stderr

            refused = await anyio.to_thread.run_sync(lambda: run("brief", "propose", "add_decision", "opt[/]x"))
            assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
            assert f"rejected (rejected_option): option 'opt[/]x' was rejected at rev 2 by cli: {REASON}" in (
                refused.stdout
            )
            again = await anyio.to_thread.run_sync(lambda: run("brief", "propose", "add_decision", STYLED))
            assert again.returncode == 1, again.stderr
            assert f"option '{STYLED}' is already decision d3" in again.stdout

            table = await anyio.to_thread.run_sync(lambda: run("log"))
            assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
            for text in (CLOSE_TAG, "opt[/]x", REASON, STYLED):
                assert text in table.stdout, table.stdout

            followed = await anyio.to_thread.run_sync(_follow, env)
            for text in (CLOSE_TAG, "opt[/]x", REASON, STYLED):
                assert text in followed, followed

            coordinator.metrics.error(f"{domain}: boom [/] at [bold]x")
            status = await anyio.to_thread.run_sync(lambda: run("status"))
            assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
            [line] = [line for line in status.stdout.splitlines() if "coord [/] one" in line]
            assert line.startswith("coordinator coord [/] one serving: up ")
            [error] = [line for line in status.stdout.splitlines() if "last error" in line]
            assert error.endswith(f"s ago): {domain}: boom [/] at [bold]x"), error
            tg.cancel_scope.cancel()
    finally:
        await client.close()


def _follow(env: dict[str, str]) -> str:
    """`ctxbus log -f` until it has shown the three commits, then Ctrl-C: what it printed."""
    with Command("log", "-f", env=env) as follow:
        shown: list[str] = []
        deadline = time.monotonic() + READ_TIMEOUT
        while sum(line.startswith(("1 ", "2 ", "3 ")) for line in shown) < 3 and time.monotonic() < deadline:
            line = follow.readline()
            if not line:
                break
            shown.append(line)
        follow.proc.send_signal(signal.SIGINT)
        _, err = follow.finish()
    assert "Traceback" not in err, err
    return "".join(shown)


def test_an_error_quoting_a_bracket_prints_it_as_written(tmp_path: Path) -> None:
    store = tmp_path / "d[" / "]y.db"  # .../d[/]y.db: a closing tag, read as markup
    store.parent.mkdir()
    store.write_text("not a database")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "80"}
    inspected = _ctxbus("inspect", "a1", "-d", "a/b/c", "--store", str(store), env=env)
    assert inspected.returncode == 1, inspected.stderr
    assert inspected.stderr.startswith(f"ctxbus: error: context store '{store}' is not a SQLite database"), (
        inspected.stderr
    )
    assert inspected.stderr.count("\n") == 1, "one line, the path as written"
