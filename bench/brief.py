"""Shared-brief latency and throughput against raw NATS, in one run on the embedded server.

    python bench/brief.py [--ops 2000] [--seconds 3] [--agents 8] [--signed]

Coordinators and agents run in their own processes, as in production. Prints
propose -> committed latency with 1 and 2 coordinators; commit -> applied at all of 8
agents, or of `--agents` (from the moment the log stored the commit, by the server's
clock, to the last agent applying it); commits/s per domain under 32 concurrent
proposers; and in the same run raw JetStream publish+ack, raw request/reply to another
process, raw fan-out to the same agent processes (publish to the last receipt) and raw
stored fan-out (store to the last receipt), with the ratios. A proposal is a
request/reply around a publish+ack, so their sum is the floor of the commit ratio;
stored fan-out is the floor of propagation. Each raw baseline alternates with what it
is compared to, op by op, so that the drift of a shared machine hits both alike.
Targets: commit median <= 2.5x publish+ack; propagation median <= 1.5x fan-out;
>= 2,000 commits/s per domain.

With `--signed`, everything is as with `ctxbus auth`'s keys: coordinators sign every log
entry with their tenant's key and agents check the entries (the server itself checks no
one here, so the figures are signing's cost alone).

Signing's cost is also measured in every run, alternating: two servers, one with a
coordinator that signs its log entries, one with a coordinator that does not; proposals go to one and then the other, op by op (the order switching
each round), so the drift of a shared machine hits both alike. Signing stays if it adds
under 10 % to the commit median.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import anyio.to_thread
from nats.js.api import RePublish, StreamConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _propagation_worker import RAW_DONE, RAW_SUBJECT, STORED_LIVE, STORED_SUBJECT  # noqa: E402
from _stats import ratio, summary  # noqa: E402

from ctxbus.agents.brief import Proposer  # noqa: E402
from ctxbus.bus import (  # noqa: E402
    AuthStore,
    BriefLog,
    BriefState,
    BusConfig,
    Credentials,
    EmbeddedServer,
    NatsClient,
    Role,
    Signer,
    Verifier,
    connect,
    run_async,
)
from ctxbus.schemas import AddNote, AddPending, BriefOp, Commit, Committed, Complete, Domain, Proposal, apply  # noqa: E402

FANOUT = 8
"""Agent processes of the propagation figures, unless `--agents` says otherwise."""
_PACE = 0.004
"""Seconds between messages of the propagation figures."""


def _domain() -> Domain:
    return Domain.parse(f"bench/s/{uuid.uuid4().hex[:10]}")


class _Keys:
    """With `--signed`: the tenant's coordinator and agent credentials, in a temp dir."""

    def __init__(self, directory: Path) -> None:
        store = AuthStore.init(directory)
        store.add_tenant("bench")
        self.coordinator = store.add_principal("bench", "coordinator", Role.COORDINATOR)
        self.agent = store.add_principal("bench", "bench", Role.AGENT)
        creds = Credentials.load(self.agent)
        self.verifier = Verifier(creds.trusted_signers)
        seed = Credentials.load(self.coordinator).signing_seed
        assert seed is not None
        self.signer = Signer(seed)


class _RawPublisher:
    """Raw JetStream publish+ack, one at a time, between our own operations."""

    def __init__(self, client: NatsClient) -> None:
        self._js = client.jetstream()
        self._count = 0

    async def ensure(self) -> None:
        await self._js.add_stream(StreamConfig(name="RAWB", subjects=["rawb.js"]))

    async def timed(self) -> float:
        self._count += 1
        t0 = time.perf_counter()
        await self._js.publish("rawb.js", b"x" * 300, headers={"Nats-Msg-Id": f"r{self._count}"})
        return time.perf_counter() - t0


async def _propagation(
    client: NatsClient, url: str, ops: int, agents: int, keys: _Keys | None
) -> tuple[list[float], list[float], list[float]]:
    """Raw fan-out, raw stored fan-out and commit -> applied, to the same `agents` processes.

    Each is timed from its origin to the last of the agents: a raw message from the
    publish time it carries, a stored message and a commit from the time their stream
    stored them. Messages are paced, so each figure is the latency of one message, not of
    a queue. Stored fan-out shows what storing costs before anyone hears of a message
    (with `sync_interval: always`, an fsync), the part of propagation that is not ours.
    """
    domain = _domain()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "_propagation_worker.py"),
                url,
                str(domain),
                str(ops),
                *([str(keys.agent)] if keys else []),
            ],  # fmt: skip
            stdout=subprocess.PIPE,
        )
        for _ in range(agents)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            worker.stdout.readline()  # "ready"
        await anyio.sleep(1.0)  # each worker is following the log by now
        await _send_paced(client, domain, ops, None if keys is None else keys.signer)
        reports = []
        for worker in workers:
            out, _ = await anyio.to_thread.run_sync(worker.communicate)
            reports.append(json.loads(out.splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    received = min(len(r["raw"]) for r in reports)
    fan = [max(r["raw"][i] for r in reports) for i in range(received)]
    stored = [max(r["stored"][i] for r in reports) for i in range(min(len(r["stored"]) for r in reports))]
    heard = set.intersection(*(set(r["brief"]) for r in reports))
    prop = [max(r["brief"][seq] for r in reports) for seq in heard]
    if received < ops or len(heard) < ops:
        print(f"  (not every agent saw everything: {received} raw messages, {len(heard)} commits of {ops})")
    return fan, stored, prop


async def _send_paced(client: NatsClient, domain: Domain, ops: int, signer: Signer | None) -> None:
    """`ops` rounds, one every `_PACE`: a raw message, a stored one, a commit."""
    padding = b"x" * 292
    js = client.jetstream()
    republish = RePublish(src=STORED_SUBJECT, dest=STORED_LIVE)
    await js.add_stream(StreamConfig(name="RAWS", subjects=[STORED_SUBJECT], republish=republish))
    log = BriefLog(client, signer=signer)
    state = await log.load(domain)
    for i in range(ops):
        await client.publish(RAW_SUBJECT, struct.pack("d", time.time()) + padding)
        await anyio.sleep(_PACE / 3)
        await js.publish(STORED_SUBJECT, padding)
        await anyio.sleep(_PACE / 3)
        proposal = Proposal(
            domain=domain, author="bench", op=AddNote(text=f"p{i}"), key=f"p{i}", deadline=time.time() + 60
        )
        commit = Commit.of(proposal, revision=state.brief.revision + 1, ts=time.time(), committed_by="bench")
        seq = await log.append(state, [commit], sender="bench")
        state = BriefState(apply(state.brief, commit), seq)
        await anyio.sleep(_PACE / 3)
    await client.publish(RAW_SUBJECT, RAW_DONE)
    await js.publish(STORED_SUBJECT, RAW_DONE)


class _Worker:
    """Proposes a realistic mix: add a pending item, then complete it with an outcome.

    Pending items come and go, so duplicate checks stay cheap; done items pile up until
    the coordinators (`ctxbus coordinator`, with its default brief budget) fold them, as
    in production.
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


class _RawRequester:
    """Raw request/reply to another process that answers at once (`_echo_worker.py`)."""

    SUBJECT = "rawb.echo"

    def __init__(self, client: NatsClient, url: str) -> None:
        self._client = client
        self._echo = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "_echo_worker.py"), url, self.SUBJECT], stdout=subprocess.PIPE
        )
        assert self._echo.stdout is not None
        self._echo.stdout.readline()  # "ready"

    async def timed(self) -> float:
        t0 = time.perf_counter()
        await self._client.request(self.SUBJECT, b"x" * 300, timeout=5)
        return time.perf_counter() - t0

    def close(self) -> None:
        self._echo.terminate()
        self._echo.wait()


async def _latency(proposer: Proposer, raw: _RawPublisher, ops: int) -> tuple[list[float], list[float]]:
    """Propose -> committed, and raw publish+ack alternating with it op by op."""
    worker = _Worker(proposer)
    ours, baseline = [], []
    for _ in range(ops):
        baseline.append(await raw.timed())
        t0 = time.perf_counter()
        await worker.step()
        ours.append(time.perf_counter() - t0)
    return ours, baseline


async def _commit_floor(client: NatsClient, url: str, raw: _RawPublisher, ops: int) -> tuple[list[float], list[float]]:
    """Raw request/reply to another process, and raw publish+ack alternating with it.

    A proposal is a request/reply around a publish+ack, so their sum is the floor of the
    commit ratio. Measured in a phase of its own: a third process woken between ours and
    its baseline would cool the caches of both and shift the ratio it is meant to explain.
    """
    requester = _RawRequester(client, url)
    requested, published = [], []
    try:
        for _ in range(ops):
            published.append(await raw.timed())
            requested.append(await requester.timed())
    finally:
        requester.close()
    return requested, published


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


def _start_coordinator(url: str, index: int, keys: _Keys | None) -> subprocess.Popen[bytes]:
    """A coordinator in its own process, as in production; returns once it serves."""
    signing = ["--credentials", str(keys.coordinator)] if keys else []
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxbus.coordinator.cli",
            *signing,
            "coordinator",
            "--nats",
            url,
            "--id",
            f"bench-c{index}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "coordinator ... serving ..."
    return proc


async def _signing_cost(ops: int, keys: _Keys) -> tuple[list[float], list[float]]:
    """Propose -> committed with a signing coordinator and with one that does not sign,
    alternating op by op, each on a server of its own (so neither takes the other's
    proposals from the queue group)."""
    async with EmbeddedServer() as plain_server, EmbeddedServer() as signed_server:
        clients, coordinators, workers = [], [], []
        try:
            for server, signing in ((plain_server, None), (signed_server, keys)):
                client = await connect(BusConfig(servers=[server.url]))
                clients.append(client)
                await BriefLog(client).ensure()
                coordinators.append(_start_coordinator(server.url, 0, signing))
                workers.append(_Worker(Proposer(client, _domain(), agent_id="bench")))
            for worker in workers:  # warm up: the first commits of a domain set it up
                for _ in range(20):
                    await worker.step()
            times: tuple[list[float], list[float]] = ([], [])
            for i in range(ops):
                for which in (0, 1) if i % 2 == 0 else (1, 0):
                    t0 = time.perf_counter()
                    await workers[which].step()
                    times[which].append(time.perf_counter() - t0)
            return times
        finally:
            for client in clients:
                await client.close()
            for proc in coordinators:
                proc.terminate()
                proc.wait()


async def run(ops: int, seconds: float, agents: int, signed: bool) -> None:
    with tempfile.TemporaryDirectory() as temp:
        keys = _Keys(Path(temp) / "auth")
        await _run(ops, seconds, agents, keys if signed else None)
        plain, signed_times = await _signing_cost(ops, keys)
    print("\nsigning's cost (alternating op by op, one coordinator each)")
    plain_med, _ = summary("propose -> committed, unsigned", plain)
    signed_med, _ = summary("propose -> committed, entries signed", signed_times)
    ratio("signed / unsigned commit", signed_med, plain_med, 1.10)


async def _run(ops: int, seconds: float, agents: int, keys: _Keys | None) -> None:
    async with EmbeddedServer() as server:
        url = server.url
        signed = "; every entry signed and checked" if keys else ""
        print(f"nats-server at {url} (sync_interval: {server.sync_interval}); {ops} ops per latency figure{signed}")
        client = await connect(BusConfig(servers=[url]))
        await BriefLog(client).ensure()
        raw = _RawPublisher(client)
        await raw.ensure()
        raw_fan, raw_stored, propagation = await _propagation(client, url, ops, agents, keys)

        coordinators = [_start_coordinator(url, 0, keys)]
        one, raw_one = await _latency(Proposer(client, _domain(), agent_id="bench"), raw, ops)
        coordinators.append(_start_coordinator(url, 1, keys))
        two, raw_two = await _latency(Proposer(client, _domain(), agent_id="bench"), raw, ops)
        requested, raw_floor = await _commit_floor(client, url, raw, ops)
        rate = await _throughput(client, seconds)
        await client.close()
        for proc in coordinators:
            proc.terminate()
            proc.wait()

    print("\nraw NATS baselines (each measured alternating with what it is compared to)")
    pub_one, _ = summary("JetStream publish+ack (with 1)", raw_one)
    pub_two, _ = summary("JetStream publish+ack (with 2)", raw_two)
    rr_med, _ = summary("request/reply to another process", requested)
    floor_pub, _ = summary("JetStream publish+ack (with it)", raw_floor)
    fan_med, _ = summary(f"fan-out to {agents} agent processes", raw_fan)
    stored_med, _ = summary("same, stored first (store -> all)", raw_stored)
    print("\nshared brief")
    one_med, _ = summary("propose -> committed, 1 coordinator", one)
    two_med, _ = summary("propose -> committed, 2 coordinators", two)
    prop_med, _ = summary(f"commit stored -> applied, all {agents}", propagation)
    print(
        f"  {'commits/s, one domain, 32 proposers':<34} {rate:8.0f}   (target >= 2,000: {'met' if rate >= 2000 else 'MISSED'})"
    )
    print("\nratios, ours / raw (medians)")
    ratio("commit (1 coord) / publish+ack", one_med, pub_one, 2.5)
    ratio("commit (2 coords) / publish+ack", two_med, pub_two, 2.5)
    ratio("  floor: request/reply + publish+ack", rr_med + floor_pub, floor_pub)
    ratio(f"propagation / fan-out to {agents}", prop_med, fan_med, 1.5)
    ratio("  floor: stored fan-out", stored_med, fan_med)
    ratio("propagation / stored fan-out", prop_med, stored_med)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000, help="operations per latency figure (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput measurement time (default: %(default)s)")
    parser.add_argument(
        "--agents",
        type=int,
        default=FANOUT,
        help="agent processes of the propagation figures; the targets are for %(default)s (default: %(default)s)",
    )
    parser.add_argument(
        "--signed", action="store_true", help="sign every log entry and answer, and check them (ctxbus auth's keys)"
    )
    args = parser.parse_args()
    if args.agents < 1 or args.ops < 1 or args.seconds <= 0:
        parser.error("--agents and --ops must be at least 1, --seconds more than 0")
    run_async(run, args.ops, args.seconds, args.agents, args.signed)


if __name__ == "__main__":
    main()
