"""Presence: a heartbeat in KV, kept a while after it stops, so `ctxbus top` shows an agent
that stopped beating (frozen, stuck, or killed) as stale, with its age, before it goes."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import TaskStatus

from ctxbus.bus import PRESENCE_BUCKET, Bucket, BucketConfig, BusError, NatsClient, kv_key
from ctxbus.schemas import Domain, Presence, WireError, validate_token

__all__ = ["PresenceBeacon", "read_presence", "DEFAULT_HEARTBEAT"]

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT: Final = 2.0
"""Seconds between heartbeats; three missed ones make an agent stale."""
_GOODBYE_TIMEOUT: Final = 2.0
"""Seconds a stopping agent waits to take its heartbeat away."""
HEARTBEAT_TTL: Final = 600.0
"""Seconds a heartbeat is kept after it was written: an agent that stopped beating is
shown stale for this long, then forgotten."""


class PresenceBeacon:
    """Publishes `snapshot()` under the agent's presence key every `interval` seconds."""

    def __init__(
        self,
        client: NatsClient,
        domain: Domain,
        agent_id: str,
        snapshot: Callable[[], Presence],
        *,
        interval: float = DEFAULT_HEARTBEAT,
    ) -> None:
        # The id is a key token here, stricter than an author: say so in its own name.
        self._key = kv_key(domain, validate_token(agent_id, field="agent id"))
        self._bucket = Bucket(client, BucketConfig(name=PRESENCE_BUCKET))
        self._snapshot = snapshot
        self._interval = interval

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Beat until cancelled; a failed beat is logged and retried on the next tick."""
        await self._bucket.ensure()
        task_status.started()
        ttl = max(HEARTBEAT_TTL, self._interval * 3)
        try:
            await self._beat(ttl)
        finally:  # a clean stop: gone, not stale
            with anyio.CancelScope(shield=True), anyio.move_on_after(_GOODBYE_TIMEOUT):
                with contextlib.suppress(BusError):
                    await self._bucket.delete(self._key)

    async def _beat(self, ttl: float) -> None:
        failing = False
        while True:
            try:
                beat = self._snapshot().model_copy(update={"interval": self._interval, "at": time.time()})
                await self._bucket.put(self._key, beat.encode(), ttl=ttl)
            except BusError as exc:  # said once per outage: meanwhile the agent is not shown live
                log.log(logging.DEBUG if failing else logging.WARNING, "heartbeat %s skipped: %s", self._key, exc)
                failing = True
            else:
                if failing:
                    log.info("heartbeat %s sent again", self._key)
                failing = False
            await anyio.sleep(self._interval)


async def read_presence(client: NatsClient, domain: Domain) -> list[Presence]:
    """Every heartbeat of `domain` kept, by agent id: stale ones too (`Presence.stale`)."""
    bucket = Bucket(client, BucketConfig(name=PRESENCE_BUCKET))
    found = []
    for entry in await bucket.entries(domain.subject_prefix):
        assert entry.value is not None  # `entries` are live
        try:
            found.append(Presence.decode(entry.value))
        except WireError as exc:
            log.warning("ignoring unreadable heartbeat %s: %s", entry.key, exc)
    return sorted(found, key=lambda p: p.agent)
