"""What a coordinator tells operators: its status, and a report of each message it could not read.

Both cross a process boundary, so both are models validated where they arrive: the CLI
ignores a status answer that does not validate, and a dead-letter reader gets the same
fields whatever subject the letter came on.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxbus.schemas._domain import Domain
from ctxbus.schemas._envelope import Envelope, MessageType
from ctxbus.schemas._errors import DecodeError, EnvelopeInvalid, describe_validation_error
from ctxbus.schemas._stored import StoredValue

__all__ = ["CoordinatorStatus", "DEAD_LETTER_DETAIL_MAX", "DEAD_LETTER_QUOTE_MAX", "DeadLetter", "DeadLetterEnvelope"]

DEAD_LETTER_QUOTE_MAX: Final = 4096
"""How many bytes of the offending payload a dead letter quotes, at most."""
DEAD_LETTER_DETAIL_MAX: Final = 2000
"""Longest `DeadLetter.detail`, in characters; a longer error is clipped."""


class CoordinatorStatus(BaseModel):
    """One coordinator's answer on the status subject.

    Sent as JSON, not in an envelope: an envelope belongs to one domain and this answer
    speaks for the whole coordinator, and operators read it with `nats req` as well as
    with `ctxbus status`. Fields it does not know are ignored, so an older CLI still reads
    a newer coordinator's status.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    coordinator: str = Field(min_length=1)
    """The coordinator's id."""
    uptime_s: float = Field(ge=0)
    """Seconds since the coordinator started."""
    domains: tuple[str, ...] = ()
    """Every domain it has cached (`user/session/task`), sorted: of every tenant."""
    commits: int = Field(ge=0)
    """Commits appended, folds included."""
    commits_per_s: float = Field(default=0.0, ge=0)
    """Commits per second over the last few seconds."""
    duplicates: int = Field(default=0, ge=0)
    """Retried proposals answered with the revision they got the first time."""
    cas_retries: int = Field(default=0, ge=0)
    """Batches judged again after another writer moved the log."""
    forwarded: int = Field(default=0, ge=0)
    """Proposals passed on to the coordinator that owns their domain, and answered by it."""
    rejections: dict[str, int] = Field(default_factory=dict)
    """Proposals refused, by rejection code."""
    dead_letters: dict[str, int] = Field(default_factory=dict)
    """Messages dead-lettered, by reason."""
    expired: dict[str, int] = Field(default_factory=dict)
    """Proposals not committed for their deadline, by reason (`late`, `unrecognisable`)."""
    self_check_failures: int = Field(default=0, ge=0)
    """Snapshots not written because the cached brief was not what the log gives (a bug:
    each one is logged as an error, and the brief loaded again from the log)."""
    last_error: str | None = None
    """The last thing that went wrong, for an operator to read."""
    last_error_at: float | None = None
    """When it went wrong, Unix seconds."""

    def encode(self) -> bytes:
        """The JSON the coordinator answers with."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Parse and validate an answer on the status subject.

        :raises DecodeError: if `data` is not a JSON object.
        :raises EnvelopeInvalid: if a field is missing or of the wrong type.
        """
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            if any(problem["type"] in ("json_invalid", "model_type") for problem in exc.errors()):
                # The input is the whole answer: the caller has it already.
                problem = describe_validation_error(exc, show_input=False)
                raise DecodeError(f"a status answer must be a JSON object: {problem}") from exc
            raise EnvelopeInvalid(f"status answer is invalid: {describe_validation_error(exc)}") from exc


class DeadLetter(StoredValue):
    """A report on a message a coordinator could not read.

    On a domain's `dlq` subject it is the body of a `DeadLetterEnvelope` (`envelope`).
    A message whose subject names no valid domain has no domain to put on an envelope,
    so its report goes out as the bare msgpack map (`encode`, `decode`).
    """

    label: ClassVar[str] = "dead letter"

    reason: str
    """Why it was refused: an error class (`DecodeError`) or a code (`wrong_type`, `bad_subject`)."""
    detail: str = Field(max_length=DEAD_LETTER_DETAIL_MAX)
    """The error, as a human reads it."""
    subject: str
    """The subject the message came on."""
    size: int = Field(ge=0)
    """Its size in bytes."""
    payload_head: bytes = Field(max_length=DEAD_LETTER_QUOTE_MAX)
    """Its first bytes, up to `DEAD_LETTER_QUOTE_MAX`."""

    @classmethod
    def of(cls, *, reason: str, detail: str, subject: str, payload: bytes) -> Self:
        """The report on `payload`, which it quotes only the head of."""
        return cls(
            reason=reason,
            detail=detail if len(detail) <= DEAD_LETTER_DETAIL_MAX else detail[: DEAD_LETTER_DETAIL_MAX - 3] + "...",
            subject=subject,
            size=len(payload),
            payload_head=payload[:DEAD_LETTER_QUOTE_MAX],
        )

    def envelope(self, *, domain: Domain, sender: str) -> DeadLetterEnvelope:
        """This report as a `dead_letter` envelope, for `domain`'s `dlq` subject."""
        return DeadLetterEnvelope(domain=domain, sender=sender, body=self)


class DeadLetterEnvelope(Envelope[DeadLetter]):
    """A dead-letter report on a domain's `dlq` subject."""

    type: Literal[MessageType.DEAD_LETTER] = MessageType.DEAD_LETTER
