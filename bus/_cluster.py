"""A loopback cluster of embedded servers, for replication tests and local trials."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Self

from bus._errors import ServerError
from bus._lifecycle import ProcessGroup
from bus._server import DEFAULT_START_TIMEOUT, ClusterRoutes, EmbeddedServer, free_port
from schemas import UsageError

__all__ = ["LoopbackCluster"]

_META_LEADER_LINE = "metadata leader"


class LoopbackCluster(ProcessGroup):
    """`size` JetStream nodes on 127.0.0.1, routed to each other, sharing nothing else.

    Each node keeps its own data dir and port across restarts, so a killed node can be
    started again and rejoin. `start()` returns once JetStream has elected a metadata
    leader, so R3 streams can be created right away.
    """

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        size: int = 3,
        name: str = "ctxbus",
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        if size < 1:
            raise UsageError(f"a cluster needs at least one node, got size={size}")
        self._owns_base_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="ctxbus-cluster-"))
        self.name = name
        self.start_timeout = start_timeout
        route_ports = [free_port() for _ in range(size)]
        self.nodes: list[EmbeddedServer] = [
            EmbeddedServer(
                self.base_dir / f"n{i + 1}",
                port=free_port(),
                server_name=f"n{i + 1}",
                start_timeout=start_timeout,
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

    def __repr__(self) -> str:
        up = sum(node.running for node in self.nodes)
        return f"<LoopbackCluster {self.name!r} {up}/{len(self.nodes)} nodes running>"

    def start(self) -> Self:
        """Start every node and wait for a JetStream metadata leader.

        :raises ServerError: if a node fails to start or no leader is elected in time.
        """
        try:
            offsets = [node.launch() for node in self.nodes]
            for node, offset in zip(self.nodes, offsets, strict=True):
                node.wait_ready(offset)
            self._wait_for_leader(offsets)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node; remove the temporary base dir if we made it."""
        for node in self.nodes:
            node.stop()
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _wait_for_leader(self, offsets: list[int]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for node, offset in zip(self.nodes, offsets, strict=True):
                if _META_LEADER_LINE in node.read_log(offset):
                    return
            time.sleep(0.05)
        raise ServerError(f"no JetStream metadata leader elected within {self.start_timeout:.0f}s")
