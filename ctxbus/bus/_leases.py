"""The lease primitive: claim a key with a TTL, move it on by compare-and-set.

Leases live in a `Bucket` with per-message TTL, so a claim whose holder crashed
disappears by itself and can be claimed again. A key whose last message is a delete
marker has a non-zero last revision, so a fresh claim must compare-and-set against the
marker's revision rather than 0; `claim` does that.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.client import Client

from ctxbus.bus._errors import CasConflict, LeaseHeld, StreamMissing
from ctxbus.bus._kv import Bucket, BucketConfig
from ctxbus.bus._subjects import LEASE_BUCKET
from ctxbus.schemas import LeaseRecord, WireError

__all__ = ["Lease", "Leases", "LeaseConfig"]

_CLAIM_ATTEMPTS = 3
"""A tombstone or an expiry can move the base under a claim; this many tries suffice."""


@dataclass(frozen=True, kw_only=True)
class LeaseConfig:
    """The bucket behind `Leases`."""

    bucket: str = LEASE_BUCKET
    replicas: int = 1
    timeout: float = 2.0
    """Seconds one request waits for the server."""


@dataclass(frozen=True)
class Lease:
    """A lease as read or written: its key, KV revision and value."""

    key: str
    revision: int
    record: LeaseRecord

    @property
    def holder(self) -> str:
        return self.record.holder


class Leases:
    """Claim, transition, release and read leases in one bucket."""

    def __init__(self, client: Client, config: LeaseConfig | None = None) -> None:
        self.config = config or LeaseConfig()
        self._bucket = Bucket(
            client, BucketConfig(name=self.config.bucket, replicas=self.config.replicas, timeout=self.config.timeout)
        )

    def __repr__(self) -> str:
        return f"<Leases bucket={self.config.bucket!r}>"

    async def ensure(self) -> None:
        """Create the bucket if missing; idempotent."""
        await self._bucket.ensure()

    async def claim(self, key: str, holder: str, ttl: float, *, record: LeaseRecord | None = None) -> Lease:
        """Take `key` for `holder` for `ttl` seconds; exactly one concurrent claimer wins.

        :param record: the value to store; `LeaseRecord(holder=holder)` when not given.
        :raises LeaseHeld: if the key is held; `holder` names the holder, or is None if
            the value is not a lease record.
        :raises CasConflict: if the key changed under every attempt (released, expired
            and claimed again meanwhile): read it again before deciding.
        :raises UsageError: if `ttl` is under one second.
        """
        value = record or LeaseRecord(holder=holder)
        expected = 0
        for _ in range(_CLAIM_ATTEMPTS):
            try:
                return await self.transition(key, expected, value, ttl=ttl)
            except CasConflict:
                current = await self._bucket.get(key)
                if current is None:
                    expected = 0
                elif current.deleted:
                    expected = current.revision
                else:
                    raise LeaseHeld(key, _holder(current.value), current.revision) from None
        raise CasConflict(key, expected, None)

    async def transition(
        self, key: str, expected_revision: int, record: LeaseRecord, *, ttl: float | None = None
    ) -> Lease:
        """Replace the value if the key is still at `expected_revision`.

        :param ttl: seconds until the new value expires; None keeps it until replaced.
        :raises CasConflict: if the key moved on (or expired) since `expected_revision`.
        """
        revision = await self._bucket.put(key, record.encode(), expected_revision=expected_revision, ttl=ttl)
        return Lease(key, revision, record)

    async def release(self, key: str, expected_revision: int | None = None) -> None:
        """Free the lease (if still at `expected_revision`, when given).

        :raises CasConflict: if the key moved on since `expected_revision`.
        """
        await self._bucket.delete(key, expected_revision=expected_revision)

    async def read(self, key: str) -> Lease | None:
        """The current lease at `key`, or None if free (never claimed, released, expired).

        A bucket lost with its server's store is created again (every lease is free then).

        :raises LeaseHeld: with `holder=None`, if the key holds a value that is not a
            lease record: it is not free (`claim` would fail), but nobody we know holds it.
        """
        try:
            entry = await self._bucket.get(key)
        except StreamMissing:
            # A server that lost its store: the bucket is gone, and with it every lease.
            # Create it again, as lease users may (a read that only failed would leave
            # whoever reads before claiming unable to claim for good).
            await self.ensure()
            return None
        if entry is None or entry.value is None:
            return None
        try:
            return Lease(key, entry.revision, LeaseRecord.decode(entry.value))
        except WireError:
            raise LeaseHeld(key, None, entry.revision) from None


def _holder(value: bytes | None) -> str | None:
    try:
        return LeaseRecord.decode(value).holder if value else None
    except WireError:
        return None
