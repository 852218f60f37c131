"""Stream plumbing shared by the log and the buckets: creation, compare-and-set headers
and error translation."""

from __future__ import annotations

import dataclasses
import re
from typing import Final

import nats.js.errors
from nats.js import JetStreamContext, api

from ctxbus.bus._errors import BusError, BusUnavailable, NoResponders, NotFound, Refused, StreamMissing
from ctxbus.bus._translate import translating

__all__ = [
    "DUPLICATE_IN_PROCESS",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "NO_SUITABLE_PEERS",
    "STREAM_NAME_IN_USE",
    "WRONG_LAST_SEQUENCE",
    "actual_sequence",
    "ensure_stream",
    "may_pass",
    "read_unavailable",
]

STREAM_NAME_IN_USE: Final = 10058
"""err_code of add_stream when the stream exists with another config."""
NO_SUITABLE_PEERS: Final = 10005
"""err_code of add_stream when the cluster cannot place the copies: too few nodes, or
nodes the metadata leader has not heard from yet (a cluster that has just formed)."""
CLUSTER_NOT_AVAILABLE: Final = 10008
"""err_code of a JetStream request a cluster cannot serve yet ("JetStream system
temporarily unavailable"): no metadata leader, during an election."""
_SETTLING: Final = frozenset({NO_SUITABLE_PEERS, CLUSTER_NOT_AVAILABLE})
"""err_codes that may pass as a cluster settles: see `may_pass`."""

EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
"""Header of a write that must find its subject's last message at this sequence."""
WRONG_LAST_SEQUENCE: Final = 10071
"""JetStream's err_code for a failed expected-last-sequence check."""
DUPLICATE_IN_PROCESS: Final = 10158
"""JetStream's err_code for a write whose message id another write is still storing (a
clustered stream's earlier attempt, not yet through its replicas): its outcome, not a
refusal, answers a repeat."""
_ACTUAL_SEQ = re.compile(r"wrong last sequence:\s*(\d+)")


def may_pass(exc: BusError) -> bool:
    """Whether creating a stream may succeed later, as the bus settles: no answer in
    time, or JetStream saying it cannot yet (a cluster still electing, or one whose
    metadata leader has not heard from every node). Not what JetStream refuses for good
    (more copies than a single server keeps, a bad config) nor a server without it."""
    cause = exc.__cause__
    if isinstance(cause, nats.js.errors.APIError):  # JetStream answered, and said why
        return cause.err_code in _SETTLING
    return isinstance(exc, BusUnavailable) and not isinstance(exc, NoResponders)


def read_unavailable(action: str, exc: BusError) -> BusError:
    """The error for a read nobody answered, saying what is most likely missing.

    A read of a stream that does not exist gets no responders: on a fresh server that
    is the usual cause, since only coordinators create the log and the snapshots.
    """
    if isinstance(exc, (NoResponders, NotFound)):
        return StreamMissing(
            f"{action}: no stream answered (no ctxbus log on this server yet? a coordinator creates it: "
            "`ctxbus up`, or `ctxbus coordinator` against this server)"
        )
    return exc


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create `config`'s stream, or update it to `config`; idempotent.

    An existing stream keeps its number of replicas if it has more: a process started
    with the single-node default must not cut a cluster's copies of the log down to one.

    :raises BusError: if the server refuses the config.
    :raises BusUnavailable: if the server does not answer.
    """
    assert config.name is not None, "a stream config names its stream"
    existing = await _existing(js, config.name, action=f"cannot create stream {config.name!r}")
    if existing is None:
        try:
            with translating(f"cannot create stream {config.name!r}"):
                await js.add_stream(config)
            return
        except Refused as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
        existing = await _existing(js, config.name, action=f"cannot create stream {config.name!r}")  # made meanwhile
        if existing is None:
            raise BusUnavailable(f"stream {config.name!r} was made and is gone again")
    wanted = config.num_replicas or 1
    if existing.num_replicas > wanted:
        config = dataclasses.replace(config, num_replicas=existing.num_replicas)
    if _has_settings(existing.config, config):
        return  # nothing to change: no update (which agents are not allowed to make)
    action = f"raise to {wanted} copies the existing" if wanted > existing.num_replicas else "update the existing"
    with translating(f"cannot {action} stream {config.name!r}"):
        await js.update_stream(config)


@dataclasses.dataclass(frozen=True)
class _Existing:
    config: api.StreamConfig
    num_replicas: int


async def _existing(js: JetStreamContext, name: str, *, action: str) -> _Existing | None:
    """The config of the stream `name` and how many copies it keeps; None if there is none."""
    try:
        with translating(action):
            config = (await js.stream_info(name)).config
    except NotFound:
        return None
    return _Existing(config, config.num_replicas or 1)


def _has_settings(existing: api.StreamConfig, wanted: api.StreamConfig) -> bool:
    """Whether `existing` already has every setting `wanted` gives: those left at the
    config's defaults (None, or 0 for a duplicate window: the server's own) aside."""
    for field in dataclasses.fields(wanted):
        value = getattr(wanted, field.name)
        if value is None or value == field.default:
            continue
        have = getattr(existing, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if have is None or any(
                v is not None and getattr(have, f.name) != v
                for f in dataclasses.fields(value)
                if (v := getattr(value, f.name)) is not None
            ):
                return False
        elif have != value:
            return False
    return True


def actual_sequence(exc: Refused) -> int | None:
    """The sequence a 10071 refusal says the subject really had, if it says."""
    match = _ACTUAL_SEQ.search(exc.description)
    return int(match.group(1)) if match else None
