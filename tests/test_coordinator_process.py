"""`ctxbus.coordinator.testing.CoordinatorProcess`, the fixtures' coordinator: its failures are
reported with the process's own words, and it stops whatever state it is in."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ctxbus.bus.testing import ServerFactory
from ctxbus.coordinator.testing import CoordinatorFailed, CoordinatorProcess


def test_a_coordinator_that_cannot_serve_is_reported_with_its_log(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = nats_server_factory()
    coordinator = CoordinatorProcess(server, replicas=3, log_path=tmp_path / "c.log")  # three copies on one node
    with pytest.raises(CoordinatorFailed, match=r"exited with code 1: its log \(.*c\.log\) ends with:\n") as caught:
        coordinator.start()
    assert "ctxbus: error:" in str(caught.value)
    assert not coordinator.running and "stopped" in repr(coordinator)


def test_a_frozen_coordinator_still_stops(nats_server_factory: ServerFactory, tmp_path: Path) -> None:
    coordinator = CoordinatorProcess(nats_server_factory(), log_path=tmp_path / "c.log").start()
    assert coordinator.running and f"pid={coordinator.pid}" in repr(coordinator)
    os.kill(coordinator.pid or 0, signal.SIGSTOP)
    coordinator.stop(timeout=30)
    assert not coordinator.running
    assert "coordinator " in (tmp_path / "c.log").read_text()
