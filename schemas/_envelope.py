"""The wire envelope: one versioned msgpack map around every message ctxbus sends.

Both ends validate it with pydantic, so a malformed message is caught where it arrives,
with an error that names the field, the limit or the version that was wrong.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any, Final, Self

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from schemas._domain import Domain
from schemas._errors import (
    DecodeError,
    EnvelopeInvalid,
    PayloadTooLarge,
    SchemaVersionError,
    describe_validation_error,
)
from schemas._ids import unique_id

__all__ = [
    "ENVELOPE_VERSION",
    "SUPPORTED_VERSIONS",
    "DEFAULT_MAX_PAYLOAD",
    "Envelope",
    "MessageType",
]

ENVELOPE_VERSION: Final = 1
"""Version this build writes."""

SUPPORTED_VERSIONS: Final = (1,)
"""Versions this build reads."""

DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
"""NATS's default `max_payload` (1 MiB); a bigger message would be refused by the server."""

_ID_MAX = 128
_SENDER_MAX = 128


class MessageType(StrEnum):
    """What an envelope's body is; receivers dispatch on it."""

    PROPOSAL = "proposal"
    REPLY = "reply"
    COMMIT = "commit"
    SNAPSHOT = "snapshot"
    EVENT = "event"
    PRESENCE = "presence"
    LEASE = "lease"
    STATUS = "status"
    DEAD_LETTER = "dead_letter"


class Envelope(BaseModel):
    """`{v, type, id, domain, sender, ts, body}`, the unit every subject carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = ENVELOPE_VERSION
    """Schema version of the envelope; see `SUPPORTED_VERSIONS`."""
    type: MessageType
    """Kind of body."""
    id: Annotated[str, Field(min_length=1, max_length=_ID_MAX)] = Field(default_factory=unique_id)
    """Unique message id, used for tracing and dead-letter reports."""
    domain: Domain
    """The `user/session/task` this message belongs to; it never leaves that domain."""
    sender: Annotated[str, Field(min_length=1, max_length=_SENDER_MAX)]
    """Agent or coordinator id of the process that sent it."""
    ts: float = Field(default_factory=time.time)
    """Send time, Unix seconds."""
    body: dict[str, Any] = Field(default_factory=dict)
    """Type-specific payload; validated by the model of `type` at the receiver."""

    @field_validator("domain", mode="before")
    @classmethod
    def _parse_domain(cls, value: object) -> object:
        if isinstance(value, str):
            return Domain.parse(value)
        return value

    @field_serializer("domain")
    def _render_domain(self, domain: Domain) -> str:
        return str(domain)

    def encode(self, *, max_size: int = DEFAULT_MAX_PAYLOAD) -> bytes:
        """Serialize to msgpack.

        :raises PayloadTooLarge: if the result is larger than `max_size` bytes.
        """
        # The fields are validated already; packing them as they are skips a second
        # walk of the body by the serializer (`model_dump` would return the same map).
        fields = {
            "v": self.v,
            "type": self.type,
            "id": self.id,
            "domain": str(self.domain),
            "sender": self.sender,
            "ts": self.ts,
            "body": self.body,
        }
        data: bytes = msgpack.packb(fields, use_bin_type=True)
        if len(data) > max_size:
            raise PayloadTooLarge(len(data), max_size)
        return data

    @classmethod
    def decode(cls, data: bytes, *, max_size: int | None = DEFAULT_MAX_PAYLOAD) -> Self:
        """Parse and validate msgpack bytes from the wire.

        `max_size=None` reads data of any size: for what a server already size-checked
        when it stored it (a log entry), which may have a larger limit than the default.

        :raises PayloadTooLarge: before any parsing, if `data` is over `max_size` bytes.
        :raises DecodeError: if `data` is not one complete msgpack map.
        :raises SchemaVersionError: if `v` is not a supported version.
        :raises EnvelopeInvalid: if any field is missing, unknown or of the wrong type.
        """
        if max_size is not None and len(data) > max_size:
            raise PayloadTooLarge(len(data), max_size)
        raw = _unpack(data)
        if "v" not in raw:
            raise SchemaVersionError(None, SUPPORTED_VERSIONS, missing=True)
        version = raw["v"]
        if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
            raise SchemaVersionError(version, SUPPORTED_VERSIONS)
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:  # a bad domain too: pydantic wraps InvalidDomain
            raise EnvelopeInvalid(describe_validation_error(exc)) from exc


def _unpack(data: bytes) -> dict[str, Any]:
    if not data:
        raise DecodeError("message is empty; expected a msgpack map")
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except msgpack.ExtraData as exc:
        raise DecodeError(f"message has {len(exc.extra)} trailing bytes after the msgpack map") from exc
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise DecodeError(f"message is not valid msgpack ({exc})") from exc
    if not isinstance(raw, dict):
        raise DecodeError(f"message is a msgpack {type(raw).__name__}, expected a map")
    return raw
