"""What every swarm worker process does besides its agent's work: speak the line protocol
(`schemas._swarm_events`) on stdout, wait for the runner's report request, and check each
Channel 2 cycle on the bus and in the host for its result."""

from __future__ import annotations

import logging
import sys
from typing import Final

import anyio

from agents.nudges import Channel2Lease, DirectiveState
from agents.runtime import Agent
from bus import Leases
from schemas import Channel2Cycle, Event, EventAdapter, ReportRequest

__all__ = ["REPORT_WAIT", "channel2_cycles", "emit", "report_request"]

log = logging.getLogger(__name__)

REPORT_WAIT: Final = 30.0
"""Seconds to wait for the brief to reach the revision the runner asks to report at."""


def emit(event: Event) -> None:
    """Write one event line on stdout, for the runner."""
    sys.stdout.write(EventAdapter.dump_json(event).decode() + "\n")
    sys.stdout.flush()


async def report_request(agent: Agent) -> bool:
    """Wait for the runner's report request, then for the brief to reach its revision.

    Returns False if the runner went away first (stdin closed), which is logged.
    """
    line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    if not line:
        log.error("the swarm runner went away before asking for a report")
        return False
    request = ReportRequest.model_validate_json(line)
    await agent.replica.wait_for(request.revision, timeout=REPORT_WAIT)
    return True


async def channel2_cycles(agent: Agent, leases: Leases) -> list[Channel2Cycle]:
    """Each Channel 2 cycle the agent reached, as its lease on the bus and its host see it."""
    lease = Channel2Lease(leases, agent.host, domain=agent.domain, agent_id=agent.id)
    cycles = []
    for cycle in range(agent.channel2.state.cycle + 1):
        view = await lease.inspect(cycle)
        in_host = await agent.host.already_delivered(lease.directive_id(cycle))
        if view.state is not DirectiveState.ABSENT or in_host:
            cycles.append(Channel2Cycle(cycle=cycle, lease=str(view.state), in_host=in_host))
    return cycles
