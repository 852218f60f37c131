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
    │   └── PayloadTooLarge   the encoded message exceeds the size limit
    ├── ReplayError           a commit cannot follow the brief (defined with the rules)
    └── BusError              talking to NATS failed (defined in `bus`)

`InvalidDomain` is also a `WireError` when it comes off the wire: `Envelope.decode`
raises `EnvelopeInvalid` naming the `domain` field in that case.
"""

from __future__ import annotations

__all__ = [
    "CtxbusError",
    "UsageError",
    "InvalidDomain",
    "WireError",
    "DecodeError",
    "SchemaVersionError",
    "EnvelopeInvalid",
    "PayloadTooLarge",
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

    def __init__(self, version: object, supported: tuple[int, ...]) -> None:
        self.version = version
        self.supported = supported
        wanted = ", ".join(str(v) for v in supported)
        if version is None:
            super().__init__(f"the envelope has no version field 'v'; this build speaks v{wanted}")
        else:
            super().__init__(f"unsupported envelope version {version!r}; this build speaks v{wanted}")


class EnvelopeInvalid(WireError):
    """Raised when an envelope field is missing or has the wrong type or value."""


class PayloadTooLarge(WireError):
    """Raised when an encoded message is larger than the allowed maximum."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"message is {size:,} bytes, over the limit of {limit:,} bytes")
