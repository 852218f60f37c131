"""What a hook does on the bus: read the brief, and run Channel 2 through the lease.

Imported only when NATS is configured, so a hook without it never loads nats, the log
or the keys. Everything here runs under one deadline and leaves an unreachable bus
out with a warning: the hook answers without the brief, or without Channel 2.
"""

from __future__ import annotations

import logging

import anyio

from ctxbus.agents.context import LocalContext
from ctxbus.agents.nudges import Channel2, Channel2Lease, SqliteNudgeStateStore, SyntheticMessage, TailMeasure
from ctxbus.agents.runtime import ContextHost
from ctxbus.bus import BriefLog, BusConfig, BusError, Leases, Verifier, close_quietly, connect
from ctxbus.schemas import Domain, render_brief

__all__ = ["load_brief", "run_channel2"]

log = logging.getLogger(__name__)


async def load_brief(bus: BusConfig, domain: Domain, *, deadline: float) -> tuple[int, str] | None:
    """The brief's revision and rendered text, or None if the bus does not give it in time."""
    try:
        with anyio.fail_after(deadline):
            client = await connect(bus, deadline=deadline)
            try:
                state = await BriefLog(client, verifier=_verifier(bus)).load(domain)
            finally:
                await close_quietly(client)
    except (BusError, TimeoutError, OSError) as exc:
        log.warning("brief of %s left out: %s", domain, exc)
        return None
    return state.brief.revision, render_brief(state.brief)


async def run_channel2(
    bus: BusConfig,
    context: LocalContext,
    nudges: SqliteNudgeStateStore,
    measure: TailMeasure,
    *,
    domain: Domain,
    agent: str,
    deadline: float,
) -> list[str]:
    """Channel 2 for the tail `measure`, at most once per cycle across every process of
    the agent (the lease); returns the messages delivered now (recorded in `context`)."""
    host = _HookHost(context)
    try:
        with anyio.fail_after(deadline):
            client = await connect(bus, deadline=deadline)
            try:
                leases = Leases(client)
                await leases.ensure()
                lease = Channel2Lease(leases, host, domain=domain, agent_id=agent)
                await Channel2(nudges, lease).observe(measure)
            finally:
                await close_quietly(client)
    except (BusError, TimeoutError, OSError) as exc:
        log.warning("Channel 2 skipped for %s: %s", agent, exc)
    return host.sent


class _HookHost:
    """Channel 2's host for a hook: the message goes back as the PostToolUse `reason`
    (Claude Code prompts the model with it), and is recorded in the agent's context so
    that every process sees it delivered."""

    def __init__(self, context: LocalContext) -> None:
        self._record = ContextHost(context)
        self.sent: list[str] = []

    async def deliver(self, message: SyntheticMessage) -> None:
        await self._record.deliver(message)
        self.sent.append(message.text)

    async def already_delivered(self, directive_id: str) -> bool:
        return await self._record.already_delivered(directive_id)


def _verifier(bus: BusConfig) -> Verifier | None:
    if bus.credentials is None or not bus.credentials.trusted_signers:
        return None
    return Verifier(bus.credentials.trusted_signers)
