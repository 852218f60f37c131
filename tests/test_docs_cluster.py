"""The three-machine cluster of docs/operations.md, run as written on loopback: its
nats-server config (addresses, ports and store moved onto this machine), its checks,
its coordinator command, and a proposal that commits with one server stopped."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbus.bus import find_nats_server, free_port
from tests.cli._procs import READ_TIMEOUT, Command

REPO = Path(__file__).resolve().parents[1]
HOSTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")


def _documented_config() -> str:
    text = (REPO / "docs" / "operations.md").read_text()
    start = text.index("```\n# /etc/ctxbus/nats.conf on 10.0.0.1\n") + len("```\n")
    return text[start : text.index("```", start)]


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the documented config no longer has {old!r} once"
    return text.replace(old, new)


def _config_of(node: int, clients: list[int], https: list[int], routes: list[int], store: Path) -> str:
    """The documented config of machine `node` (0-based), moved onto 127.0.0.1."""
    config = _replace_once(_documented_config(), "server_name: n1", f"server_name: n{node + 1}")
    config = _replace_once(config, "listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{clients[node]}")
    config = _replace_once(config, "http: 127.0.0.1:8222", f"http: 127.0.0.1:{https[node]}")
    config = _replace_once(config, "store_dir: /var/lib/ctxbus/nats", f"store_dir: {store}")
    config = _replace_once(config, "listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{routes[node]}")
    for host, port in zip(HOSTS, routes, strict=True):
        config = _replace_once(config, f"nats-route://{host}:6222", f"nats-route://127.0.0.1:{port}")
    return config


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        loaded: dict[str, object] = json.loads(answer.read())
        return loaded


def _healthy(http_port: int) -> bool:
    """The documented health check: JetStream is up on that node."""
    return _get_json(f"http://127.0.0.1:{http_port}/healthz?js-enabled-only=true") == {"status": "ok"}


def _leaders(http_ports: list[int]) -> set[str | None]:
    """The leader of the cluster's metadata, as each node's `/jsz` names it."""
    found: set[str | None] = set()
    for port in http_ports:
        meta = _get_json(f"http://127.0.0.1:{port}/jsz").get("meta_cluster")
        found.add(str(meta["leader"]) if isinstance(meta, dict) and meta.get("leader") else None)
    return found


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READ_TIMEOUT
    while True:
        try:
            if check():
                return
        except OSError:  # not listening yet
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {READ_TIMEOUT:.0f}s")
        time.sleep(0.1)


@pytest.mark.timeout(180)
def test_the_documented_three_machine_cluster_commits_with_a_server_stopped(tmp_path: Path) -> None:
    clients, https, routes = ([free_port() for _ in HOSTS] for _ in range(3))
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for node in range(len(HOSTS)):
            path = tmp_path / f"n{node + 1}.conf"
            path.write_text(_config_of(node, clients, https, routes, tmp_path / f"store-n{node + 1}"))
            with (tmp_path / f"n{node + 1}.log").open("wb") as log:
                servers.append(subprocess.Popen([str(find_nats_server()), "-c", str(path)], stdout=log, stderr=log))
        for port in https:  # the documented checks, on every node
            _until(functools.partial(_healthy, port), f"node with monitoring on {port} not healthy")
        _until(lambda: len(_leaders(https)) == 1 and None not in _leaders(https), "no node agreed on a leader")
        assert _leaders(https) <= {"n1", "n2", "n3"}

        urls = ",".join(f"nats://127.0.0.1:{port}" for port in clients)
        env = {**os.environ, "CTXBUS_NATS_URL": urls, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "300"}
        with Command("coordinator", "--replicas", "3", "--id", "coord-n1", env=env) as coordinator:
            assert coordinator.readline().startswith("coordinator coord-n1 serving"), coordinator.stderr
            with Command("status", env=env) as status:
                out, err = status.finish()
            assert status.proc.returncode == 0 and "coordinator coord-n1 serving: up" in out, err

            servers[1].send_signal(signal.SIGTERM)  # stop one server
            servers[1].wait(READ_TIMEOUT)
            args = ("brief", "propose", "add_pending", "survive a node", "-d", "alice/s1/t1")
            with Command(*args, env=env) as propose:
                out, err = propose.finish(timeout=60)
            assert propose.proc.returncode == 0 and out.startswith("committed at revision 1"), err
            with Command("brief", "show", "-d", "alice/s1/t1", env=env) as show:
                out, err = show.finish()
            assert re.search(r"\[p1\] survive a node", out), err
    finally:
        for server in servers:
            server.kill()
            server.wait()
