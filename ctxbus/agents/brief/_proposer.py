"""Proposing changes to the brief: request/reply to the coordinator group, retried safely.

Proposals go to the coordinator queue group, then straight to the coordinator that
answered last: where several coordinators serve, that is the one committing the domain.

A proposal carries an idempotency key and a deadline. If the reply is lost (coordinator
killed, NATS restarting), the proposer sends the same proposal with the same key again
until a coordinator answers or the deadline passes; the brief remembers committed keys
past the deadline, so a proposal that was in fact committed is answered with its
original revision instead of being committed twice, and no coordinator commits a copy
that reaches it after the deadline (delivered late, or held by a frozen coordinator).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from pydantic import ValidationError

from ctxbus.bus import GEN_AI, BusUnavailable, NatsClient, Retry, Verb, request, routed, span, subject
from ctxbus.schemas import (
    PROPOSAL_TTL_MAX,
    BriefOp,
    Committed,
    Domain,
    Proposal,
    ProposalEnvelope,
    Rejection,
    RejectionCode,
    Reply,
    ReplyEnvelope,
    UsageError,
    WireError,
    describe_validation_error,
    unique_id,
)

__all__ = ["Proposer", "ProposalUnanswered", "DEFAULT_PROPOSE_DEADLINE"]

log = logging.getLogger(__name__)

DEFAULT_PROPOSE_DEADLINE: Final = 60.0
"""Seconds `propose` keeps retrying before it gives up; covers a NATS restart. It is
also the proposal's own deadline: no coordinator commits it later than that."""

_ATTEMPT_TIMEOUT: Final = 2.0


class Proposer:
    """Sends one agent's proposals for one domain (a `Domain`, or `'user/session/task'`)."""

    def __init__(self, client: NatsClient, domain: Domain | str, *, agent_id: str) -> None:
        """Answers are believed as they come: on a server with auth only coordinators may
        answer anyone (`docs/operations.md`, "Replies"); the log entries they commit are
        signed, and checked by every replica."""
        self.domain = Domain.of(domain)
        self.agent_id = agent_id
        self._client = client
        self._subject = subject(self.domain, Verb.PROPOSE)
        self._direct: str | None = None
        """The coordinator that answered last, asked first: where coordinators share a
        domain, the one it passes proposals to (see the coordinator's `_forward`)."""

    def __repr__(self) -> str:
        return f"<Proposer {self.agent_id!r} -> {self.domain}>"

    async def propose(
        self,
        op: BriefOp,
        *,
        key: str | None = None,
        base_revision: int | None = None,
        attempt_timeout: float = _ATTEMPT_TIMEOUT,
        deadline: float = DEFAULT_PROPOSE_DEADLINE,
    ) -> Reply:
        """Propose `op` and return the coordinator's answer (committed or rejected).

        :param key: idempotency key; a fresh one when not given. Reuse it to retry.
        :param deadline: seconds to keep asking, and the proposal's own deadline (at
            most `PROPOSAL_TTL_MAX`): no coordinator commits it after that.
        A `busy` answer (coordinators contending for the log, or one overloaded) and an
        unreadable one are retried like a lost reply, with the same key, through the
        whole group.

        :raises ProposalUnanswered: if no coordinator answered within `deadline` seconds.
            The proposal is then committed at most once, and none but an append sent
            before the deadline can still commit it; its key tells (see the exception).
        :raises UsageError: if the op, key, base revision, deadline or agent id is not one
            a coordinator could take (an empty key, say, which would defeat idempotency).
        """
        if not 0 < deadline <= PROPOSAL_TTL_MAX:
            raise UsageError(
                f"a proposal's deadline must be more than 0 and at most {PROPOSAL_TTL_MAX:.0f}s, got {deadline!r}"
            )
        try:
            proposal = Proposal(
                domain=self.domain,
                author=self.agent_id,
                op=op,
                key=unique_id() if key is None else key,
                deadline=time.time() + deadline,
                base_revision=base_revision,
            )
        except ValidationError as exc:
            raise UsageError(f"cannot propose {_shown_op(op)}: {describe_validation_error(exc)}") from exc
        attributes = {GEN_AI.AGENT_ID: self.agent_id, "ctxbus.domain": str(self.domain), "ctxbus.op": op.op}
        with span("ctxbus.propose", attributes, kind="client") as current:
            reply = await self._send(proposal, attempt_timeout, deadline)
            current.set_attribute("ctxbus.outcome", _outcome(reply))
            if isinstance(reply, Committed):
                current.set_attribute("ctxbus.revision", reply.revision)
            return reply

    async def _send(self, proposal: Proposal, attempt_timeout: float, deadline: float) -> Reply:
        """Ask the group, then the coordinator that answered last, until one answers."""
        data = ProposalEnvelope(domain=self.domain, sender=self.agent_id, body=proposal).encode()
        retry = Retry(deadline)
        while (left := retry.left()) > 0:
            direct = self._direct
            try:
                answer = await request(
                    self._client,
                    direct or self._subject,
                    data,
                    timeout=min(attempt_timeout, left),
                )
            except BusUnavailable as exc:
                if direct is not None:
                    log.debug("coordinator at %s gone (%s); asking the group", direct, exc)
                    self._direct = None
                    continue
                log.debug("proposal %s not answered (%s); retrying with the same key", proposal.key, exc)
                await retry.pause()
                continue
            try:
                reply, coordinator = _parse_reply(answer)
            except WireError as exc:  # as good as lost: the proposal may or may not be committed
                log.warning("unreadable answer to proposal %s (%s); retrying with the same key", proposal.key, exc)
                self._direct = None
                await retry.pause()
                continue
            if isinstance(reply, Rejection) and reply.code is RejectionCode.BUSY:
                log.debug("proposal %s met a busy coordinator; retrying with the same key", proposal.key)
                self._direct = None  # another member of the group may be free
                await retry.pause()
                continue
            self._direct = routed(self._subject, coordinator)
            return reply
        raise ProposalUnanswered(proposal.key, deadline)


class ProposalUnanswered(BusUnavailable):
    """No coordinator answered a proposal before its deadline. It may have been
    committed, once at most, and a copy reaching a coordinator later is refused; the
    brief remembers its key for `KEY_GRACE` past the deadline, so proposing the same op
    again with `key` within that time tells, without committing it twice."""

    def __init__(self, key: str, deadline: float, *, retry: str | None = None) -> None:
        self.key = key
        retry = retry or f"propose again with key={key!r}"
        super().__init__(
            f"no coordinator answered proposal {key} within {deadline:g}s (is one running? `ctxbus up`, or "
            f"`ctxbus coordinator` against this server); it may still be committed: {retry} to find out "
            "without committing it twice"
        )


def _outcome(reply: Reply) -> str:
    """A reply in a word, for a span: committed, duplicate, or the rejection's code."""
    if isinstance(reply, Committed):
        return "duplicate" if reply.duplicate else "committed"
    return str(reply.code)


def _shown_op(op: object) -> str:
    tag = getattr(op, "op", None)
    return repr(tag) if isinstance(tag, str) else f"a {type(op).__name__}"


def _parse_reply(data: bytes) -> tuple[Reply, str]:
    """The reply, and the id of the coordinator that made it.

    :raises WireError: if `data` is not a reply envelope with a valid reply.
    """
    envelope = ReplyEnvelope.decode(data)
    return envelope.body, envelope.sender
