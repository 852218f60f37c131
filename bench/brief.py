"""Shared-brief latency and throughput against raw NATS, in one run on the embedded server.

    python bench/brief.py [--ops 2000] [--seconds 3]

Coordinators and the 8 agents run in their own processes, as in production. Prints
propose -> committed latency with 1 and 2 coordinators, commit -> applied at all of 8
agents (from the moment the log stored the commit, by the server's clock, to the last
agent applying it), commits/s per domain under concurrent proposers, and in the same
run raw JetStream publish+ack and raw fan-out to the same 8 agent processes (from
publish to the last receipt), with the ratios.
Targets: commit median <= 2.5x publish+ack; propagation median <= 1.5x fan-out;
>= 2,000 commits/s per domain.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import anyio.to_thread
from nats.js.api import StreamConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _propagation_worker import RAW_DONE, RAW_SUBJECT  # noqa: E402
from _stats import ratio, summary  # noqa: E402

from agents.brief import Proposer  # noqa: E402
from bus import BriefLog, BriefState, BusConfig, EmbeddedServer, NatsClient, connect  # noqa: E402
from schemas import AddNote, AddPending, BriefOp, Commit, Committed, Complete, Domain, Proposal, apply  # noqa: E402

FANOUT = 8
_PACE = 0.004
"""Seconds between messages of the propagation figures."""


def _domain() -> Domain:
    return Domain.parse(f"bench/s/{uuid.uuid4().hex[:10]}")


async def _raw_publish(url: str, ops: int) -> list[float]:
    nc = await connect(BusConfig(servers=[url]))
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="RAWB", subjects=["rawb.js"]))
    pub: list[float] = []
    for i in range(ops):
        t0 = time.perf_counter()
        await js.publish("rawb.js", b"x" * 300, headers={"Nats-Msg-Id": f"r{i}"})
        pub.append(time.perf_counter() - t0)
    await nc.close()
    return pub


async def _propagation(client: NatsClient, url: str, ops: int) -> tuple[list[float], list[float]]:
    """Raw fan-out and commit -> applied, both to the same 8 agent processes.

    Both are timed from their origin to the last of the 8 agents: a raw message from the
    publish time it carries, a commit from the time the log stored it. Messages are
    paced, so each figure is the latency of one message, not of a queue.
    """
    domain = _domain()
    workers = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "_propagation_worker.py"), url, str(domain), str(ops)],
            stdout=subprocess.PIPE,
        )
        for _ in range(FANOUT)
    ]
    for worker in workers:
        assert worker.stdout is not None
        worker.stdout.readline()  # "ready"
    await anyio.sleep(1.0)  # each worker is following the log by now
    padding = b"x" * 292
    for _ in range(ops):
        await client.publish(RAW_SUBJECT, struct.pack("d", time.time()) + padding)
        await anyio.sleep(_PACE)
    await client.publish(RAW_SUBJECT, RAW_DONE)
    log = BriefLog(client)
    state = await log.load(domain)
    for i in range(ops):
        proposal = Proposal(domain=domain, author="bench", op=AddNote(text=f"p{i}"), key=f"p{i}")
        commit = Commit.of(proposal, revision=state.brief.revision + 1, ts=time.time(), committed_by="bench")
        seq = await log.append(state, [commit], sender="bench")
        state = BriefState(apply(state.brief, commit), seq)
        await anyio.sleep(_PACE)
    reports = []
    for worker in workers:
        out, _ = await anyio.to_thread.run_sync(worker.communicate)
        reports.append(json.loads(out.splitlines()[-1]))
    received = min(len(r["raw"]) for r in reports)
    fan = [max(r["raw"][i] for r in reports) for i in range(received)]
    heard = set.intersection(*(set(r["brief"]) for r in reports))
    prop = [max(r["brief"][seq] for r in reports) for seq in heard]
    if received < ops or len(heard) < ops:
        print(f"  (not every agent saw everything: {received} raw messages, {len(heard)} commits of {ops})")
    return fan, prop


class _Worker:
    """Proposes a realistic mix: add a pending item, then complete it with an outcome.

    Pending items come and go, so duplicate checks stay cheap; done items pile up (the
    coordinators run without a token budget, so nothing is folded), which makes every
    snapshot bigger as a run goes on.
    """

    def __init__(self, proposer: Proposer) -> None:
        self._proposer = proposer
        self._open: str | None = None
        self._i = 0

    async def step(self) -> None:
        self._i += 1
        if self._open is None:
            op: BriefOp = AddPending(text=f"{self._proposer.agent_id} task {self._i}")
        else:
            op = Complete(item_id=self._open, outcome=f"done in {self._i} steps")
        reply = await self._proposer.propose(op)
        assert isinstance(reply, Committed), reply
        self._open = f"p{reply.revision}" if self._open is None else None


async def _latency(proposer: Proposer, ops: int) -> list[float]:
    worker = _Worker(proposer)
    samples = []
    for _ in range(ops):
        t0 = time.perf_counter()
        await worker.step()
        samples.append(time.perf_counter() - t0)
    return samples


async def _throughput(client: NatsClient, seconds: float, proposers: int = 32) -> float:
    """Commits per second on one domain, with `proposers` proposing at once."""
    busy = _domain()
    committed = 0

    async def hammer(agent: str) -> None:
        nonlocal committed
        worker = _Worker(Proposer(client, busy, agent_id=agent))
        while True:
            await worker.step()
            committed += 1

    async with anyio.create_task_group() as load:
        for n in range(proposers):
            load.start_soon(hammer, f"h{n}")
        await anyio.sleep(1.0)  # warm up
        start_count, t0 = committed, time.perf_counter()
        await anyio.sleep(seconds)
        rate = (committed - start_count) / (time.perf_counter() - t0)
        load.cancel_scope.cancel()
    return rate


def _start_coordinator(url: str, index: int) -> subprocess.Popen[bytes]:
    """A coordinator in its own process, as in production; returns once it serves."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "coordinator", "--nats", url, "--id", f"bench-c{index}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "coordinator ... serving ..."
    return proc


async def run(ops: int, seconds: float) -> None:
    async with EmbeddedServer() as server:
        url = server.url
        print(f"nats-server at {url} (sync_interval: {server.sync_interval}); {ops} ops per latency figure")
        raw_pub = await _raw_publish(url, ops)
        client = await connect(BusConfig(servers=[url]))
        await BriefLog(client).ensure()
        raw_fan, propagation = await _propagation(client, url, ops)

        coordinators = [_start_coordinator(url, 0)]
        one = await _latency(Proposer(client, _domain(), agent_id="bench"), ops)
        coordinators.append(_start_coordinator(url, 1))
        two = await _latency(Proposer(client, _domain(), agent_id="bench"), ops)
        rate = await _throughput(client, seconds)
        await client.close()
        for proc in coordinators:
            proc.terminate()
            proc.wait()

    print("\nraw NATS baselines")
    pub_med, _ = summary("JetStream publish+ack", raw_pub)
    fan_med, _ = summary(f"fan-out to {FANOUT} agent processes", raw_fan)
    print("\nshared brief")
    one_med, _ = summary("propose -> committed, 1 coordinator", one)
    two_med, _ = summary("propose -> committed, 2 coordinators", two)
    prop_med, _ = summary(f"commit stored -> applied, all {FANOUT}", propagation)
    print(
        f"  {'commits/s, one domain, 32 proposers':<34} {rate:8.0f}   (target >= 2,000: {'met' if rate >= 2000 else 'MISSED'})"
    )
    print("\nratios, ours / raw (medians)")
    ratio("commit (1 coord) / publish+ack", one_med, pub_med, 2.5)
    ratio("commit (2 coords) / publish+ack", two_med, pub_med, 2.5)
    ratio(f"propagation / fan-out to {FANOUT}", prop_med, fan_med, 1.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000, help="operations per latency figure (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput measurement time (default: %(default)s)")
    args = parser.parse_args()
    anyio.run(run, args.ops, args.seconds)


if __name__ == "__main__":
    main()
