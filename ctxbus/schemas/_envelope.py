"""The wire envelope: one versioned msgpack map around every message ctxbus sends.

Both ends validate it with pydantic, so a malformed message is caught where it arrives,
with an error that names the field, the limit or the version that was wrong. Each kind
of message has an envelope class of its own whose body is typed (`ProposalEnvelope`
carries a `Proposal`, `CommitEnvelope` a `CommitBatch`, ...): `decode` on that class
validates the envelope and its body in one pass, so a receiver never checks a body by
hand, and a message of another kind is refused before its body is looked at.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, Any, Final, Generic, Self, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from ctxbus.schemas._domain import Domain
from ctxbus.schemas._errors import (
    BodyInvalid,
    DecodeError,
    EnvelopeInvalid,
    PayloadTooLarge,
    SchemaVersionError,
    WrongMessageType,
    describe_validation_error,
)
from ctxbus.schemas._ids import unique_id

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

BodyT = TypeVar("BodyT")


class MessageType(StrEnum):
    """What an envelope's body is; each has its envelope class."""

    PROPOSAL = "proposal"
    """An agent's `Proposal`, to the coordinators (`ProposalEnvelope`)."""
    REPLY = "reply"
    """A coordinator's `Reply` to a proposal (`ReplyEnvelope`)."""
    COMMIT = "commit"
    """A log entry: a `CommitBatch` (`CommitEnvelope`)."""
    SNAPSHOT = "snapshot"
    """A stored `BriefSnapshot` (`SnapshotEnvelope`)."""
    DEAD_LETTER = "dead_letter"
    """A `DeadLetter` report on a domain's `dlq` subject (`DeadLetterEnvelope`)."""


class Envelope(BaseModel, Generic[BodyT]):
    """`{v, type, id, domain, sender, ts, body}`, the unit every subject carries.

    Use the class of the message's kind (`ProposalEnvelope`, ...), whose `type` is fixed
    and whose body is a model; `Envelope` itself, with a body of any shape, is for tools
    that look at messages of every kind.
    """

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
    body: BodyT
    """The payload, validated as the model of `type`."""

    @classmethod
    def kind(cls) -> MessageType | None:
        """The one `type` this class carries (its field's default), or None for
        `Envelope` itself, which takes any."""
        default = cls.model_fields["type"].default
        return default if isinstance(default, MessageType) else None

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
        # Python mode, not JSON: bytes stay bytes (msgpack's bin type), and enums and
        # tuples pack as the strings and arrays they are.
        data: bytes = msgpack.packb(self.model_dump(mode="python"), use_bin_type=True)
        if len(data) > max_size:
            raise PayloadTooLarge(len(data), max_size)
        return data

    @classmethod
    def decode(cls, data: bytes, *, max_size: int | None = DEFAULT_MAX_PAYLOAD) -> Self:
        """Parse and validate msgpack bytes from the wire, body included, in one pass.

        `max_size=None` reads data of any size: for what a server already size-checked
        when it stored it (a log entry), which may have a larger limit than the default.

        :raises PayloadTooLarge: before any parsing, if `data` is over `max_size` bytes.
        :raises DecodeError: if `data` is not one complete msgpack map.
        :raises SchemaVersionError: if `v` is not a supported version.
        :raises WrongMessageType: if the envelope is of another kind than this class's.
        :raises BodyInvalid: if the envelope is sound but its body is not the model of
            its kind (the caller may answer the sender: the mistake is in what it sent).
        :raises EnvelopeInvalid: if any other field is missing, unknown or of the wrong type.
        """
        if max_size is not None and len(data) > max_size:
            raise PayloadTooLarge(len(data), max_size)
        raw = _unpack(data)
        if "v" not in raw:
            raise SchemaVersionError(None, SUPPORTED_VERSIONS, missing=True)
        version = raw["v"]
        if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
            raise SchemaVersionError(version, SUPPORTED_VERSIONS)
        kind = cls.kind()
        if kind is not None and raw.get("type") != kind:
            raise WrongMessageType(kind, raw.get("type"))
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:  # a bad domain too: pydantic wraps InvalidDomain
            if all(error["loc"][:1] == ("body",) for error in exc.errors()):
                raise BodyInvalid(exc, kind=str(kind or raw.get("type"))) from exc
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
