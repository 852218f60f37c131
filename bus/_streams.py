"""Stream plumbing shared by the log and the buckets: creation and error translation."""

from __future__ import annotations

from typing import Final

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from bus._errors import BusError, BusUnavailable

__all__ = ["RECOVERING", "TRANSIENT", "ensure_stream", "STREAM_NAME_IN_USE"]

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


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create `config`'s stream, or update it to `config`; idempotent.

    :raises BusError: if the server refuses the config.
    :raises BusUnavailable: if the server does not answer.
    """
    try:
        try:
            await js.add_stream(config)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
            await js.update_stream(config)
    except nats.js.errors.APIError as exc:
        raise BusError(f"cannot create stream {config.name!r}: {exc.description}") from exc
    except TRANSIENT as exc:
        raise BusUnavailable(f"cannot create stream {config.name!r}: {exc!r}") from exc
