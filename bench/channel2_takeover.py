"""How soon a Channel 2 cycle whose sender died holding its claim is sent by another process.

    python bench/channel2_takeover.py [--runs 3] [--expiries 5]

Runs the crash race of tests/nudges/test_channel2_processes.py (8 worker processes over
1,000 cycles, 1 s claim TTL, crashes in every window of the protocol) on the embedded
server, --runs times, and prints the takeover lag: from a worker's crash right after
winning a claim to the send of that cycle by another worker (wall clock, as the workers
logged them). Baseline, on the same server and alternating with the races: how long a
dead 1 s claim takes to vanish (written, then read every 10 ms until absent), the floor
of the lag. The rest is how soon a live worker comes back to the cycle: workers retry a
busy cycle every 0.25 s, and a crashed worker's restart is slow on a loaded machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # the race and its worker live with the tests

from _stats import ratio, summary  # noqa: E402

from ctxbus.bus import BusConfig, EmbeddedServer, Leases, connect, run_async  # noqa: E402
from ctxbus.schemas import LeaseRecord  # noqa: E402
from tests.nudges._c2_race import CLAIM_TTL, CYCLES, WORKERS, Run, takeover_lags  # noqa: E402

RACE_DEADLINE = 600.0
"""Seconds one race may take before the bench gives up on it."""
POLL = 0.01


async def expiry(leases: Leases) -> float:
    """Seconds from writing a claim with the race's TTL until reads find it gone."""
    key = f"bench.takeover.{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    await leases.claim(key, "dead", CLAIM_TTL, record=LeaseRecord(holder="dead", state="claimed", token="t0"))
    while await leases.read(key) is not None:
        await anyio.sleep(POLL)
    return time.monotonic() - started


async def run(runs: int, expiries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ctxbus-takeover-") as scratch:
        async with EmbeddedServer(Path(scratch) / "nats") as server:
            client = await connect(BusConfig(servers=[server.url]))
            leases = Leases(client)
            await leases.ensure()
            print(f"nats-server at {server.url}; {runs} races of {WORKERS} workers over {CYCLES} cycles")
            floors: list[float] = []
            lags: list[float] = []
            for index in range(runs):
                floors += [await expiry(leases) for _ in range(expiries)]
                root = Path(scratch) / f"race-{index}"
                root.mkdir()
                race = Run(root, server.url, f"u/s/{uuid.uuid4().hex[:8]}")
                started = time.monotonic()
                finished = await race.supervise(RACE_DEADLINE)
                these = takeover_lags(race)
                lags += these
                state = "" if finished else f"  NOT FINISHED after {RACE_DEADLINE:g} s"
                print(
                    f"  race {index + 1}: {time.monotonic() - started:5.1f} s, {race.restarts} restarts, "
                    f"{len(these)} after-claim crashes, max lag {max(these, default=0):.2f} s{state}"
                )
            await client.close()
    if not lags:
        print("no crash right after a claim in these races: nothing to report")
        return
    floor_median, _ = summary("dead claim gone (baseline)", floors)
    lag_median, _ = summary("after-claim takeover lag", lags)
    print(f"  {'max takeover lag':<34} {max(lags):7.2f} s")
    ratio("takeover lag / dead claim gone", lag_median, floor_median)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="races to run (default: %(default)s)")
    parser.add_argument("--expiries", type=int, default=5, help="baseline samples before each race (%(default)s)")
    args = parser.parse_args()
    run_async(run, args.runs, args.expiries)


if __name__ == "__main__":
    main()
