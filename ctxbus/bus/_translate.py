"""The one map from nats-py's errors to ours, as httpx maps httpcore's.

Everything in `bus` that calls nats-py does it inside `translating(action)`, which turns
any nats-py error into the most specific `BusError` (`raise ... from` the original), so
no nats exception type reaches a caller; the call sites then act on ours (a `NotFound`
read is None, a `Refused` with err_code 10071 is a lost compare-and-set). Every nats-py
error class is named in `MAPPED`: a test fails when a new one appears unmapped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

import nats.errors
import nats.js.errors

from ctxbus.bus._errors import BusError, BusUnavailable, NoResponders, NotAuthorized, NotFound, Refused

__all__ = ["MAPPED", "translate", "translating"]

_js, _core = nats.js.errors, nats.errors

MAPPED: Final[dict[type[BaseException], type[BusError]]] = {
    # JetStream API answers
    _js.NotFoundError: NotFound,
    _js.BucketNotFoundError: NotFound,
    _js.KeyNotFoundError: NotFound,
    _js.KeyDeletedError: NotFound,
    _js.ObjectNotFoundError: NotFound,
    _js.ObjectDeletedError: NotFound,
    _js.ServerError: BusUnavailable,  # 500s while JetStream recovers after a restart
    _js.ServiceUnavailableError: BusUnavailable,  # 503: no JetStream answered (not enabled, or electing)
    _js.APIError: Refused,
    _js.BadRequestError: Refused,
    _js.BadBucketError: Refused,
    _js.ConsumerInvalidResetError: Refused,
    _js.KeyValueError: Refused,
    _js.KeyWrongLastSequenceError: Refused,  # err_code 10071: the caller makes it a CasConflict
    _js.KeyHistoryTooLargeError: Refused,
    _js.NoKeysError: NotFound,
    _js.NoStreamResponseError: NoResponders,
    _js.FetchTimeoutError: BusUnavailable,
    _js.TooManyStalledMsgsError: BusUnavailable,
    _js.Error: BusError,
    _js.BadObjectMetaError: BusError,
    _js.ConsumerSequenceMismatchError: BusError,
    _js.DigestMismatchError: BusError,
    _js.InvalidBucketNameError: BusError,
    _js.InvalidKeyError: BusError,
    _js.InvalidObjectNameError: BusError,
    _js.KeyValueLimitMarkerTTLNotSupportedError: BusError,
    _js.LinkIsABucketError: BusError,
    _js.ObjectAlreadyExists: BusError,
    # The connection
    _core.NoRespondersError: NoResponders,
    _core.TimeoutError: BusUnavailable,
    _core.FlushTimeoutError: BusUnavailable,
    _core.DrainTimeoutError: BusUnavailable,
    _core.ConnectionReconnectingError: BusUnavailable,
    _core.StaleConnectionError: BusUnavailable,
    _core.UnexpectedEOF: BusUnavailable,
    _core.OutboundBufferLimitError: BusUnavailable,
    _core.SlowConsumerError: BusUnavailable,
    _core.NoServersError: BusUnavailable,
    _core.AuthorizationError: NotAuthorized,
    _core.InvalidUserCredentialsError: NotAuthorized,
    _core.SecureConnRequiredError: BusError,
    _core.SecureConnWantedError: BusError,
    _core.SecureConnFailedError: BusError,
    _core.ConnectionClosedError: BusError,  # for good: trying again cannot help
    _core.ConnectionDrainingError: BusError,
    _core.MaxPayloadError: BusError,
    _core.BadSubjectError: BusError,
    _core.BadHeaderError: BusError,
    _core.BadSubscriptionError: BusError,
    _core.BadTimeoutError: BusError,
    _core.InvalidCallbackTypeError: BusError,
    _core.JsonParseError: BusError,
    _core.MsgAlreadyAckdError: BusError,
    _core.NotJSMessageError: BusError,
    _core.ProtocolError: BusError,
    _core.ServerNotInPoolError: BusError,
    _core.Error: BusError,
}
"""Each nats-py error class, and the `BusError` it becomes."""


def translate(action: str, exc: BaseException) -> BusError:
    """The ctxbus error for `exc`, met while doing `action` ("cannot read x/y").

    A class not named in `MAPPED` (a newer nats-py's) takes its nearest mapped base.
    """
    kind = next((MAPPED[base] for base in type(exc).__mro__ if base in MAPPED), BusError)
    if kind is Refused or kind is NotFound:
        assert isinstance(exc, nats.js.errors.APIError)
        return kind(action, code=exc.code, err_code=exc.err_code, description=_refusal(exc))
    if isinstance(exc, nats.js.errors.ServiceUnavailableError) and exc.err_code is None and not exc.description:
        # nats-py reports the lack of JetStream responders as a 503 saying nothing.
        return BusUnavailable(
            f"{action}: JetStream is not enabled on this server (start nats-server with -js, or "
            "`jetstream {}` in its config), or is not answering yet"
        )
    return kind(f"{action}: {_described(exc)}")


@contextlib.contextmanager
def translating(action: str) -> Iterator[None]:
    """Run the body; a nats-py error in it is raised as `translate(action, it)` instead."""
    try:
        yield
    except nats.errors.Error as exc:
        raise translate(action, exc) from exc


def _refusal(exc: nats.js.errors.APIError) -> str:
    if exc.description:
        return exc.description
    return f"error {exc.code or '?'} with no description ({type(exc).__name__})"


def _described(exc: BaseException) -> str:
    if isinstance(exc, nats.js.errors.APIError) and exc.description:
        return exc.description
    return repr(exc)
