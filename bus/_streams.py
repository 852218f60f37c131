"""Stream plumbing shared by the log and the buckets: creation and error translation."""

from __future__ import annotations

import dataclasses
from typing import Final

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from bus._errors import BusError, BusUnavailable

__all__ = ["RECOVERING", "TRANSIENT", "ensure_stream", "read_unavailable", "STREAM_NAME_IN_USE"]

STREAM_NAME_IN_USE: Final = 10058
"""err_code of add_stream when the stream exists with another config."""

TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
)
"""nats-py errors that mean "no answer now" (server down, restarting, electing), as
opposed to a refusal: the request may or may not have been carried out."""

RECOVERING = (*TRANSIENT, nats.js.errors.ServerError)
"""`TRANSIENT`, and the 500s JetStream answers while it recovers after a restart: worth
retrying for a request that is safe to repeat (a read, or a write with a message id or
an expected sequence)."""


def read_unavailable(action: str, exc: Exception) -> BusUnavailable:
    """The error for a read nobody answered, saying what is most likely missing.

    A read of a stream that does not exist gets no responders: on a fresh server that
    is the usual cause, since only coordinators create the log and the snapshots.
    """
    if isinstance(exc, nats.errors.NoRespondersError):
        return BusUnavailable(
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
    try:
        try:
            await js.add_stream(config)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
            assert config.name is not None, "a stream config names its stream"
            existing = (await js.stream_info(config.name)).config.num_replicas or 1
            if existing > (config.num_replicas or 1):
                config = dataclasses.replace(config, num_replicas=existing)
            await js.update_stream(config)
    except nats.js.errors.APIError as exc:
        raise BusError(f"cannot create stream {config.name!r}: {exc.description}") from exc
    except TRANSIENT as exc:
        raise BusUnavailable(f"cannot create stream {config.name!r}: {exc!r}") from exc
