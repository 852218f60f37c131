"""`ctxbus auth` and the commands on a server with auth: `up --auth`, `--credentials`,
principals added while it runs, and the demo with every role enforced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli._procs import Command


def _ctxbus(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    env.pop("CTXBUS_CREDENTIALS", None)
    return env


def test_a_tenant_and_its_agents_on_an_up_with_auth(tmp_path: Path) -> None:
    env = _env(tmp_path)
    auth = tmp_path / "auth"
    for args in (("init",), ("add-tenant", "acme"), ("add-agent", "acme", "a1")):
        done = _ctxbus("auth", *args, "--dir", str(auth), env=env)
        assert done.returncode == 0, done.stderr
    shown = json.loads(_ctxbus("auth", "show", "--dir", str(auth), "--json", env=env).stdout)
    assert {name: p["role"] for name, p in shown["acme"].items()} == {"coordinator": "coordinator", "a1": "agent"}
    a1 = shown["acme"]["a1"]["credentials"]

    with Command("up", "--port", "0", "--auth", str(auth), env=env) as up:
        url = up.readline().strip().removeprefix("NATS ready at ")
        assert url.startswith("nats://"), up.stderr
        assert up.read_until(lambda line: "coordinator coord-" in line and "-acme serving" in line), up.stderr
        on = {**env, "CTXBUS_NATS_URL": url, "CTXBUS_DOMAIN": "acme/s1/t1"}

        proposed = _ctxbus("--credentials", a1, "brief", "propose", "add_note", "hi", "-a", "a1", "--json", env=on)
        assert proposed.returncode == 0, proposed.stderr
        assert json.loads(proposed.stdout)["status"] == "committed"
        # Another tenant's domain: said at once, not an empty brief or a wait for nobody.
        for command in (("brief", "show"), ("brief", "propose", "add_note", "hi", "-a", "a1")):
            elsewhere = _ctxbus("--credentials", a1, *command, "-d", "bob/s1/t1", env=on)
            assert elsewhere.returncode == 2, elsewhere.stdout
            assert "bob/s1/t1 belongs to 'bob'" in elsewhere.stderr and "tenant 'acme'" in elsewhere.stderr

        anonymous = _ctxbus("brief", "show", env=on)
        assert anonymous.returncode == 1
        assert "refused the connection without credentials" in anonymous.stderr
        assert "--credentials FILE" in anonymous.stderr and "Traceback" not in anonymous.stderr

        # Added while `up` runs: admitted within seconds, without a restart.
        added = _ctxbus("auth", "add-agent", "acme", "a2", "--dir", str(auth), env=env)
        assert added.returncode == 0, added.stderr
        a2 = str(auth / "credentials" / "acme" / "a2.json")
        deadline = time.monotonic() + 30
        while (shown_by_a2 := _ctxbus("brief", "show", "--json", env={**on, "CTXBUS_CREDENTIALS": a2})).returncode:
            assert time.monotonic() < deadline, shown_by_a2.stderr
            time.sleep(0.5)
        assert json.loads(shown_by_a2.stdout)["brief"]["revision"] == 1
        up.proc.send_signal(signal.SIGINT)
        _, err = up.finish()
        assert up.proc.returncode == 0, err
        assert "auth is off" not in err
        assert up.orphans() == []


def test_a_server_reachable_from_elsewhere_needs_auth(tmp_path: Path) -> None:
    refused = _ctxbus("nats", "--host", "0.0.0.0", "--port", "0", env=_env(tmp_path))
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without --auth" in refused.stderr


@pytest.mark.timeout(240)
def test_the_demo_holds_every_invariant_with_every_role_enforced(tmp_path: Path) -> None:
    env = {**_env(tmp_path), "TMPDIR": str(tmp_path)}
    with Command("swarm", "demo", "--auth", "--agents", "2", "--steps", "40", "--json", env=env) as demo:
        out, err = demo.finish(200)
    assert demo.proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    report = json.loads(out)
    assert report["ok"] and report["errors_logged"] == []
    assert {a["hash"] for a in report["agents"]} == {report["log_hash"]}
