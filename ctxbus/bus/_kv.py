"""A KV bucket as a JetStream stream we configure ourselves, with per-message TTL.

nats-py 2.16's `KeyValueConfig` cannot turn on `allow_msg_ttl`, and its `put()` and
`update()` cannot carry a TTL, so buckets that need expiring keys (leases, presence)
are created here with the same layout nats-py's KV uses (`KV_<bucket>` capturing
`$KV.<bucket>.>`), and written with raw publishes carrying `Nats-TTL` and
`Nats-Expected-Last-Subject-Sequence`. `nats kv` and nats-py's `KeyValue` can still
read them.

We never set `subject_delete_marker_ttl` (nats-py's `limit_marker_ttl`): with it,
`kv.get()`/`create()` mistake expiry markers for values. Expired keys just vanish.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from nats.aio.client import Client
from nats.js import api

from ctxbus.bus._errors import CasConflict, NoResponders, NotFound, Refused
from ctxbus.bus._streams import (
    EXPECTED_LAST_SUBJECT_SEQ,
    WRONG_LAST_SEQUENCE,
    actual_sequence,
    ensure_stream,
    read_unavailable,
)
from ctxbus.bus._translate import translating
from ctxbus.schemas import UsageError

__all__ = ["Bucket", "BucketConfig", "KvEntry"]

log = logging.getLogger(__name__)

TTL_HEADER: Final = "Nats-TTL"
KV_OPERATION: Final = "KV-Operation"
_TOMBSTONES: Final = frozenset({"DEL", "PURGE"})
LABEL_PREFIX: Final = "Ctxbus-"
"""Headers of a value that are its labels (see `Bucket.put`)."""
DELETE_MARKER_TTL: Final = 60
"""Seconds a delete marker stays; keeps one-off keys from piling up forever."""


@dataclass(frozen=True, kw_only=True)
class BucketConfig:
    """One KV bucket."""

    name: str
    replicas: int = 1
    history: int = 1
    """Values kept per key; 1 is enough for snapshots, leases and presence."""
    timeout: float = 2.0
    """Seconds one request waits for the server."""


@dataclass(frozen=True)
class KvEntry:
    """The last message of a key: its revision, and its value unless it is a tombstone."""

    key: str
    revision: int
    value: bytes | None
    labels: Mapping[str, str] = field(default_factory=dict)
    """The labels the value was written with (see `Bucket.put`)."""

    @property
    def deleted(self) -> bool:
        return self.value is None


class Bucket:
    """Read and write one KV bucket, with optional TTL and compare-and-set on each write."""

    def __init__(self, client: Client, config: BucketConfig) -> None:
        self.config = config
        self._js = client.jetstream(timeout=config.timeout)
        self.stream = f"KV_{config.name}"
        self._prefix = f"$KV.{config.name}."

    def __repr__(self) -> str:
        return f"<Bucket {self.config.name!r}>"

    async def ensure(self) -> None:
        """Create the bucket's stream, or bring its settings up to date; idempotent."""
        cfg = api.StreamConfig(
            name=self.stream,
            subjects=[f"{self._prefix}>"],
            storage=api.StorageType.FILE,
            num_replicas=self.config.replicas,
            max_msgs_per_subject=self.config.history,
            discard=api.DiscardPolicy.NEW,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_direct=True,
            allow_msg_ttl=True,
        )
        await ensure_stream(self._js, cfg)

    async def get(self, key: str) -> KvEntry | None:
        """The key's last message, tombstones included; None if it never existed or expired."""
        action = f"cannot read {self.config.name}/{key}"
        try:
            with translating(action):
                msg = await self._js.get_msg(self.stream, subject=self._prefix + key, direct=True)
        except NotFound:
            return None
        except NoResponders as exc:
            raise read_unavailable(action, exc) from exc
        headers = msg.headers or {}
        deleted = headers.get(KV_OPERATION) in _TOMBSTONES
        labels = {name: text for name, text in headers.items() if name.startswith(LABEL_PREFIX)}
        return KvEntry(key, int(msg.seq or 0), None if deleted else (msg.data or b""), labels)

    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_revision: int | None = None,
        ttl: float | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> int:
        """Write `value`, returning the new revision.

        :param expected_revision: write only if the key's last revision is this (0: the
            key has no message at all).
        :param ttl: seconds until the value expires (whole seconds, at least 1).
        :param labels: a few short strings stored beside the value (as message headers,
            named `Ctxbus-...`), for readers that need to know about a value without
            decoding it.
        :raises CasConflict: if `expected_revision` no longer holds.
        """
        headers = {}
        for name, text in (labels or {}).items():
            if not name.startswith(LABEL_PREFIX):
                raise UsageError(f"label {name!r} must start with {LABEL_PREFIX!r}")
            headers[name] = text
        if expected_revision is not None:
            headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_revision)
        if ttl is not None:
            headers[TTL_HEADER] = f"{whole_seconds(ttl)}s"
        return await self._publish(key, value, headers, expected_revision)

    async def delete(self, key: str, *, expected_revision: int | None = None) -> None:
        """Leave a delete marker (itself expiring after `DELETE_MARKER_TTL`)."""
        headers = {KV_OPERATION: "DEL", TTL_HEADER: f"{DELETE_MARKER_TTL}s"}
        if expected_revision is not None:
            headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_revision)
        await self._publish(key, b"", headers, expected_revision)

    async def keys(self, prefix: str = "") -> list[str]:
        """Keys with a live value, optionally under `prefix.`, in order."""
        return [entry.key for entry in await self.entries(prefix)]

    async def entries(self, prefix: str = "") -> list[KvEntry]:
        """The live entries, optionally under `prefix.`, by key; none if the bucket does
        not exist yet (reading never creates it)."""
        filter_subject = f"{self._prefix}{prefix}.>" if prefix else f"{self._prefix}>"
        try:
            with translating(f"cannot list {self.config.name}"):
                info = await self._js.stream_info(self.stream, subjects_filter=filter_subject)
        except NotFound:
            return []
        live = []
        for key in sorted(s.removeprefix(self._prefix) for s in info.state.subjects or {}):
            entry = await self.get(key)
            if entry is not None and not entry.deleted:
                live.append(entry)
        return live

    async def _publish(self, key: str, payload: bytes, headers: dict[str, str], expected: int | None) -> int:
        recreated = False
        while True:
            try:
                with translating(f"write to {self.config.name}/{key}"):
                    ack = await self._js.publish(
                        self._prefix + key, payload, stream=self.stream, headers=headers or None
                    )
                return int(ack.seq)
            except NoResponders:
                if recreated:
                    raise
                # A server that lost its store (or a bucket deleted by hand) would refuse
                # every write for good: create the bucket again, and write once more.
                log.warning("no stream took a write to %s/%s; creating the bucket again", self.config.name, key)
                await self.ensure()
                recreated = True
            except Refused as exc:
                if exc.err_code == WRONG_LAST_SEQUENCE:
                    raise CasConflict(key, expected or 0, actual_sequence(exc)) from exc
                raise


def whole_seconds(ttl: float) -> int:
    """JetStream TTLs are whole seconds, at least 1; a fraction is rounded up.

    :raises UsageError: below one second.
    """
    if not ttl >= 1:
        raise UsageError(f"ttl must be at least 1 second, got {ttl!r}")
    return math.ceil(ttl)
