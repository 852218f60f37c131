"""Channel 2 across OS processes on a real NATS server, with crashes injected.

Eight worker processes (`_c2_worker`, run by `_c2_race`) race over the same 1,000
cycles of one agent, dying in each window of the protocol, and a supervisor restarts
every dead worker until all cycles are done. Afterwards the shared transcript must hold
exactly one message per cycle and every lease must say delivered. How soon a dead
claim's cycle is taken over is a figure, not a check: `bench/channel2_takeover.py`.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ctxbus.agents.nudges import Channel2Lease, DirectiveState
from ctxbus.bus import BusConfig, EmbeddedServer, Leases, connect
from ctxbus.schemas import Domain
from tests.nudges._c2_race import CYCLES, WORKERS, Run, lines, takeover_lags
from tests.nudges._c2_worker import CRASH_KINDS

HANG_GUARD = 240.0
"""Seconds the supervisor waits for all cycles before calling the race hung (it takes
some 10-20 s); under pytest's own 300 s timeout, so the workers are still cleaned up."""


async def test_eight_processes_race_over_a_thousand_cycles_with_crashes(
    nats_server_factory: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    server = nats_server_factory()
    client = await connect(BusConfig(servers=[server.url]))
    try:
        leases = Leases(client)
        await leases.ensure()
        domain = f"u/s/{uuid.uuid4().hex[:8]}"
        run = Run(tmp_path, server.url, domain)
        started = time.monotonic()

        finished = await run.supervise(HANG_GUARD)

        transcript = lines(run.transcript)
        crashes = lines(run.crashes)
        kinds = Counter(fields[0] for fields in crashes)
        sends = Counter(fields[0] for fields in transcript)
        ids = run.directive_ids()
        print(
            f"\n{CYCLES} cycles, {WORKERS} workers, {time.monotonic() - started:.1f} s, {run.restarts} restarts, "
            f"crashes {dict(kinds)}, exits {dict(run.exits)}"
        )
        assert finished, f"hung: {len(sends)} of {CYCLES} cycles delivered after {HANG_GUARD:g} s"

        duplicates = {ids[d]: n for d, n in sends.items() if n > 1}
        assert duplicates == {}
        assert set(sends) == set(ids)
        assert len(transcript) == CYCLES

        lease = Channel2Lease(leases, _NoHost(), domain=Domain.parse(domain), agent_id=run.agent)
        states = Counter([(await lease.inspect(cycle)).state for cycle in range(CYCLES)])
        assert states == {DirectiveState.DELIVERED: CYCLES}

        assert all(kinds[kind] >= 1 for kind in CRASH_KINDS), kinds
        # A sender that died after sending is never repeated: its cycle is recovered instead.
        for kind, ref, *_ in crashes:
            if kind == "after_send":
                view = await lease.inspect(ids[ref])
                assert view.record is not None and view.record.detail.get("by") == "recovered"

        # Every cycle whose claim died with its worker was still sent (once: checked above).
        lags = takeover_lags(run)
        assert len(lags) == kinds["after_claim"]
        print(f"after-claim takeover lag (a figure, see bench/channel2_takeover.py): max {max(lags):.2f} s")
    finally:
        await client.close()


class _NoHost:
    async def deliver(self, message: object) -> None:
        raise AssertionError("the checker never sends")

    async def already_delivered(self, directive_id: str) -> bool:
        return False
