"""`ctxbus log` over a log that holds an entry no replica can read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import anyio.to_thread

from ctxbus.agents.brief import Proposer
from ctxbus.bus import BriefLog, BriefState, TxLog, Verb, subject
from ctxbus.schemas import AddNote, AddPending, Commit, CommitBatch, CommitEnvelope, Domain, Proposal
from tests._support import running_coordinator
from tests.cli._procs import Command


async def test_log_shows_a_malformed_entry_as_skipped_and_goes_on(nats_url: str) -> None:
    domain = Domain.parse(f"u{uuid.uuid4().hex[:8]}/s/t")
    async with running_coordinator(nats_url, coordinator_id="c-log") as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        await agent.propose(AddPending(text="before"))
        junk = await TxLog(client).append(subject(domain, Verb.TX), b"\x81\xa1v\x09", "junk-1")  # a foreign writer's
        await agent.propose(AddPending(text="after"))

    def ctxbus_log(*extra: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "ctxbus.coordinator.cli", "log", "-d", str(domain), "--nats", nats_url, *extra]
        return subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})

    table = await anyio.to_thread.run_sync(ctxbus_log)
    assert table.returncode == 0, table.stderr
    assert "before" in table.stdout and "after" in table.stdout
    assert f"log entry {junk}: unsupported envelope version 9" in table.stdout

    as_json = await anyio.to_thread.run_sync(ctxbus_log, "--json")
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [line.get("revision") for line in lines] == [1, None, 2]
    assert lines[1]["seq"] == junk and lines[1]["skipped"].startswith("unsupported envelope version 9")


async def test_log_marks_what_every_replica_skips_or_passes_over(nats_url: str) -> None:
    """Entries a foreign writer appended that parse well but cannot follow the brief (a
    commit of another domain, one after a gap) and a commit that changes nothing (a key
    committed before): shown as replicas take them, not as ordinary commits."""
    domain, other = (Domain.parse(f"u{uuid.uuid4().hex[:8]}/s/t") for _ in range(2))
    async with running_coordinator(nats_url, coordinator_id="c-log") as (client, _):
        agent = Proposer(client, domain, agent_id="a")
        await agent.propose(AddPending(text="before"), key="k-before")
        log = BriefLog(client)

        def commit(on: Domain, revision: int, key: str) -> Commit:
            proposal = Proposal(domain=on, author="a", op=AddNote(text=key), key=key, deadline=time.time() + 60)
            return Commit.of(proposal, revision=revision, ts=time.time(), committed_by="mallory")

        state = await log.load(domain)
        for bad in (commit(other, 2, "elsewhere"), commit(domain, 7, "after-a-gap"), commit(domain, 2, "k-before")):
            envelope = CommitEnvelope(domain=domain, sender="mallory", body=CommitBatch(commits=(bad,)))
            seq = await log.txlog.append(subject(domain, Verb.TX), envelope.encode(), bad.key)
            state = BriefState(state.brief, seq)
        await agent.propose(AddPending(text="after"))
        truth = await log.load(domain)

    args = [sys.executable, "-m", "ctxbus.coordinator.cli", "log", "-d", str(domain), "--nats", nats_url, "--json"]
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(args, capture_output=True, text=True, timeout=60))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert "cannot apply to the brief of" in lines[1]["skipped"]
    assert "revisions 2..6 are missing" in lines[2]["skipped"]
    assert lines[3]["no_effect"] is True and lines[3]["key"] == "k-before"
    shown = [line["revision"] for line in lines if "skipped" not in line and not line.get("no_effect")]
    assert shown == [1, 3] and truth.brief.revision == 3
    assert [p.text for p in truth.brief.pending] == ["before", "after"]


async def test_log_follow_stops_on_sigterm_as_on_ctrl_c(nats_url: str) -> None:
    domain = Domain.parse(f"u{uuid.uuid4().hex[:8]}/s/t")
    async with running_coordinator(nats_url, coordinator_id="c-follow") as (client, _):
        await Proposer(client, domain, agent_id="a").propose(AddPending(text="shown"))
    with Command("log", "-f", "-d", str(domain), "--nats", nats_url, env={**os.environ, "COLUMNS": "200"}) as follow:
        assert await anyio.to_thread.run_sync(follow.read_until, lambda line: "shown" in line), follow.stderr
        follow.proc.send_signal(signal.SIGTERM)
        _, err = await anyio.to_thread.run_sync(follow.finish)
    assert follow.proc.returncode == 0, err
    assert "Traceback" not in err, err
