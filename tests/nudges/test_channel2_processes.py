"""Channel 2 across OS processes on a real NATS server, with crashes injected.

Eight worker processes (`_c2_worker`) race over the same 1,000 cycles of one agent.
They die with `os._exit` in each window of the protocol (before the claim, after the
claim, after the send, before the confirm) and the host refuses some sends; a
supervisor restarts every dead worker until all cycles are done. Afterwards the shared
transcript must hold exactly one message per cycle and every lease must say
delivered. Claims use a 1 s TTL, so a claim left by a dead worker is taken over
within the test.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from nats.aio.client import Client

from agents.nudges import Channel2Lease, DirectiveState, directive_id
from bus import BusConfig, EmbeddedServer, Leases, connect
from schemas import Domain
from tests.nudges._c2_worker import CRASH_EXIT, CRASH_KINDS

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8
CYCLES = 1_000
CLAIM_TTL = 1.0
CRASH_RATE = 0.005
"""Chance of dying at each window a worker passes: some 20-30 crashes a run, on top of
one forced crash per first-generation worker (two of each kind)."""
FAIL_RATE = 0.02
"""Chance that the host refuses a send (the cycle goes back to pending)."""
FORCED_AFTER = 15
"""A first-generation worker dies at its assigned window after passing it this often."""
DEADLINE = 85.0
"""Seconds the supervisor waits for all cycles; the test fails if they are not done."""
TAKEOVER_SLACK = 15.0
"""Seconds beyond the claim TTL a dead claim may hold up its cycle: the takeover waits for
a worker to come back to the cycle, and restarts are slow on a loaded 2-core box."""


@dataclass
class Run:
    """The files shared by the workers, and what the supervisor saw."""

    root: Path
    url: str
    domain: str
    agent: str = "agent-1"
    restarts: int = 0
    exits: Counter[int] = field(default_factory=Counter)

    @property
    def transcript(self) -> Path:
        return self.root / "transcript.log"

    @property
    def crashes(self) -> Path:
        return self.root / "crashes.log"

    @property
    def confirmed(self) -> Path:
        return self.root / "confirmed.log"

    def spawn(self, slot: int, generation: int) -> subprocess.Popen[bytes]:
        forced = CRASH_KINDS[slot % len(CRASH_KINDS)] if generation == 0 else ""
        command = [
            sys.executable, "-m", "tests.nudges._c2_worker",
            "--url", self.url, "--domain", self.domain, "--agent", self.agent,
            "--cycles", str(CYCLES), "--ttl", str(CLAIM_TTL),
            "--transcript", str(self.transcript), "--confirmed", str(self.confirmed),
            "--crashes", str(self.crashes), "--seed", str(slot * 1_000 + generation),
            "--crash-rate", str(CRASH_RATE), "--fail-rate", str(FAIL_RATE),
            "--forced", forced, "--forced-after", str(FORCED_AFTER),
        ]  # fmt: skip
        with open(self.root / f"worker-{slot}-{generation}.err", "wb") as log:
            return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)

    async def supervise(self) -> bool:
        """Restart crashed workers until every worker finished; False on timeout."""
        generations = dict.fromkeys(range(WORKERS), 0)
        running = {slot: self.spawn(slot, 0) for slot in range(WORKERS)}
        deadline = time.monotonic() + DEADLINE
        try:
            while running and time.monotonic() < deadline:
                for slot, process in list(running.items()):
                    code = process.poll()
                    if code is None:
                        continue
                    self.exits[code] += 1
                    del running[slot]
                    if code == CRASH_EXIT:
                        self.restarts += 1
                        generations[slot] += 1
                        running[slot] = self.spawn(slot, generations[slot])
                    else:
                        assert code == 0, (self.root / f"worker-{slot}-{generations[slot]}.err").read_text()
                await anyio.sleep(0.05)
        finally:
            for process in running.values():
                process.kill()
                process.wait()
        return not running


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def test_eight_processes_race_over_a_thousand_cycles_with_crashes(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    client: Client = await connect(BusConfig(servers=[server.url]))
    leases = Leases(client)
    await leases.ensure()
    domain = f"u/s/{uuid.uuid4().hex[:8]}"
    run = Run(tmp_path, server.url, domain)
    started = time.monotonic()

    finished = await run.supervise()

    elapsed = time.monotonic() - started
    transcript = _lines(run.transcript)
    crashes = _lines(run.crashes)
    sends = Counter(fields[0] for fields in transcript)
    ids = {directive_id(Domain.parse(domain), run.agent, cycle): cycle for cycle in range(CYCLES)}
    print(
        f"\n{CYCLES} cycles, {WORKERS} workers, {elapsed:.1f} s, {run.restarts} restarts, "
        f"crashes {dict(Counter(fields[0] for fields in crashes))}, exits {dict(run.exits)}"
    )
    assert finished, f"not done after {DEADLINE} s: {len(sends)} of {CYCLES} cycles delivered"

    duplicates = {ids[d]: n for d, n in sends.items() if n > 1}
    assert duplicates == {}
    assert set(sends) == set(ids)
    assert len(transcript) == CYCLES

    lease = Channel2Lease(leases, _NoHost(), domain=Domain.parse(domain), agent_id=run.agent)
    states = Counter([(await lease.inspect(cycle)).state for cycle in range(CYCLES)])
    assert states == {DirectiveState.DELIVERED: CYCLES}

    kinds = Counter(fields[0] for fields in crashes)
    assert all(kinds[kind] >= 1 for kind in CRASH_KINDS), kinds
    # A sender that died after sending is never repeated: its cycle is recovered instead.
    for kind, ref, *_ in crashes:
        if kind == "after_send":
            view = await lease.inspect(ids[ref])
            assert view.record is not None and view.record.detail.get("by") == "recovered"

    # No cycle stays wedged by a dead claim: it is sent soon after the claim expires.
    sent_at = {fields[0]: float(fields[3]) for fields in transcript}
    lags = [sent_at[ref] - float(at) for kind, ref, _, at in crashes if kind == "after_claim"]
    print(f"after-claim takeover lag: max {max(lags):.2f} s over {len(lags)} crashes")
    assert max(lags) <= CLAIM_TTL + TAKEOVER_SLACK
    await client.close()


class _NoHost:
    async def deliver(self, message: object) -> None:
        raise AssertionError("the checker never sends")

    async def already_delivered(self, directive_id: str) -> bool:
        return False
