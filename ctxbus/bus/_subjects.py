"""Every NATS subject, stream, bucket and key name ctxbus uses, built in one place.

A domain's traffic lives under `ctx.<user>.<session>.<task>.<verb>`, so a wildcard can
watch one task or one user (tenants are kept apart by NATS accounts: the log stream and
the buckets are shared, see docs/operations.md). What belongs to no
one domain (operator endpoints, the republished log, messages that name no valid
domain) lives under `ctxbus.`, outside every tenant's `ctx.<user>.>`.
"""

from __future__ import annotations

import functools
import hashlib
from enum import StrEnum
from typing import Final

from ctxbus.schemas import Domain, validate_token

__all__ = [
    "SUBJECT_ROOT",
    "GLOBAL_ROOT",
    "STATUS_SUBJECT",
    "METRICS_SUBJECT",
    "GLOBAL_DLQ",
    "TX_STREAM",
    "TX_SUBJECTS",
    "LIVE_ROOT",
    "BRIEF_BUCKET",
    "LEASE_BUCKET",
    "PRESENCE_BUCKET",
    "COORDINATORS_BUCKET",
    "coordinator_key",
    "PROPOSE_QUEUE",
    "Verb",
    "subject",
    "domain_of",
    "all_domains",
    "live_subject",
    "routed",
    "kv_key",
]

SUBJECT_ROOT: Final = "ctx"

TX_STREAM: Final = "CTXBUS_TX"
"""The JetStream stream that holds every domain's transaction log."""

TX_SUBJECTS: Final = f"{SUBJECT_ROOT}.*.*.*.tx"
"""Subjects captured by `TX_STREAM`: the `tx` verb of every domain."""

GLOBAL_ROOT: Final = "ctxbus"
"""Root of the subjects that belong to no one domain."""

STATUS_SUBJECT: Final = f"{GLOBAL_ROOT}.status"
"""Request subject: every coordinator answers with its status (`schemas.CoordinatorStatus`, JSON).

An operator endpoint: the answer names every domain the coordinator caches, of every tenant.
"""

METRICS_SUBJECT: Final = f"{GLOBAL_ROOT}.metrics"
"""Request subject: every coordinator answers with its counters as Prometheus text."""

GLOBAL_DLQ: Final = f"{GLOBAL_ROOT}.dlq"
"""Where reports go on messages whose subject names no valid domain: a bare msgpack
`schemas.DeadLetter`, since an envelope needs a domain."""

LIVE_ROOT: Final = f"{GLOBAL_ROOT}.live"
"""Where a stream republishes each entry it stores: `<LIVE_ROOT>.<stream>.<subject>`."""

BRIEF_BUCKET: Final = "ctxbus_briefs"
"""KV bucket of brief snapshots, one key per domain."""

LEASE_BUCKET: Final = "ctxbus_leases"
"""KV bucket of leases, with per-message TTL allowed."""

PRESENCE_BUCKET: Final = "ctxbus_presence"
"""KV bucket of agent heartbeats."""

COORDINATORS_BUCKET: Final = "ctxbus_coordinators"
"""KV bucket of coordinator heartbeats, one key per coordinator (`coordinator_key`)."""

PROPOSE_QUEUE: Final = "ctxbus-coordinators"
"""Queue group all coordinators join, so each proposal reaches exactly one."""


class Verb(StrEnum):
    """The last token of a domain subject: what flows there."""

    PROPOSE = "propose"
    TX = "tx"
    EVENTS = "events"
    DLQ = "dlq"


def subject(domain: Domain, verb: Verb) -> str:
    """`ctx.<user>.<session>.<task>.<verb>` for one domain."""
    return f"{SUBJECT_ROOT}.{domain.subject_prefix}.{verb}"


@functools.lru_cache(maxsize=4096)  # a coordinator asks for every proposal; a domain's subjects are few
def domain_of(subject_: str) -> Domain | None:
    """The domain a `ctx.<user>.<session>.<task>.<verb>[.<route>]` subject names, if valid.

    The inverse of `subject` (and of `routed` on it): None for any other subject, so a
    message on a wildcard subscription that names no valid domain can be dead-lettered.
    """
    parts = subject_.split(".")
    if len(parts) not in (5, 6) or parts[0] != SUBJECT_ROOT:
        return None
    try:
        return Domain.parse("/".join(parts[1:4]))
    except ValueError:  # InvalidDomain
        return None


def all_domains(verb: Verb) -> str:
    """A wildcard subject matching `verb` in every domain."""
    return f"{SUBJECT_ROOT}.*.*.*.{verb}"


def live_subject(stream: str, stream_subject: str) -> str:
    """The core subject on which `stream` republishes what it stores on `stream_subject`.

    Wildcards carry over: `live_subject(s, "ctx.*.*.*.tx")` matches every domain's log.
    """
    return f"{LIVE_ROOT}.{stream}.{stream_subject}"


def routed(subject_: str, member_id: str) -> str:
    """`subject_` addressed to one member of its queue group, which also listens there.

    Member ids (coordinator ids) may hold characters a subject cannot, so the last token
    is a digest of the id.
    """
    return f"{subject_}.{_route_token(member_id)}"


@functools.lru_cache(maxsize=256)
def _route_token(member_id: str) -> str:
    """Cached: a proposer computes it after every reply, for the few coordinators there are."""
    return hashlib.sha256(member_id.encode()).hexdigest()[:16]


def coordinator_key(coordinator_id: str) -> str:
    """A coordinator's key in `COORDINATORS_BUCKET`: its id may hold characters a key
    cannot, so a digest of it (its heartbeat names it)."""
    return _route_token(coordinator_id)


def kv_key(domain: Domain, *names: str) -> str:
    """`<user>.<session>.<task>[.<name>...]`: a KV key scoped to one domain.

    :raises InvalidDomain: if a name is not a valid token (it would escape its scope).
    """
    for name in names:
        validate_token(name, field="key name")
    return ".".join((*domain.tokens, *names))
