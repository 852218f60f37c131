"""Who serves: coordinators' heartbeats, and their answers to a status request, as one view.

A coordinator writes a heartbeat every couple of seconds (`Coordinator._beat`), kept long
after it stops coming, and a last one saying so when it stops cleanly. With the status
answers, that tells a serving coordinator from one that stopped answering (frozen, or
killed: the two look alike from outside) and from one that stopped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from ctxbus.bus import COORDINATORS_BUCKET, STATUS_SUBJECT, Bucket, BucketConfig, BusError, NatsClient, gather
from ctxbus.schemas import CoordinatorPresence, CoordinatorStatus, WireError

__all__ = ["CoordinatorView", "ServingState", "survey"]

log = logging.getLogger(__name__)

STATUS_WAIT: Final = 1.0
"""Seconds to wait for status answers; less once every coordinator known to serve answered."""


class ServingState(StrEnum):
    SERVING = "serving"
    """It answered the status request."""
    NOT_ANSWERING = "not answering"
    """Its heartbeat is there but it did not answer: frozen, stuck, or killed."""
    STOPPED = "stopped"
    """It said so on its way out."""


@dataclass(frozen=True)
class CoordinatorView:
    """One coordinator as `ctxbus status` shows it."""

    coordinator: str
    state: ServingState
    status: CoordinatorStatus | None
    """Its answer, if it answered."""
    heartbeat: CoordinatorPresence | None
    """Its latest heartbeat, if one is kept (a coordinator of an earlier version has none)."""

    def silent_for(self, now: float) -> float | None:
        """Seconds since its last heartbeat, for one that does not answer."""
        return None if self.heartbeat is None else self.heartbeat.age(now)


async def survey(client: NatsClient, *, wait: float = STATUS_WAIT) -> tuple[list[CoordinatorView], list[str]]:
    """Every coordinator a heartbeat or an answer names, with its state; and the answers
    on the status subject that were no coordinator's status (for the caller to report)."""
    heartbeats = await _heartbeats(client)
    now = time.time()
    serving = {name for name, h in heartbeats.items() if not h.stopped and not h.late(now)}
    statuses: dict[str, CoordinatorStatus] = {}
    foreign: list[str] = []
    read = 0

    def enough(answers: list[bytes]) -> bool:
        nonlocal read
        for answer in answers[read:]:
            try:
                answered = CoordinatorStatus.decode(answer)
            except WireError as exc:
                foreign.append(f"{answer[:60]!r} ({exc})")
                continue
            statuses[answered.coordinator] = answered
        read = len(answers)
        return bool(serving) and serving <= statuses.keys()

    enough(await gather(client, STATUS_SUBJECT, b"", wait=wait, enough=enough))
    views = []
    for name in sorted({*heartbeats, *statuses}):
        beat, status = heartbeats.get(name), statuses.get(name)
        if status is not None:
            state = ServingState.SERVING
        elif beat is not None and beat.stopped:
            state = ServingState.STOPPED
        else:
            state = ServingState.NOT_ANSWERING
        views.append(CoordinatorView(name, state, status, beat))
    return views, foreign


async def _heartbeats(client: NatsClient) -> dict[str, CoordinatorPresence]:
    bucket = Bucket(client, BucketConfig(name=COORDINATORS_BUCKET))
    found: dict[str, CoordinatorPresence] = {}
    try:
        entries = await bucket.entries()
    except BusError as exc:  # no bucket (no coordinator ever ran here, or an older one): answers only
        log.debug("cannot read the coordinators' heartbeats: %s", exc)
        return found
    for entry in entries:
        if entry.value is None:
            continue
        try:
            beat = CoordinatorPresence.decode(entry.value)
        except WireError as exc:
            log.warning("ignoring unreadable coordinator heartbeat %s: %s", entry.key, exc)
            continue
        found[beat.coordinator] = beat
    return found
