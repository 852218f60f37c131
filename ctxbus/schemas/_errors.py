"""The ctxbus exception tree.

Every error ctxbus raises on purpose derives from `CtxbusError`, so callers can catch one
root. Caller mistakes (bad arguments, bad configuration) are kept apart from failures
of the wire or the bus at run time::

    CtxbusError
    ├── UsageError            a caller passed something ctxbus cannot use
    │   └── InvalidDomain     a domain token is empty, too long or has a bad character
    ├── WireError             bytes from the wire are not a valid ctxbus message
    │   ├── DecodeError       not msgpack, truncated, or not a map
    │   ├── SchemaVersionError the envelope's `v` is one this build does not speak
    │   ├── EnvelopeInvalid   a field is missing or has the wrong type
    │   │   ├── WrongMessageType the envelope is of another kind than expected
    │   │   └── BodyInvalid   the envelope is sound, its body is not its kind's model
    │   └── PayloadTooLarge   the encoded message exceeds the size limit
    ├── ReplayError           a commit cannot follow the brief (defined with the rules)
    └── BusError              talking to NATS failed (defined in `bus`)

`InvalidDomain` is also a `WireError` when it comes off the wire: `Envelope.decode`
raises `EnvelopeInvalid` naming the `domain` field in that case.

`describe_validation_error` words pydantic's report on a bad value for these errors'
messages, the same way wherever ctxbus validates something it was given.
"""

from __future__ import annotations

from typing import Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

__all__ = [
    "CtxbusError",
    "UsageError",
    "InvalidDomain",
    "WireError",
    "DecodeError",
    "SchemaVersionError",
    "EnvelopeInvalid",
    "WrongMessageType",
    "BodyInvalid",
    "PayloadTooLarge",
    "describe_validation_error",
    "first_ctxbus_error",
]


class CtxbusError(Exception):
    """Root of every error ctxbus raises on purpose."""


class UsageError(CtxbusError, ValueError):
    """Raised when a caller passes an argument or setting ctxbus cannot use."""


class InvalidDomain(UsageError):
    """Raised when a domain or one of its tokens is malformed."""


class WireError(CtxbusError):
    """Raised when bytes received from the wire are not a valid ctxbus message."""


class DecodeError(WireError):
    """Raised when the bytes are not a complete msgpack map."""


class SchemaVersionError(WireError):
    """Raised when an envelope carries a schema version this build does not speak."""

    def __init__(self, version: object, supported: tuple[int, ...], *, missing: bool = False) -> None:
        """:param missing: the envelope has no `v` at all (`version` is then None)."""
        self.version = version
        self.supported = supported
        wanted = ", ".join(str(v) for v in supported)
        if missing:
            super().__init__(f"the envelope has no version field 'v'; this build speaks v{wanted}")
        else:
            super().__init__(f"unsupported envelope version {shown(version)}; this build speaks v{wanted}")


class EnvelopeInvalid(WireError):
    """Raised when an envelope field is missing or has the wrong type or value."""


class WrongMessageType(EnvelopeInvalid):
    """Raised when an envelope is of another kind than the receiver takes (a commit
    sent where proposals go)."""

    def __init__(self, expected: str, got: object) -> None:
        self.expected = expected
        self.got = got
        super().__init__(f"expected a {expected} envelope, got a {shown(got)} envelope")


class BodyInvalid(EnvelopeInvalid):
    """Raised when an envelope is sound but its body is not the model of its kind.

    Carries pydantic's report (`validation_error`): a receiver that answers the sender
    (a coordinator refusing a proposal) words it for the sender, field by field.
    """

    def __init__(self, validation_error: ValidationError, *, kind: str) -> None:
        self.validation_error = validation_error
        self.kind = kind
        super().__init__(f"{kind} body is invalid: {describe_validation_error(validation_error, skip=1)}")


class PayloadTooLarge(WireError):
    """Raised when an encoded message is larger than the allowed maximum."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"message is {size:,} bytes, over the limit of {limit:,} bytes")


_SHOWN_INPUT_MAX: Final = 60


def shown(value: object) -> str:
    """`repr(value)`, clipped to 60 characters: an error message quotes what it refuses,
    and a megabyte of junk must not make a megabyte of message."""
    text = repr(value)
    if len(text) > _SHOWN_INPUT_MAX:
        text = text[: _SHOWN_INPUT_MAX - 3] + "..."
    return text


_PROBLEMS_MAX: Final = 10


def describe_validation_error(exc: ValidationError, *, skip: int = 0, show_input: bool = True) -> str:
    """pydantic's report on a bad value as one line, one clause per problem, joined with "; ".

    A clause names the field and says what is wrong, without pydantic's "Value error, "
    prefix: `field 'ts': Input should be a valid number (got 'x')`. A string over its
    limit says by how much instead: `field 'text' is 2,345 characters long, over the
    limit of 2,000`. A problem with the value as a whole names no field. Past ten
    problems, the rest are only counted, so that a large bad value gives a readable line.

    :param skip: leading parts of each field path to leave out, such as the tag pydantic
        puts first for a member of a discriminated union.
    :param show_input: quote the offending value, clipped to 60 characters (never for a
        missing field, whose "value" is the object around it); leave it out where the
        reader wrote the value themselves or the message quotes it already.
    """
    errors = exc.errors(include_url=False)
    problems = [_describe(error, skip=skip, show_input=show_input) for error in errors[:_PROBLEMS_MAX]]
    if len(errors) > _PROBLEMS_MAX:
        problems.append(f"and {len(errors) - _PROBLEMS_MAX:,} more problems")
    return "; ".join(problems)


def _describe(error: ErrorDetails, *, skip: int, show_input: bool) -> str:
    where = ".".join(str(part) for part in error["loc"][skip:])
    subject = f"field {where!r}" if where else "the value"
    value = error.get("input")
    limit = error.get("ctx", {}).get("max_length")
    if error["type"] == "string_too_long" and isinstance(value, str) and limit is not None:
        return f"{subject} is {len(value):,} characters long, over the limit of {limit:,}"
    problem = error["msg"].removeprefix("Value error, ")
    if where:
        problem = f"{subject}: {problem}"
    if show_input and error["type"] != "missing":  # a missing field's input is its parent
        problem += f" (got {shown(value)})"
    return problem


def first_ctxbus_error(group: BaseExceptionGroup[BaseException]) -> CtxbusError | None:
    """A task group's first `CtxbusError`, looking into nested groups, or None.

    Raise it (`from group`) in place of the group, so the CLI prints it as one line:
    a task group wraps even a single failure, and the CLI prints only `CtxbusError`s
    as errors, anything else as a traceback.
    """
    for exc in group.exceptions:
        if isinstance(exc, CtxbusError):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (found := first_ctxbus_error(exc)):
            return found
    return None
