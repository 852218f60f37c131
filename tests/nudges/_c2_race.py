"""Eight `_c2_worker` processes racing over one agent's cycles, crashing on purpose.

Shared by `test_channel2_processes.py`, which checks what the race leaves behind, and
`bench/channel2_takeover.py`, which times how soon a dead claim's cycle is sent.
Workers die with `os._exit` in each window of the protocol (before the claim, after
the claim, after the send, before the confirm) and the host refuses some sends; the
supervisor restarts every dead worker until all cycles are done. Claims use a 1 s TTL,
so a claim left by a dead worker is taken over soon after.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ctxbus.agents.nudges import directive_id
from ctxbus.schemas import Domain
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

    def directive_ids(self) -> dict[str, int]:
        """Cycle of each directive id the race may send."""
        return {directive_id(Domain.parse(self.domain), self.agent, cycle): cycle for cycle in range(CYCLES)}

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

    async def supervise(self, deadline: float) -> bool:
        """Restart crashed workers until every worker finished; False after `deadline` seconds."""
        generations = dict.fromkeys(range(WORKERS), 0)
        running = {slot: self.spawn(slot, 0) for slot in range(WORKERS)}
        give_up = time.monotonic() + deadline
        try:
            while running and time.monotonic() < give_up:
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


def lines(path: Path) -> list[list[str]]:
    """The whitespace-split lines of one of the shared logs (none if it was never written)."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def takeover_lags(run: Run) -> list[float]:
    """Seconds from each crash right after a claim to the send of that cycle (wall clock,
    as the workers logged them): the claim TTL, plus how soon a live worker came back."""
    sent_at = {fields[0]: float(fields[3]) for fields in lines(run.transcript)}
    return [
        sent_at[ref] - float(at) for kind, ref, _, at in lines(run.crashes) if kind == "after_claim" and ref in sent_at
    ]
