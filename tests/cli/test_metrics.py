"""`ctxbus coordinator --metrics-port`: Prometheus scrapes what the coordinator did and
what its agents' heartbeats say, and the counts match what was done."""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
from prometheus_client.parser import text_string_to_metric_families

from ctxbus.agents.brief import PresenceBeacon, Proposer
from ctxbus.bus import BusConfig, EmbeddedServer, Verb, close_quietly, connect, request, subject
from ctxbus.schemas import AddNote, Committed, Domain, Presence, Proposal, ProposalEnvelope, Rejection, ReplyEnvelope
from tests.cli._procs import Command


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own loopback server
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_a_scrape_counts_what_the_coordinator_did_and_shows_its_agents(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    domain = Domain.parse(f"prom/s/{uuid.uuid4().hex[:8]}")
    with Command("coordinator", "--nats", server.url, "--id", "c-prom", "--metrics-port", "0", env=env) as cli:
        url = await anyio.to_thread.run_sync(_metrics_url, cli)
        client = await connect(BusConfig(servers=[server.url]))
        try:
            async with anyio.create_task_group() as tg:
                beat = Presence(agent="a1", band="firm", unused_tokens=1500, tail_tokens=4000, prompt_tokens=9000)
                await tg.start(PresenceBeacon(client, domain, "a1", lambda: beat, interval=0.5).run)
                for agent in ("a1", "a2"):
                    proposer = Proposer(client, domain, agent_id=agent)
                    for i in range(10):
                        assert isinstance(await proposer.propose(AddNote(text=f"{agent} {i}")), Committed)
                refused = await Proposer(client, domain, agent_id="a1").propose(AddNote(text="a1 0"))
                assert isinstance(refused, Rejection) and refused.code == "duplicate"
                late = Proposal(
                    domain=domain, author="a2", op=AddNote(text="late"), key="late", deadline=time.time() - 5
                )
                data = ProposalEnvelope(domain=domain, sender="a2", body=late).encode()
                answer = ReplyEnvelope.decode(
                    await request(client, subject(domain, Verb.PROPOSE), data, timeout=10)
                ).body
                assert isinstance(answer, Rejection) and answer.code == "expired"
                with anyio.fail_after(30):  # the agents' heartbeats are read every few seconds
                    while ("ctxbus_agent_band", (("agent", "a1"), ("domain", str(domain)))) not in (
                        scraped := await anyio.to_thread.run_sync(_scrape, url)
                    ):
                        await anyio.sleep(0.5)
                tg.cancel_scope.cancel()
        finally:
            await close_quietly(client)
    me = (("coordinator", "c-prom"),)
    assert scraped[("ctxbus_commits_total", me)] == 20
    assert scraped[("ctxbus_commit_latency_seconds_count", me)] == 20
    assert scraped[("ctxbus_batch_commits_sum", me)] == 20
    assert scraped[("ctxbus_rejections_total", (("code", "duplicate"), *me))] == 1
    assert scraped[("ctxbus_expired_proposals_total", (("coordinator", "c-prom"), ("reason", "late")))] == 1
    assert scraped[("ctxbus_domains", me)] >= 1
    agent = (("agent", "a1"), ("domain", str(domain)))
    assert scraped[("ctxbus_agent_band", agent)] == 2  # firm
    assert scraped[("ctxbus_agent_unused_tokens", agent)] == 1500
    assert scraped[("ctxbus_agent_tail_tokens", agent)] == 4000
    assert scraped[("ctxbus_agent_prompt_tokens", agent)] == 9000
    assert scraped[("ctxbus_agent_replica_lag", agent)] == 0
    assert 0 <= scraped[("ctxbus_agent_last_seen_seconds", agent)] < 30


def _metrics_url(cli: Command) -> str:
    """The URL the coordinator prints once its metrics are served."""
    while line := cli.readline():
        if line.startswith("metrics of c-prom at "):
            return line.removeprefix("metrics of c-prom at ").strip()
    raise AssertionError(f"no metrics URL printed; stderr:\n{cli.stderr}")
