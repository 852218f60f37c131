"""A stored copy of a brief, so that a joining process replays only the log after it."""

from __future__ import annotations

from typing import Final, Self

from pydantic import ValidationError

from schemas._brief import AuthorId, BriefModel, Revision, TaskBrief
from schemas._envelope import DEFAULT_MAX_PAYLOAD, Envelope, MessageType
from schemas._errors import EnvelopeInvalid, describe_validation_error

__all__ = ["BriefSnapshot"]

_SENDER: Final = "ctxbus-snapshot"


class BriefSnapshot(BriefModel):
    """A brief and the position in the domain's log it reflects.

    Stored in a `snapshot` envelope, so a snapshot is versioned, size-checked and
    rejected with the same errors as any message off the wire.
    """

    seq: Revision
    """Stream sequence of the last log entry applied to `brief`; replay resumes after it."""
    brief: TaskBrief
    """The brief after that entry."""

    def encode(self, *, sender: AuthorId = _SENDER, max_size: int = DEFAULT_MAX_PAYLOAD) -> bytes:
        """Serialize as a msgpack `snapshot` envelope.

        :raises PayloadTooLarge: if the result is larger than `max_size` bytes.
        """
        envelope = Envelope(
            type=MessageType.SNAPSHOT,
            domain=self.brief.domain,
            sender=sender,
            body=self.model_dump(mode="json"),
        )
        return envelope.encode(max_size=max_size)

    @classmethod
    def decode(cls, data: bytes, *, max_size: int = DEFAULT_MAX_PAYLOAD) -> Self:
        """Parse and validate a stored snapshot.

        :raises WireError: (a subclass of it) if `data` is not a valid envelope, is not
            a snapshot, or holds a brief of another domain than the envelope names.
        """
        envelope = Envelope.decode(data, max_size=max_size)
        if envelope.type is not MessageType.SNAPSHOT:
            raise EnvelopeInvalid(f"expected a snapshot envelope, got a {envelope.type} envelope")
        try:
            snapshot = cls.model_validate(envelope.body)
        except ValidationError as exc:
            raise EnvelopeInvalid(f"snapshot body is invalid: {describe_validation_error(exc)}") from exc
        if snapshot.brief.domain != envelope.domain:
            raise EnvelopeInvalid(f"snapshot envelope of {envelope.domain} holds the brief of {snapshot.brief.domain}")
        return snapshot
