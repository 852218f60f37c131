"""What agents and coordinators say about the brief: proposals, commits and replies.

An agent sends a `Proposal`; the coordinator answers with a `Reply`, either `Committed`
(with the revision) or a `Rejection` (with a code a program can branch on and a reason a
human can read), and appends a `Commit` to the domain's log for every accepted proposal.
Each travels in an envelope of its own kind (`ProposalEnvelope`, `ReplyEnvelope`,
`CommitEnvelope`), which validates the body with the envelope.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Self, TypeAlias

from pydantic import Field, SerializerFunctionWrapHandler, TypeAdapter, ValidationError, model_serializer

from ctxbus.schemas._brief import AuthorId, BriefModel, DomainField, IdempotencyKey, ItemId, Revision
from ctxbus.schemas._brief_ops import AGENT_OPS, BriefOp
from ctxbus.schemas._envelope import Envelope, MessageType
from ctxbus.schemas._errors import describe_validation_error

__all__ = [
    "LEGACY_PROPOSAL_TTL",
    "Commit",
    "CommitBatch",
    "CommitEnvelope",
    "Committed",
    "Proposal",
    "ProposalEnvelope",
    "Rejection",
    "RejectionCode",
    "Reply",
    "ReplyAdapter",
    "ReplyEnvelope",
    "refuse_agent_proposal",
]

LEGACY_PROPOSAL_TTL: Final = 60.0
"""Seconds after its commit a commit of an earlier version (which carries no deadline)
is taken to have been valid: the proposers of that version retried for 60 s."""

_REJECTION_REASON_MAX: Final = 8000


class Proposal(BriefModel):
    """An operation an agent asks the coordinator to commit to a domain's brief."""

    domain: DomainField
    """The brief it is for; accepts `'user/session/task'` or a `Domain`."""
    author: AuthorId
    """Id of the proposing agent; becomes the author of what the op creates."""
    op: BriefOp
    """What to change."""
    key: IdempotencyKey
    """Idempotency key, also the proposal's id: a retry must reuse it, so that a proposal
    committed once and proposed again is answered with its original revision."""
    deadline: float
    """Unix time, by the proposer's clock, after which no coordinator may commit it: the
    end of the proposer's retries (`Proposer.propose`'s `deadline`). A copy delivered
    later (a coordinator frozen, a network stalled) is refused as `expired`, and the
    key is remembered past it (`KEY_GRACE`), so no copy is ever committed twice."""
    base_revision: Revision | None = None
    """If set, commit only while the brief is still at this revision (optimistic
    concurrency for an op that only makes sense on the state the agent saw)."""


class Commit(BriefModel):
    """An accepted proposal at its place in the domain's log; replicas apply these in order."""

    domain: DomainField
    """The brief it belongs to; applying it to another domain's brief is an error."""
    revision: Annotated[int, Field(ge=1)]
    """The brief's revision once applied: one more than the revision it was validated at."""
    op: BriefOp
    """The change."""
    author: AuthorId
    """The proposing agent."""
    key: IdempotencyKey
    """The proposal's idempotency key. The brief remembers it (`applied_keys`), so a
    retry is answered as a duplicate; the log entry's message id is a digest of its
    batch's keys (`bus.batch_msg_id`), so a retried append is stored once."""
    ts: float
    """Commit time by the coordinator's clock, Unix seconds. The brief forgets committed
    keys by it (`TaskBrief.applied_keys`), so it is part of what replicas agree on, and
    of the log entry's message id (`bus.batch_msg_id`)."""
    committed_by: AuthorId
    """Id of the coordinator that committed it."""
    deadline: float | None = None
    """The proposal's deadline, so that every replica forgets its key at the same commit.
    None in commits of earlier versions: they count as `LEGACY_PROPOSAL_TTL` after `ts`."""
    resolved: tuple[ItemId, ...] = ()
    """Ids of the entries an op that names them by text was matched to when it was
    committed: the rejections a `reopen` lifts (see `resolve`). Replicas act on these ids
    rather than match the text again, which another Python's Unicode tables could do
    differently. Empty for every other op, and in commits of earlier versions, which
    replicas still match by text; left out of the wire form when empty."""

    @classmethod
    def of(
        cls, proposal: Proposal, *, revision: int, ts: float, committed_by: str, resolved: tuple[str, ...] = ()
    ) -> Self:
        """The commit that records `proposal` at `revision`."""
        return cls(
            domain=proposal.domain,
            revision=revision,
            op=proposal.op,
            author=proposal.author,
            key=proposal.key,
            ts=ts,
            committed_by=committed_by,
            deadline=proposal.deadline,
            resolved=resolved,
        )

    @property
    def key_deadline(self) -> int:
        """The deadline its key is remembered by, in whole seconds rounded up."""
        return math.ceil(self.ts + LEGACY_PROPOSAL_TTL if self.deadline is None else self.deadline)

    @model_serializer(mode="wrap")
    def _without_empty_resolved(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A replica of an earlier version refuses a commit with a field it does not know:
        # only the commits that need `resolved` carry it.
        data: dict[str, Any] = handler(self)
        if not self.resolved:
            data.pop("resolved", None)  # already left out by an `exclude` of the caller's
        return data


class CommitBatch(BriefModel):
    """The body of one log entry: commits of consecutive revisions, applied in order.

    A coordinator under load appends every proposal waiting for a domain in one entry
    (group commit), so one compare-and-set round trip carries many commits.
    """

    commits: Annotated[tuple[Commit, ...], Field(min_length=1)]
    """At least one; each one revision after the one before it."""


class RejectionCode(StrEnum):
    """Why a proposal was refused, for programs; `Rejection.reason` says it for people."""

    INVALID_OP = "invalid_op"
    """The body is not a valid proposal: unknown op, missing field, wrong type."""
    FIELD_TOO_LONG = "field_too_long"
    """A field is longer than its limit."""
    WRONG_DOMAIN = "wrong_domain"
    """The proposal names another domain than the brief it was validated against."""
    DOMAIN_CLOSED = "domain_closed"
    """The domain is closed; nothing more may change."""
    STALE_BASE = "stale_base"
    """The brief has moved on since `base_revision`."""
    BUSY = "busy"
    """Not a verdict on the proposal: the log kept moving under the coordinator (heavy
    contention between coordinators). Retry with the same key; `Proposer` does."""
    BASE_AHEAD = "base_ahead"
    """`base_revision` is beyond the brief's revision: the validator's copy is behind and
    should be reloaded before validating again."""
    UNKNOWN_ITEM = "unknown_item"
    """An id, or an option to reopen, matches nothing of the kind the op needs."""
    MISSING_REASON = "missing_reason"
    """A reject, reopen or constraint removal came without a reason."""
    REJECTED_OPTION = "rejected_option"
    """A decision adopts an option that is rejected and was not reopened."""
    DUPLICATE = "duplicate"
    """The same content is already there (compared as `normalize` does: ignoring case,
    spacing, Unicode form and invisible characters)."""
    EXPIRED = "expired"
    """Not committed: the proposal's deadline passed before a coordinator could commit it
    (it was delivered late, or sat in a frozen coordinator), or it is too old to be told
    apart from a retry of a commit the brief no longer remembers. An earlier attempt of
    it may have been committed: its key is in the brief if so."""
    KEY_REUSED = "key_reused"
    """The idempotency key was committed already, for another op: a new op needs a new key."""
    CONFLICT = "conflict"
    """The op contradicts the brief: completing a done item, superseding a superseded
    decision, rejecting the active decision's option."""


class Rejection(BriefModel):
    """A refused proposal; also the `rejected` variant of `Reply`."""

    status: Literal["rejected"] = "rejected"
    """Tag of the reply union."""
    code: RejectionCode
    """Machine-readable cause."""
    reason: Annotated[str, Field(min_length=1, max_length=_REJECTION_REASON_MAX)]
    """One or more sentences that say what was wrong, naming the items involved."""

    @classmethod
    def clipped(cls, code: RejectionCode, reason: str) -> Self:
        """A rejection whose reason comes from elsewhere (an exception's text, which may
        quote what was sent at any length), cut to fit."""
        if len(reason) > _REJECTION_REASON_MAX:
            reason = reason[: _REJECTION_REASON_MAX - 3] + "..."
        return cls(code=code, reason=reason)

    @classmethod
    def from_validation_error(cls, exc: ValidationError, *, skip: int = 0) -> Self:
        """Turn pydantic's report on a bad proposal body into a rejection.

        `field_too_long` if any field is over its limit (the coordinator counts these
        apart: they are usually a prompt gone wrong), `invalid_op` otherwise. `skip`
        leaves out leading parts of each field's path (the envelope's `body`).
        """
        errors = exc.errors(include_url=False)
        too_long = any(e["type"] == "string_too_long" for e in errors)
        code = RejectionCode.FIELD_TOO_LONG if too_long else RejectionCode.INVALID_OP
        return cls.clipped(code, describe_validation_error(exc, skip=skip))


class Committed(BriefModel):
    """An accepted proposal; the `committed` variant of `Reply`."""

    status: Literal["committed"] = "committed"
    """Tag of the reply union."""
    revision: Annotated[int, Field(ge=1)]
    """Revision of the commit that carries the proposal."""
    duplicate: bool = False
    """True when the key had been committed before: `revision` is that first commit's,
    and nothing new was appended."""


Reply: TypeAlias = Annotated[Committed | Rejection, Field(discriminator="status")]
"""The coordinator's answer to a proposal."""

ReplyAdapter: TypeAdapter[Reply] = TypeAdapter(Reply)
"""Validates a reply body: `ReplyAdapter.validate_python(raw)`."""


def refuse_agent_proposal(proposal: Proposal) -> Rejection | None:
    """Why no agent may send `proposal`, or None: `fold_done` is the coordinators' own
    op, done when the brief is over its budget, and they do not send themselves
    proposals. Any other check needs the brief (`triage`)."""
    if proposal.op.op not in AGENT_OPS:  # fold_done
        return Rejection(
            code=RejectionCode.INVALID_OP,
            reason=f"{proposal.op.op} is the coordinators' own operation, done when the brief is over its budget",
        )
    return None


class ProposalEnvelope(Envelope[Proposal]):
    """An agent's proposal on its way to the coordinators."""

    type: Literal[MessageType.PROPOSAL] = MessageType.PROPOSAL


class ReplyEnvelope(Envelope[Reply]):
    """A coordinator's answer to one proposal; `sender` names the coordinator."""

    type: Literal[MessageType.REPLY] = MessageType.REPLY


class CommitEnvelope(Envelope[CommitBatch]):
    """One entry of a domain's log."""

    type: Literal[MessageType.COMMIT] = MessageType.COMMIT
