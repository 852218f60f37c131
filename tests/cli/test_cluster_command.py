"""`ctxbus nats --cluster 3` and `ctxbus up --cluster 3`: a local cluster in one command,
which keeps serving with a node killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctxbus.bus import TX_STREAM, BusConfig, TxLog, TxLogConfig, close_quietly, connect
from tests.cli._procs import READ_TIMEOUT, Command


@dataclass
class Node:
    name: str
    url: str
    pid: int


@dataclass
class Running:
    cli: Command
    nodes: list[Node]
    env: dict[str, str]

    @property
    def urls(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def kill(self, name: str) -> None:
        os.kill(next(node.pid for node in self.nodes if node.name == name), signal.SIGKILL)

    def wait_for_stderr(self, text: str) -> None:
        """Until the command has said `text` on stderr (it looks at its nodes twice a second)."""
        deadline = time.monotonic() + READ_TIMEOUT
        while text not in self.cli.stderr:
            if time.monotonic() > deadline:
                pytest.fail(f"never said {text!r}; stderr:\n{self.cli.stderr}")
            time.sleep(0.05)


_NODE = re.compile(r"^\s+(n\d) (nats://127\.0\.0\.1:\d+) \(pid (\d+)\)$")


@contextmanager
def _cluster_command(*args: str, tmp_path: Path) -> Iterator[Running]:
    """`ctxbus *args --cluster 3 --port 0`, read until it says it is ready; killed with
    its nodes at the end whatever happens."""
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "300"}
    with Command(*args, "--cluster", "3", "--port", "0", env=env) as cli:
        assert cli.readline().startswith("NATS cluster ready: 3 nodes"), cli.stderr
        nodes = []
        for _ in range(3):
            found = _NODE.match(cli.readline().rstrip("\n"))
            assert found, cli.stderr
            nodes.append(Node(found[1], found[2], int(found[3])))
        assert [node.name for node in nodes] == ["n1", "n2", "n3"]
        assert cli.readline().strip() == "--nats " + ",".join(node.url for node in nodes)
        assert sorted(cli.children()) == sorted(node.pid for node in nodes)
        yield Running(cli, nodes, env)


def _ctxbus(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


def _propose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`ctxbus brief propose *args`, run again as it says when no coordinator answered in
    time: with a node just killed, the streams it led elect new leaders first, which a
    loaded machine may take longer over than one proposal waits."""
    proposed = _ctxbus("brief", "propose", *args, env=env)
    for _ in range(3):
        retry = re.search(r"run the same command with --key (\S+)", proposed.stderr)
        if proposed.returncode == 0 or retry is None:
            break
        proposed = _ctxbus("brief", "propose", *args, "--key", retry[1].rstrip(".,;)"), env=env)
    return proposed


async def test_up_with_a_cluster_commits_with_a_node_killed(tmp_path: Path) -> None:
    with _cluster_command("up", tmp_path=tmp_path) as up:
        assert up.cli.readline().startswith("data dir: ")
        line = up.cli.readline()
        assert line.startswith("coordinator ") and "3 copies" in line, f"{line!r}; stderr:\n{up.cli.stderr}"
        client = await connect(BusConfig(servers=up.urls.split(",")))
        try:
            assert (await client.jetstream().stream_info(TX_STREAM)).config.num_replicas == 3
        finally:
            await close_quietly(client)

        up.kill("n1")  # the node every client tries first
        env = {**up.env, "CTXBUS_NATS_URL": up.urls, "CTXBUS_DOMAIN": "alice/s1/cluster"}
        proposed = _propose("add_pending", "survive a node", env=env)
        assert proposed.returncode == 0 and proposed.stdout.startswith("committed at revision 1"), proposed.stderr
        shown = _ctxbus("brief", "show", env=env)
        assert "survive a node" in shown.stdout, shown.stderr
        up.wait_for_stderr("node n1")
        assert up.cli.proc.poll() is None, "two of three nodes serve: `up` carries on"

        up.cli.proc.send_signal(signal.SIGINT)
        out, err = up.cli.finish()
        assert up.cli.proc.returncode == 0, err
        assert "data kept" in out
        assert up.cli.orphans() == [], "a node outlived `ctxbus up`"


async def test_nats_cluster_serves_on_with_one_node_down_and_stops_without_a_majority(tmp_path: Path) -> None:
    config = TxLogConfig(stream="CLUSTER_CMD", subjects=("cmd.>",), replicas=3)
    with _cluster_command("nats", tmp_path=tmp_path) as nats:
        assert "--replicas 3" in nats.cli.readline() + nats.cli.readline()  # data dir, then the hint
        client = await connect(BusConfig(servers=nats.urls.split(",")))
        try:
            log = TxLog(client, config)
            await log.ensure()
            await log.append("cmd.a", b"three nodes", "m1")
            nats.kill("n2")
            nats.wait_for_stderr("node n2")
            assert nats.cli.proc.poll() is None
            await log.append("cmd.a", b"two nodes", "m2")  # retried through the leader's election if need be
            assert [entry.payload async for entry in log.read("cmd.a")] == [b"three nodes", b"two nodes"]
        finally:
            await close_quietly(client)

        nats.kill("n3")
        _, err = nats.cli.finish()
        assert nats.cli.proc.returncode == 1
        assert err.strip().splitlines()[-1] == (
            "ctxbus: error: 1 of 3 nodes left, and a cluster of 3 needs 2 to store anything: stopping"
        )
        assert nats.cli.orphans() == [], "the last node outlived `ctxbus nats`"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nats", "--cluster", "3", "--host", "0.0.0.0"], "a --cluster runs on 127.0.0.1 only"),
        (["nats", "--cluster", "2"], "Invalid value for '--cluster'"),
        (["up", "--replicas", "3"], "3 copies need 3 nodes, and NATS here has 1: add --cluster 3"),
        (["up", "--cluster", "3", "--replicas", "5"], "at most --replicas 3"),
    ],
)
def test_cluster_options_that_cannot_work_are_usage_errors(args: list[str], says: str, tmp_path: Path) -> None:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "300"}
    refused = _ctxbus(*args, env=env)
    assert refused.returncode == 2, refused.stderr
    assert says in refused.stderr
    assert not (tmp_path / "nats-cluster").exists(), "nothing started"
