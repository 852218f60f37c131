"""Presence: a heartbeat in KV with a TTL, so a dead agent disappears from `ctxbus top`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import TaskStatus

from bus import PRESENCE_BUCKET, Bucket, BucketConfig, BusError, NatsClient, kv_key
from schemas import Domain, Presence, WireError, validate_token

__all__ = ["PresenceBeacon", "read_presence", "DEFAULT_HEARTBEAT"]

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT: Final = 2.0
"""Seconds between heartbeats; a heartbeat lives three times as long."""


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
        ttl = max(1.0, self._interval * 3)
        failing = False
        while True:
            try:
                await self._bucket.put(self._key, self._snapshot().encode(), ttl=ttl)
            except BusError as exc:  # said once per outage: meanwhile the agent is not shown live
                log.log(logging.DEBUG if failing else logging.WARNING, "heartbeat %s skipped: %s", self._key, exc)
                failing = True
            else:
                if failing:
                    log.info("heartbeat %s sent again", self._key)
                failing = False
            await anyio.sleep(self._interval)


async def read_presence(client: NatsClient, domain: Domain) -> list[Presence]:
    """Every live heartbeat of `domain`, by agent id."""
    bucket = Bucket(client, BucketConfig(name=PRESENCE_BUCKET))
    found = []
    for entry in await bucket.entries(domain.subject_prefix):
        assert entry.value is not None  # `entries` are live
        try:
            found.append(Presence.decode(entry.value))
        except WireError as exc:
            log.warning("ignoring unreadable heartbeat %s: %s", entry.key, exc)
    return sorted(found, key=lambda p: p.agent)
