"""Shapes of everything that crosses a process boundary or is stored.

Imports nothing else of ctxbus: `bus`, `agents` and `coordinator` all build on it.
"""

from schemas._domain import DOMAIN_TOKEN_MAX, Domain, validate_token
from schemas._envelope import DEFAULT_MAX_PAYLOAD, ENVELOPE_VERSION, SUPPORTED_VERSIONS, Envelope, MessageType
from schemas._lease import LeaseRecord
from schemas._errors import (
    CtxbusError,
    DecodeError,
    EnvelopeInvalid,
    InvalidDomain,
    PayloadTooLarge,
    SchemaVersionError,
    UsageError,
    WireError,
)

__all__ = [
    "CtxbusError",
    "DEFAULT_MAX_PAYLOAD",
    "DOMAIN_TOKEN_MAX",
    "DecodeError",
    "Domain",
    "ENVELOPE_VERSION",
    "Envelope",
    "EnvelopeInvalid",
    "LeaseRecord",
    "MessageType",
    "InvalidDomain",
    "PayloadTooLarge",
    "SUPPORTED_VERSIONS",
    "SchemaVersionError",
    "UsageError",
    "WireError",
    "validate_token",
]
