"""One OS process racing for Channel 2 deliveries, crashing on purpose (test helper).

Run by `_c2_race` as ``python -m tests.nudges._c2_worker ...``. Every
worker walks the same cycles in the same order against one NATS server and delivers
through `Channel2Lease`. The "host" is a transcript file shared by all workers and
opened with O_APPEND: delivering appends one line, and `already_delivered` looks the
directive id up in it, as a real host would look in its conversation.

Crashes are `os._exit(CRASH_EXIT)` at the four windows of the protocol, each logged
first to the crash file:

- ``before_claim``: the cycle was armed (pending), the claim not attempted;
- ``after_claim``: the claim is ours, nothing sent (the first host call after a claim
  is `already_delivered`; the lease also asks it about a delivered cycle, whose line
  the transcript then already holds);
- ``after_send``: the transcript has the line, the lease does not say delivered;
- ``before_confirm``: the lease says delivered, the worker has not noted the cycle.

A worker notes finished cycles in the confirmed file (the stand-in for the agent's own
`NudgeState`), so a restarted worker skips them.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import deque
from pathlib import Path
from typing import Final

import anyio

from ctxbus.agents.nudges import (
    Channel2Lease,
    Channel2LeaseConfig,
    DeliveryOutcome,
    DirectiveState,
    SyntheticMessage,
)
from ctxbus.bus import BusConfig, BusError, Leases, connect, run_async
from ctxbus.schemas import Domain

CRASH_EXIT: Final = 17
CRASH_KINDS: Final = ("before_claim", "after_claim", "after_send", "before_confirm")
RETRY_PAUSE: Final = 0.25
"""Seconds before a worker looks again at a cycle it found busy or failed to send."""


def append_line(path: Path, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from many processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class Crasher:
    """Decides where this process dies: one forced kind (if any), then at random."""

    def __init__(self, path: Path, *, rate: float, forced: str | None, forced_after: int, rng: random.Random) -> None:
        self._path = path
        self._rate = rate
        self._forced = forced
        self._forced_after = forced_after
        self._rng = rng

    def wants(self, kind: str) -> bool:
        if kind == self._forced:
            if self._forced_after <= 0:
                return True
            self._forced_after -= 1
        return self._rng.random() < self._rate

    def maybe(self, kind: str, ref: str) -> None:
        if self.wants(kind):
            self.crash(kind, ref)

    def crash(self, kind: str, ref: str) -> None:
        """Log `kind` and `ref` (the cycle's directive id), then die without any cleanup."""
        append_line(self._path, f"{kind} {ref} {os.getpid()} {time.time():.6f}")
        os._exit(CRASH_EXIT)


class TranscriptHost:
    """The host adapter: a transcript file shared by every worker."""

    def __init__(self, path: Path, crasher: Crasher, *, fail_rate: float, rng: random.Random) -> None:
        self._path = path
        self._crasher = crasher
        self._fail_rate = fail_rate
        self._rng = rng
        self._offset = 0
        self._seen: set[str] = set()

    async def deliver(self, message: SyntheticMessage) -> None:
        if self._rng.random() < self._fail_rate:
            raise ConnectionError("host refused the message")
        append_line(self._path, f"{message.directive_id} {message.cycle} {os.getpid()} {time.time():.6f}")
        self._crasher.maybe("after_send", message.directive_id)

    async def already_delivered(self, directive_id: str) -> bool:
        self._catch_up()
        if directive_id in self._seen:
            return True
        # Not sent yet, so this is right after a claim was won: the "after claim" window.
        self._crasher.maybe("after_claim", directive_id)
        return False

    def _catch_up(self) -> None:
        with open(self._path, "rb") as transcript:
            transcript.seek(self._offset)
            chunk = transcript.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        self._seen.update(line.split(b" ", 1)[0].decode() for line in complete.splitlines())


def confirmed_cycles(path: Path) -> set[int]:
    if not path.exists():
        return set()
    return {int(line) for line in path.read_text().split()}


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    crasher = Crasher(
        Path(args.crashes), rate=args.crash_rate, forced=args.forced or None, forced_after=args.forced_after, rng=rng
    )
    transcript = Path(args.transcript)
    transcript.touch()
    host = TranscriptHost(transcript, crasher, fail_rate=args.fail_rate, rng=rng)
    confirmed = Path(args.confirmed)
    done = confirmed_cycles(confirmed)
    todo = deque(cycle for cycle in range(args.cycles) if cycle not in done)

    client = await connect(BusConfig(servers=[args.url]))
    lease = Channel2Lease(
        Leases(client),
        host,
        domain=Domain.parse(args.domain),
        agent_id=args.agent,
        config=Channel2LeaseConfig(claim_ttl=args.ttl),
    )
    retry: deque[tuple[float, int]] = deque()  # (not before, cycle), in time order
    while todo or retry:
        if retry and (not todo or retry[0][0] <= time.monotonic()):
            not_before, cycle = retry.popleft()
            await anyio.sleep(max(0.0, not_before - time.monotonic()))
        else:
            cycle = todo.popleft()
        try:
            if crasher.wants("before_claim") and (await lease.arm(cycle)).state is DirectiveState.PENDING:
                crasher.crash("before_claim", lease.directive_id(cycle))
            delivery = await lease.deliver(cycle, text=f"please prune (cycle {cycle})")
        except BusError:
            delivery = None
        if delivery is not None and delivery.done:
            if delivery.outcome is not DeliveryOutcome.ALREADY:  # this call wrote delivered
                crasher.maybe("before_confirm", delivery.directive_id)
            append_line(confirmed, str(cycle))
        else:
            # Someone holds the claim (or the host refused): look again a little later.
            retry.append((time.monotonic() + RETRY_PAUSE, cycle))
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--cycles", type=int, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--transcript", required=True)
    parser.add_argument("--confirmed", required=True)
    parser.add_argument("--crashes", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crash-rate", type=float, default=0.0)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--forced", choices=("", *CRASH_KINDS), default="")
    parser.add_argument("--forced-after", type=int, default=0)
    run_async(run, parser.parse_args())


if __name__ == "__main__":
    main()
