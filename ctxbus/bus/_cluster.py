"""A loopback cluster of embedded servers, for replication tests and local trials."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Self

import anyio

from ctxbus.bus._auth import AuthStore
from ctxbus.bus._connection import BusConfig, close_quietly, connect
from ctxbus.bus._errors import BusError, BusUnavailable, ServerError
from ctxbus.bus._lifecycle import ProcessGroup
from ctxbus.bus._server import DEFAULT_START_TIMEOUT, DEFAULT_SYNC_INTERVAL, ClusterRoutes, EmbeddedServer, free_port
from ctxbus.bus._translate import translating
from ctxbus.schemas import UsageError

__all__ = ["LoopbackCluster"]

DEFAULT_LEADER_TIMEOUT = 30.0
"""Seconds `wait_for_leader` waits: an election after a node's death takes a few."""

_META_LEADER_LINE = "metadata leader"
_PROBE_TIMEOUT = 1.0
"""Seconds one stream-info request may take while a stream has no leader."""


class LoopbackCluster(ProcessGroup):
    """`size` JetStream nodes on 127.0.0.1, routed to each other, sharing nothing else.

    Nodes are named `n1`, `n2`, ... (their JetStream server names), each with its own
    data dir `base_dir/nN` and client port, kept across restarts, so a killed node can be
    started again and rejoin. `start()` returns once every node knows the JetStream
    metadata leader, so R3 streams can be created right away (on a loaded machine one
    may still fail with an error `may_pass` lets through, which a starting coordinator
    waits out). After a node dies, a stream it led has no leader until the others elect
    one: `wait_for_leader` waits for that.

    :param port: the first node's client port; the others take the ports after it. 0
        (the default) gives every node a free port.
    """

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        size: int = 3,
        name: str = "ctxbus",
        port: int = 0,
        sync_interval: str = DEFAULT_SYNC_INTERVAL,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        auth: AuthStore | None = None,
    ) -> None:
        if size < 1:
            raise UsageError(f"a cluster needs at least one node, got size={size}")
        if port and not 0 < port <= 65536 - size:
            raise UsageError(f"{size} nodes need ports {port} to {port + size - 1}: not all are valid (1 to 65535)")
        self._owns_base_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="ctxbus-cluster-"))
        self.name = name
        self.start_timeout = start_timeout
        route_ports = [free_port() for _ in range(size)]
        self.nodes: list[EmbeddedServer] = [
            EmbeddedServer(
                self.base_dir / f"n{i + 1}",
                port=port + i if port else free_port(),
                server_name=f"n{i + 1}",
                sync_interval=sync_interval,
                start_timeout=start_timeout,
                auth=auth,
                _cluster=ClusterRoutes(
                    name=name,
                    port=route_ports[i],
                    peers=tuple(p for j, p in enumerate(route_ports) if j != i),
                ),
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        """Client URLs of every node, for a client's server list."""
        return [node.url for node in self.nodes]

    @property
    def running(self) -> list[EmbeddedServer]:
        """The nodes whose process is alive."""
        return [node for node in self.nodes if node.running]

    @property
    def quorum(self) -> int:
        """How many nodes must run for the cluster to elect leaders and store writes."""
        return len(self.nodes) // 2 + 1

    def __repr__(self) -> str:
        return f"<LoopbackCluster {self.name!r} {len(self.running)}/{len(self.nodes)} nodes running>"

    def start(self) -> Self:
        """Start every node and wait until each knows the JetStream metadata leader.

        :raises ServerError: if a node fails to start or no leader is elected in time.
        """
        try:
            offsets = [node.launch() for node in self.nodes]
            for node, offset in zip(self.nodes, offsets, strict=True):
                node.wait_ready(offset)
            self._wait_for_meta_leader(offsets)
        except BaseException:
            self.stop()
            raise
        return self

    def reload(self) -> None:
        """`EmbeddedServer.reload` on every running node (the auth store as it is now)."""
        for node in self.running:
            node.reload()

    def stop(self) -> None:
        """Stop every node; remove the temporary base dir if we made it."""
        for node in self.nodes:
            node.stop()
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    async def wait_for_leader(self, stream: str, *, timeout: float = DEFAULT_LEADER_TIMEOUT) -> EmbeddedServer:
        """Wait until `stream` has a leader among the running nodes; return that node.

        Writes to a replicated stream go through its leader. When the leader dies, the
        others elect a new one within seconds, and a write in between fails; await this
        after killing a node and before writing, as a client that retries would.
        KV buckets are streams too: `KV_<bucket>`.

        :raises BusUnavailable: if no running node leads `stream` within `timeout`
            seconds (fewer nodes than `quorum` run, or no such stream).
        """
        running = self.running
        if not running:
            raise BusUnavailable(f"no node of {self!r} is running, so {stream} cannot have a leader")
        client = await connect(BusConfig(servers=[node.url for node in running], name="ctxbus-leader-probe"))
        last = "no answer yet"
        try:
            js = client.jetstream(timeout=_PROBE_TIMEOUT)
            with anyio.move_on_after(timeout):
                while True:
                    try:
                        with translating(f"stream {stream}"):
                            info = await js.stream_info(stream)
                    except BusError as exc:  # no leader yet, or no stream
                        last = str(exc)
                    else:
                        leader = info.cluster.leader if info.cluster else None
                        node = next((n for n in self.running if leader and n.server_name == leader), None)
                        if node is not None:
                            return node
                        last = f"its leader is {leader or 'not elected'}"
                    await anyio.sleep(0.1)
        finally:
            with anyio.CancelScope(shield=True):
                await close_quietly(client)
        raise BusUnavailable(
            f"no running node of {self!r} leads stream {stream} after {timeout:g}s ({last}); "
            f"a cluster of {len(self.nodes)} elects leaders while {self.quorum} nodes run"
        )

    def _wait_for_meta_leader(self, offsets: list[int]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if all(
                _META_LEADER_LINE in node.read_log(offset) for node, offset in zip(self.nodes, offsets, strict=True)
            ):
                return
            time.sleep(0.05)
        raise ServerError(f"no JetStream metadata leader elected within {self.start_timeout:.0f}s")
