"""What every swarm worker process does besides its agent's work: take the common
arguments, connect, speak the line protocol (`schemas._swarm_events`) on stdout, wait for
the runner's report request, and report its agent (each Channel 2 cycle checked on the
bus and in the host)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import anyio

from ctxbus.agents.context import PRICE_PRESETS, ContextConfig, PromptCache
from ctxbus.agents.nudges import Channel2Lease, Channel2LeaseConfig, DirectiveState
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.swarm._scenario import agent_name
from ctxbus.bus import BusConfig, Credentials, Leases, NatsClient, RepeatFilter, configure_from_env, connect, run_async
from ctxbus.schemas import AgentResult, Channel2Cycle, Domain, Event, EventAdapter, ReportRequest, Tally

__all__ = [
    "HEARTBEAT",
    "REPORT_WAIT",
    "agent_result",
    "channel2_cycles",
    "connect_agent",
    "emit",
    "report_request",
    "worker_main",
    "worker_parser",
]

HEARTBEAT: Final = 0.5
"""Seconds between a swarm agent's heartbeats: the live view follows them."""

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


def worker_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A worker's command line: the arguments every swarm worker takes, for it to add to."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--nats", required=True, help="NATS URL")
    parser.add_argument("--domain", required=True, type=Domain.parse)
    parser.add_argument("--index", required=True, type=int, help="0-based position in the swarm")
    parser.add_argument("--agents", required=True, type=int, help="swarm size")
    parser.add_argument("--store", required=True, type=Path, help="the agent's SQLite file")
    parser.add_argument("--credentials", type=Path, help="the agent's credentials, on a server with auth")
    return parser


def worker_main(
    parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], Awaitable[int]], argv: Sequence[str] | None
) -> int:
    """Parse the arguments, log to stderr (stdout is the runner's), run; the exit code."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter())  # an outage's retries: one line, then a count
    configure_from_env("ctxbus-agent")  # traces over OTLP, where OTEL_EXPORTER_OTLP_ENDPOINT asks for them
    return run_async(run, args)


async def connect_agent(
    args: argparse.Namespace, context: ContextConfig, *, claim_ttl: float
) -> tuple[NatsClient, AgentConfig]:
    """The worker's connection (as its principal, on a server with auth) and its agent's settings."""
    name = agent_name(args.index)
    credentials = Credentials.load(args.credentials) if args.credentials else None
    client = await connect(BusConfig(servers=[args.nats], name=name, credentials=credentials))
    config = AgentConfig(
        agent_id=name,
        domain=args.domain,
        store=args.store,
        context=context,
        heartbeat=HEARTBEAT,
        channel2=Channel2LeaseConfig(claim_ttl=claim_ttl),
        trusted_signers=credentials.trusted_signers if credentials else (),
    )
    return client, config


async def agent_result(
    agent: Agent,
    tally: Tally,
    leases: Leases,
    *,
    missing_constraints: Sequence[str] = (),
    missing_from_brief: Sequence[str] = (),
) -> AgentResult:
    """The agent's final word: its tally, its prompt against its history, its Channel 2
    cycles and its brief."""
    composition = agent.compose()
    messages = agent.context.messages()
    return AgentResult(
        agent=agent.id,
        tally=tally,
        prompt_tokens=composition.report.total,
        history_tokens=sum(m.tokens for m in messages),
        synthetic_messages=sum(m.kind == "synthetic" for m in messages),
        cycles=await channel2_cycles(agent, leases),
        missing_constraints=list(missing_constraints),
        missing_from_brief=list(missing_from_brief),
        revision=agent.replica.revision,
        hash=agent.replica.hash,
        **_cache_figures(agent.prompt_cache),
    )


def _cache_figures(cache: PromptCache | None) -> dict[str, Any]:
    """What the agent's prompts cost with a provider's cache, and the whole history's."""
    if cache is None or not cache.meter.calls:
        return {}
    return {
        "cached_share": round(cache.cached_share, 4),
        "cost": {name: round(cache.cost(name)) for name in PRICE_PRESETS},
        "full_cost": {name: round(cache.full_cost(name)) for name in PRICE_PRESETS},
    }
