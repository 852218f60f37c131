"""Shapes of everything that crosses a process boundary or is stored.

Imports nothing else of ctxbus: `bus`, `agents` and `coordinator` all build on it.
"""

from schemas._domain import DOMAIN_TOKEN_MAX, Domain, validate_token
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
    "DOMAIN_TOKEN_MAX",
    "DecodeError",
    "Domain",
    "EnvelopeInvalid",
    "InvalidDomain",
    "PayloadTooLarge",
    "SchemaVersionError",
    "UsageError",
    "WireError",
    "validate_token",
]
