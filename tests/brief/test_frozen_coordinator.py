"""A coordinator frozen (SIGSTOP, not killed) during a burst, then woken.

Two coordinator processes serve one domain while four agent processes add work and
complete it as fast as they can. The coordinator committing the domain (which the
proposers ask first, and the other passes proposals to) is frozen for longer than the
proposers' attempt timeout and than the short deadlines: the proposals it took in sit
in it while their proposers retry through the other one, which commits them. Woken,
the frozen one finds copies that were committed meanwhile (after their authors
committed hundreds of others) and copies past their deadlines. None may be committed
again: no key twice in the log, no completed item back as pending. And every reader
agrees at the end: each agent's replica, a joiner from the snapshot, `ctxbus brief show
--json` and a fresh replay of the log; no coordinator logged an error.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from ctxbus.bus import (
    STATUS_SUBJECT,
    BriefLog,
    BriefState,
    BusConfig,
    EmbeddedServer,
    Verb,
    commits_of,
    connect,
    gather,
    subject,
)
from ctxbus.schemas import AddPending, Commit, CommitEnvelope, CoordinatorStatus, Domain, TaskBrief, brief_hash

DOMAIN = Domain.parse("alice/freeze/burst")
AGENTS = ("f0", "f1", "f2", "f3")
FREEZE = 4.0
"""Seconds the coordinator is frozen at least: past the proposers' attempt timeout (0.5 s)
and their short deadline (2 s), within their long one (30 s). It stays frozen until every
author has committed more than 64 proposals meanwhile."""
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
            proc.send_signal(signal.SIGCONT)  # one left frozen by a failed test
            proc.kill()
            proc.wait()


async def _revision(url: str) -> int:
    client = await connect(BusConfig(servers=[url]))
    try:
        return (await BriefLog(client).load(DOMAIN)).brief.revision
    finally:
        await client.close()


async def _last_writer(url: str) -> str:
    """The coordinator that appended the log's last entry: the one committing the domain,
    which the proposers ask first."""
    client = await connect(BusConfig(servers=[url]))
    try:
        txlog = BriefLog(client).txlog
        tx = subject(DOMAIN, Verb.TX)
        last = [entry async for entry in txlog.read(tx, await txlog.last_seq(tx))]
        return CommitEnvelope.decode(last[-1].payload, max_size=None).sender
    finally:
        await client.close()


async def _read_log(url: str) -> tuple[list[Commit], TaskBrief, TaskBrief]:
    """Every commit of the domain's log, the brief a fresh replay of it gives, and the
    brief a joiner gets (the latest snapshot and the log after it)."""
    client = await connect(BusConfig(servers=[url]))
    try:
        log = BriefLog(client)
        entries = [entry async for entry in log.txlog.read(subject(DOMAIN, Verb.TX))]
        state = BriefState(TaskBrief(domain=DOMAIN), 0)
        for entry in entries:
            state = BriefLog.apply_entry(state, entry)
        joined = (await log.load(DOMAIN)).brief
    finally:
        await client.close()
    return [commit for entry in entries for commit in commits_of(entry)], state.brief, joined


async def _commits_since(url: str, revision: int) -> Counter[str]:
    """Commits after `revision`, by author."""
    commits, _, _ = await _read_log(url)
    return Counter(c.author for c in commits if c.revision > revision and c.author in AGENTS)


async def _status_of(url: str, coordinator_id: str) -> CoordinatorStatus | None:
    client = await connect(BusConfig(servers=[url]))
    try:
        answers = [CoordinatorStatus.decode(raw) for raw in await gather(client, STATUS_SUBJECT, b"", wait=2.0)]
    finally:
        await client.close()
    return next((status for status in answers if status.coordinator == coordinator_id), None)


async def test_a_frozen_coordinator_woken_late_commits_nothing_twice(
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
            "-m", "ctxbus.coordinator.cli", "coordinator", "--nats", url, "--id", f"c{i}", "--snapshot-every", "5",
            log=tmp_path / f"c{i}.log",
        )
        for i in range(2)
    ]  # fmt: skip
    processes.extend(coordinators)
    workers = {
        agent: _spawn(
            "-m", "tests.brief._burst_worker", url, str(DOMAIN), agent, str(tmp_path), log=tmp_path / f"{agent}.log"
        )
        for agent in AGENTS
    }
    processes.extend(workers.values())

    with anyio.fail_after(120):
        while await _revision(url) < 100:  # the burst is under way on both coordinators
            for agent, proc in workers.items():
                assert proc.poll() is None, (tmp_path / f"{agent}.log").read_text()[-3000:]
            await anyio.sleep(0.1)
        frozen_at = await _revision(url)
        frozen_id = await _last_writer(url)
        frozen = coordinators[int(frozen_id.removeprefix("c"))]
        frozen.send_signal(signal.SIGSTOP)
        await anyio.sleep(FREEZE)  # past the short deadlines, whatever the machine's load
        # Frozen until every author has committed more than the 64 keys per author an
        # earlier brief remembered, through the other coordinator.
        while min((await _commits_since(url, frozen_at)).values(), default=0) <= 64:
            await anyio.sleep(0.2)
        frozen.send_signal(signal.SIGCONT)
        # Woken, it meets the copies it held, and answers them (as duplicates, or past
        # their deadline) rather than commit them.
        while (held := await _status_of(url, frozen_id)) is None or held.duplicates + held.rejections.get(
            "expired", 0
        ) == 0:
            await anyio.sleep(0.2)
        (tmp_path / "stop").touch()
        while not all((tmp_path / f"{a}.acks.json").exists() for a in workers):
            for agent, proc in workers.items():
                assert proc.poll() in (None, 0), (tmp_path / f"{agent}.log").read_text()[-3000:]
            await anyio.sleep(0.1)

    commits, replayed, joined = await _read_log(url)
    assert [c.revision for c in commits] == list(range(1, len(commits) + 1))
    (tmp_path / "final.json").write_text(json.dumps({"revision": replayed.revision}))

    keys = Counter((c.author, c.key) for c in commits)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    added = Counter(c.op.text for c in commits if isinstance(c.op, AddPending))
    assert max(added.values()) == 1, "a pending item was added twice"
    done = {item.text for item in replayed.done}
    assert not done & {item.text for item in replayed.pending}, "a completed item came back as pending"
    acked = {(c.author, c.key): c.revision for c in commits}
    for agent in AGENTS:
        for answer in json.loads((tmp_path / f"{agent}.acks.json").read_text()):
            if answer["status"] == "committed":
                assert acked[(agent, answer["key"])] == answer["revision"], f"acked {answer} not in the log"

    with anyio.fail_after(90):
        while not all((tmp_path / f"{a}.hash").exists() for a in workers):
            await anyio.sleep(0.2)
    readers = {agent: json.loads((tmp_path / f"{agent}.hash").read_text())["hash"] for agent in AGENTS}
    readers["joiner from the snapshot"] = brief_hash(joined)
    show = subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "brief", "show", "--json", "-d", str(DOMAIN), "--nats", url],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    readers["ctxbus brief show"] = json.loads(show.stdout)["hash"]
    assert set(readers.values()) == {brief_hash(replayed)}, readers

    for proc in workers.values():
        assert proc.wait(timeout=30) == 0
    for i, proc in enumerate(coordinators):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        text = (tmp_path / f"c{i}.log").read_text()
        assert " ERROR " not in text and "Traceback" not in text, text[-3000:]
