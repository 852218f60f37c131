"""Stream plumbing shared by the log and the buckets: creation, compare-and-set headers
and error translation."""

from __future__ import annotations

import dataclasses
import re
from typing import Final

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from bus._errors import BusError, BusUnavailable, StreamMissing

__all__ = [
    "DUPLICATE_IN_PROCESS",
    "EXPECTED_LAST_SUBJECT_SEQ",
    "NO_STREAM",
    "RECOVERING",
    "STREAM_NAME_IN_USE",
    "TRANSIENT",
    "WRONG_LAST_SEQUENCE",
    "actual_sequence",
    "ensure_stream",
    "read_unavailable",
]

STREAM_NAME_IN_USE: Final = 10058
"""err_code of add_stream when the stream exists with another config."""

EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
"""Header of a write that must find its subject's last message at this sequence."""
WRONG_LAST_SEQUENCE: Final = 10071
"""JetStream's err_code for a failed expected-last-sequence check."""
DUPLICATE_IN_PROCESS: Final = 10158
"""JetStream's err_code for a write whose message id another write is still storing (a
clustered stream's earlier attempt, not yet through its replicas): its outcome, not a
refusal, answers a repeat."""
_ACTUAL_SEQ = re.compile(r"wrong last sequence:\s*(\d+)")

TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
)
"""nats-py errors that mean "no answer now" (server down, restarting, electing), as
opposed to a refusal: the request may or may not have been carried out."""

NO_STREAM = (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)
"""What a write to a stream that does not exist gets: nobody takes it (as when the
server came back with an empty store), or JetStream is not up yet."""

RECOVERING = (*TRANSIENT, nats.js.errors.ServerError)
"""`TRANSIENT`, and the 500s JetStream answers while it recovers after a restart: worth
retrying for a request that is safe to repeat (a read, or a write with a message id or
an expected sequence)."""


def read_unavailable(action: str, exc: Exception) -> BusUnavailable:
    """The error for a read nobody answered, saying what is most likely missing.

    A read of a stream that does not exist gets no responders: on a fresh server that
    is the usual cause, since only coordinators create the log and the snapshots.
    """
    if isinstance(exc, (nats.errors.NoRespondersError, nats.js.errors.NotFoundError)):
        return StreamMissing(
            f"{action}: no stream answered (no ctxbus log on this server yet? a coordinator creates it: "
            "`ctxbus up`, or `ctxbus coordinator` against this server)"
        )
    return BusUnavailable(f"{action}: {exc!r}")


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create `config`'s stream, or update it to `config`; idempotent.

    An existing stream keeps its number of replicas if it has more: a process started
    with the single-node default must not cut a cluster's copies of the log down to one.

    :raises BusError: if the server refuses the config.
    :raises BusUnavailable: if the server does not answer.
    """
    assert config.name is not None, "a stream config names its stream"
    action = "create"
    try:
        existing = await _existing(js, config.name)
        if existing is None:
            try:
                await js.add_stream(config)
                return
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != STREAM_NAME_IN_USE:
                    raise
                existing = await _existing(js, config.name)  # another process made it meanwhile
                if existing is None:
                    raise BusUnavailable(f"stream {config.name!r} was made and is gone again") from exc
        wanted = config.num_replicas or 1
        if existing.num_replicas > wanted:
            config = dataclasses.replace(config, num_replicas=existing.num_replicas)
        if _has_settings(existing.config, config):
            return  # nothing to change: no update (which agents are not allowed to make)
        action = f"raise to {wanted} copies the existing" if wanted > existing.num_replicas else "update the existing"
        await js.update_stream(config)
    except nats.js.errors.APIError as exc:
        raise BusError(f"cannot {action} stream {config.name!r}: {_refusal(exc)}") from exc
    except TRANSIENT as exc:
        raise BusUnavailable(f"cannot {action} stream {config.name!r}: {exc!r}") from exc
    except nats.errors.Error as exc:  # closed, or a request the client will not send
        raise BusError(f"cannot {action} stream {config.name!r}: {exc!r}") from exc


@dataclasses.dataclass(frozen=True)
class _Existing:
    config: api.StreamConfig
    num_replicas: int


async def _existing(js: JetStreamContext, name: str) -> _Existing | None:
    """The config of the stream `name` and how many copies it keeps; None if there is none."""
    try:
        config = (await js.stream_info(name)).config
    except nats.js.errors.NotFoundError:
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


def _refusal(exc: nats.js.errors.APIError) -> str:
    """What JetStream's API said, for a message. A server without JetStream says nothing:
    nobody listens on its API, and nats-py reports the lack of responders as a 503 with
    neither a description nor an err_code."""
    if exc.description:
        return exc.description
    if isinstance(exc, nats.js.errors.ServiceUnavailableError) and exc.err_code is None:
        return "JetStream is not enabled on this server (start nats-server with -js, or `jetstream {}` in its config)"
    return f"error {exc.code or '?'} with no description ({type(exc).__name__})"


def actual_sequence(exc: nats.js.errors.APIError) -> int | None:
    """The sequence a 10071 error says the subject really had, if it says."""
    match = _ACTUAL_SEQ.search(exc.description or "")
    return int(match.group(1)) if match else None
