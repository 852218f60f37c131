"""A stored copy of a brief, so that a joining process replays only the log after it."""

from __future__ import annotations

from typing import Final, Literal, Self

from ctxbus.schemas._brief import AuthorId, BriefModel, Revision, TaskBrief
from ctxbus.schemas._envelope import DEFAULT_MAX_PAYLOAD, Envelope, MessageType
from ctxbus.schemas._errors import EnvelopeInvalid

__all__ = ["BriefSnapshot", "SnapshotEnvelope"]

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
        return SnapshotEnvelope(domain=self.brief.domain, sender=sender, body=self).encode(max_size=max_size)

    @classmethod
    def decode(cls, data: bytes, *, max_size: int = DEFAULT_MAX_PAYLOAD) -> Self:
        """Parse and validate a stored snapshot.

        :raises WireError: (a subclass of it) if `data` is not a valid envelope, is not
            a snapshot, or holds a brief of another domain than the envelope names.
        """
        envelope = SnapshotEnvelope.decode(data, max_size=max_size)
        snapshot = envelope.body
        if snapshot.brief.domain != envelope.domain:
            raise EnvelopeInvalid(f"snapshot envelope of {envelope.domain} holds the brief of {snapshot.brief.domain}")
        assert isinstance(snapshot, cls)
        return snapshot


class SnapshotEnvelope(Envelope[BriefSnapshot]):
    """A stored snapshot of a domain's brief."""

    type: Literal[MessageType.SNAPSHOT] = MessageType.SNAPSHOT
