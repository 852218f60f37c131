"""The lease primitive: claim a key with a TTL, move it on by compare-and-set.

Built on a KV-compatible JetStream stream with per-message TTL (`allow_msg_ttl`), so a
claim whose holder crashed disappears by itself. nats-py 2.16 shapes the code:

- `KeyValueConfig` has no `allow_msg_ttl`, so `ensure()` creates the bucket's stream
  itself, with the same layout nats-py's KV uses (`KV_<bucket>`, `$KV.<bucket>.>`), so
  `nats kv` and nats-py's `KeyValue` can still read it.
- `kv.create()/update()/put()` cannot carry a TTL, so every write here is a raw
  `js.publish` with `Nats-TTL` and `Nats-Expected-Last-Subject-Sequence` headers.
- We never set `subject_delete_marker_ttl` (nats-py's `limit_marker_ttl`): with it,
  `kv.get()`/`create()` mistake expiry markers for values. Expired claims just vanish.
- A key whose last message is a delete marker has a non-zero last sequence, so a fresh
  claim must CAS against the marker's sequence, not 0; `claim` does that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import api

from bus._errors import BusError, BusUnavailable, CasConflict, LeaseHeld
from bus._subjects import LEASE_BUCKET
from bus._txlog import EXPECTED_LAST_SUBJECT_SEQ, WRONG_LAST_SEQUENCE, actual_sequence
from schemas import LeaseRecord, UsageError, WireError

__all__ = ["Lease", "Leases", "LeaseConfig"]

TTL_HEADER: Final = "Nats-TTL"
KV_OPERATION: Final = "KV-Operation"
_TOMBSTONES: Final = frozenset({"DEL", "PURGE"})
RELEASE_MARKER_TTL: Final = 60
"""Seconds a release marker stays; keeps one-off keys from piling up forever."""

_UNAVAILABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
)


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
        self._js = client.jetstream(timeout=self.config.timeout)
        self._stream = f"KV_{self.config.bucket}"
        self._prefix = f"$KV.{self.config.bucket}."

    def __repr__(self) -> str:
        return f"<Leases bucket={self.config.bucket!r}>"

    async def ensure(self) -> None:
        """Create the bucket's stream if missing; idempotent."""
        cfg = api.StreamConfig(
            name=self._stream,
            subjects=[f"{self._prefix}>"],
            storage=api.StorageType.FILE,
            num_replicas=self.config.replicas,
            max_msgs_per_subject=1,
            discard=api.DiscardPolicy.NEW,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_direct=True,
            allow_msg_ttl=True,
        )
        try:
            try:
                await self._js.add_stream(cfg)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != 10058:  # exists with another config
                    raise
                await self._js.update_stream(cfg)
        except nats.js.errors.APIError as exc:
            raise BusError(f"cannot create lease bucket {self.config.bucket!r}: {exc.description}") from exc
        except _UNAVAILABLE as exc:
            raise BusUnavailable(f"cannot create lease bucket {self.config.bucket!r}: {exc!r}") from exc

    async def claim(self, key: str, holder: str, ttl: float, *, record: LeaseRecord | None = None) -> Lease:
        """Take `key` for `holder` for `ttl` seconds; exactly one concurrent claimer wins.

        :param record: the value to store; `LeaseRecord(holder=holder)` when not given.
        :raises LeaseHeld: if the key is held (its value names the holder).
        :raises UsageError: if `ttl` is under one second.
        """
        value = record or LeaseRecord(holder=holder)
        expected = 0
        for _ in range(3):  # a tombstone or an expiry can move the base under us
            try:
                return await self._write(key, value, expected, ttl)
            except CasConflict:
                current = await self._read_raw(key)
                if current is None:
                    expected = 0
                elif current.tombstone:
                    expected = current.seq
                else:
                    raise LeaseHeld(key, current.holder, current.seq) from None
        raise LeaseHeld(key, None, expected)

    async def transition(
        self, key: str, expected_revision: int, record: LeaseRecord, ttl: float | None = None
    ) -> Lease:
        """Replace the value if the key is still at `expected_revision`.

        :param ttl: seconds until the new value expires; None keeps it until replaced.
        :raises CasConflict: if the key moved on (or expired) since `expected_revision`.
        """
        return await self._write(key, record, expected_revision, ttl)

    async def release(self, key: str, expected_revision: int | None = None) -> None:
        """Delete the lease (if still at `expected_revision`, when given).

        :raises CasConflict: if the key moved on since `expected_revision`.
        """
        headers = {KV_OPERATION: "DEL", TTL_HEADER: f"{RELEASE_MARKER_TTL}s"}
        if expected_revision is not None:
            headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_revision)
        await self._publish(key, b"", headers, expected_revision or 0)

    async def read(self, key: str) -> Lease | None:
        """The current lease at `key`, or None if free (never claimed, released, expired)."""
        raw = await self._read_raw(key)
        if raw is None or raw.tombstone or raw.record is None:
            return None
        return Lease(key, raw.seq, raw.record)

    # -- internals -----------------------------------------------------------------------

    async def _write(self, key: str, record: LeaseRecord, expected: int, ttl: float | None) -> Lease:
        headers = {EXPECTED_LAST_SUBJECT_SEQ: str(expected)}
        if ttl is not None:
            headers[TTL_HEADER] = f"{_whole_seconds(ttl)}s"
        seq = await self._publish(key, record.encode(), headers, expected)
        return Lease(key, seq, record)

    async def _publish(self, key: str, payload: bytes, headers: dict[str, str], expected: int) -> int:
        subject = self._prefix + key
        try:
            ack = await self._js.publish(subject, payload, stream=self._stream, headers=headers)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                raise CasConflict(key, expected, actual_sequence(exc)) from exc
            raise BusError(f"lease write to {key!r} refused: {exc.description}") from exc
        except _UNAVAILABLE as exc:
            raise BusUnavailable(f"lease write to {key!r} not acknowledged: {exc!r}") from exc
        return int(ack.seq)

    async def _read_raw(self, key: str) -> _RawLease | None:
        try:
            msg = await self._js.get_msg(self._stream, subject=self._prefix + key, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        except _UNAVAILABLE as exc:
            raise BusUnavailable(f"cannot read lease {key!r}: {exc!r}") from exc
        headers = msg.headers or {}
        seq = int(msg.seq or 0)
        if headers.get(KV_OPERATION) in _TOMBSTONES:
            return _RawLease(seq, None, tombstone=True)
        try:
            return _RawLease(seq, LeaseRecord.decode(msg.data or b""), tombstone=False)
        except WireError:
            # Someone wrote a foreign value; treat it as held by nobody we know.
            return _RawLease(seq, None, tombstone=False)


@dataclass(frozen=True)
class _RawLease:
    seq: int
    record: LeaseRecord | None
    tombstone: bool

    @property
    def holder(self) -> str | None:
        return self.record.holder if self.record else None


def _whole_seconds(ttl: float) -> int:
    """JetStream TTLs are whole seconds, at least 1; round a fraction up."""
    if not ttl >= 1:
        raise UsageError(f"lease ttl must be at least 1 second, got {ttl!r}")
    return math.ceil(ttl)
