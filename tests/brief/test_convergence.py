"""Convergence under faults, with real OS processes and a real nats-server.

2 coordinator processes, snapshotting every 5 commits; 4 agent processes proposing 500
random ops each to domain A while 2 more work on domain B. Mid-run one coordinator is
SIGKILLed, and later the NATS server is SIGKILLed and restarted; joiners load the brief
(the latest snapshot, then the log after it) at random points all along. Then every
replica must hold exactly the brief a fresh replay of the log gives, and so must every
joiner at its revision and `ctxbus brief show`, with no revision gap, every
acknowledged commit in the log exactly once, and nothing of A in B.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from ctxbus.bus import (
    BriefLog,
    BriefState,
    BusConfig,
    BusError,
    EmbeddedServer,
    TxLog,
    Verb,
    commits_of,
    connect,
    subject,
)
from ctxbus.coordinator._config import FOLD_AUTHOR_SUFFIX
from ctxbus.schemas import Commit, Domain, TaskBrief, apply, brief_hash

A = Domain.parse("alice/run1/A")
B = Domain.parse("bob/run1/B")
OPS = 500
AGENTS_A = [f"a{i}" for i in range(4)]
AGENTS_B = [f"b{i}" for i in range(2)]
ROOT = Path(__file__).resolve().parents[2]


def _spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _join(url: str, domain: Domain) -> TaskBrief:
    """The brief as an agent joining now gets it: the latest snapshot, then the log after it."""
    client = await connect(BusConfig(servers=[url]))
    try:
        return (await BriefLog(client).load(domain)).brief
    finally:
        await client.close()


async def test_replicas_converge_through_coordinator_and_server_crashes(
    nats_server_factory: Callable[..., EmbeddedServer],
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    server = nats_server_factory()
    url = server.url
    client = await connect(BusConfig(servers=[url]))
    await BriefLog(client).ensure()
    await client.close()

    coordinators = [
        _spawn(
            "-m",
            "ctxbus.coordinator.cli",
            "coordinator",
            "--nats",
            url,
            "--id",
            f"c{i}",
            "--snapshot-every",
            "5",
            log=tmp_path / f"c{i}.log",
        )
        for i in range(2)
    ]
    processes.extend(coordinators)
    workers = {
        agent: _spawn(
            "-m",
            "tests.brief._agent_worker",
            url,
            str(domain),
            agent,
            str(OPS),
            str(seed),
            str(tmp_path),
            log=tmp_path / f"{agent}.log",
        )
        for seed, (agent, domain) in enumerate([*((a, A) for a in AGENTS_A), *((b, B) for b in AGENTS_B)])
    }
    processes.extend(workers.values())

    # Faults: kill a coordinator once A has some history, then crash and restart NATS.
    killed_coordinator = crashed_server = False
    rng = random.Random(5)
    joiners: list[TaskBrief] = []
    with anyio.fail_after(300):
        while not all((tmp_path / f"{a}.acks.json").exists() for a in workers):
            for agent, proc in workers.items():
                assert proc.poll() in (None, 0), (tmp_path / f"{agent}.log").read_text()[-3000:]
            if rng.random() < 0.3:
                try:
                    joiners.append(await _join(url, A))
                except BusError:  # the server is down: nobody joins now
                    pass
            if not crashed_server:
                revision = (await _join(url, A)).revision
                if not killed_coordinator and revision >= 300:
                    coordinators[0].kill()
                    killed_coordinator = True
                elif killed_coordinator and revision >= 900:
                    server.kill()
                    await anyio.sleep(0.5)
                    await anyio.to_thread.run_sync(server.start)
                    crashed_server = True
            await anyio.sleep(0.2)
    assert killed_coordinator and crashed_server, "the faults were not injected; the run was too short"

    # The log is the truth: replay it from scratch, checking every revision follows the last.
    client = await connect(BusConfig(servers=[url]))
    log = TxLog(client)
    finals: dict[str, int] = {}
    replayed: dict[Domain, TaskBrief] = {}
    commits: dict[Domain, list[Commit]] = {}
    for domain in (A, B):
        entries = [e async for e in log.read(subject(domain, Verb.TX))]
        commits[domain] = [commit for entry in entries for commit in commits_of(entry)]
        revisions = [c.revision for c in commits[domain]]
        assert revisions == list(range(1, len(revisions) + 1)), "revision gap or repeat"
        state = BriefState(TaskBrief(domain=domain), 0)
        for entry in entries:
            state = BriefLog.apply_entry(state, entry)
        replayed[domain] = state.brief
        finals[str(domain)] = state.brief.revision
    # Every joiner held, at its revision, what the log gives there.
    brief, hash_at = TaskBrief(domain=A), {0: brief_hash(TaskBrief(domain=A))}
    for commit in commits[A]:
        brief = apply(brief, commit)
        hash_at[brief.revision] = brief_hash(brief)
    assert len(joiners) > 5
    assert [j.revision for j in joiners if brief_hash(j) != hash_at[j.revision]] == []
    (tmp_path / "final.json").write_text(json.dumps(finals))

    with anyio.move_on_after(120):
        while not all((tmp_path / f"{a}.hash").exists() for a in workers):
            await anyio.sleep(0.2)
    missing = [a for a in workers if not (tmp_path / f"{a}.hash").exists()]
    assert not missing, "replicas that never reached the log's end:\n" + "\n".join(
        f"--- {a} (exit {workers[a].poll()}):\n{(tmp_path / f'{a}.log').read_text()[-3000:]}" for a in missing
    )
    for agent in workers:
        report = json.loads((tmp_path / f"{agent}.hash").read_text())
        domain = A if agent in AGENTS_A else B
        assert report["hash"] == brief_hash(replayed[domain]), f"{agent} diverged from the log"

    for domain, agents in ((A, AGENTS_A), (B, AGENTS_B)):
        in_log = Counter((c.author, c.key) for c in commits[domain])
        assert max(in_log.values()) == 1, "a proposal was committed twice"
        by_key = {(c.author, c.key): c.revision for c in commits[domain]}
        for agent in agents:
            for ack in json.loads((tmp_path / f"{agent}.acks.json").read_text()):
                if ack["status"] == "committed":
                    assert by_key[(agent, ack["key"])] == ack["revision"], f"acked {ack} not in the log"
        assert {c.domain for c in commits[domain]} == {domain}
        # Besides the agents, only coordinators folding done items (the commands' default budget).
        assert {c.author for c in commits[domain] if not c.author.endswith(FOLD_AUTHOR_SUFFIX)} <= set(agents)
    assert not any(a in str(replayed[B].model_dump()) for a in AGENTS_A), "domain B saw domain A's data"
    assert len(commits[A]) > 1000
    await client.close()
    for domain in (A, B):
        show = subprocess.run(
            [sys.executable, "-m", "ctxbus.coordinator.cli", "brief", "show", "--json", "-d", str(domain), "--nats", url],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert json.loads(show.stdout)["hash"] == brief_hash(replayed[domain]), f"`brief show` of {domain}"
    for proc in workers.values():
        assert proc.wait(timeout=30) == 0
