"""Building briefs the way a coordinator would, for the brief tests."""

from __future__ import annotations

import itertools

from schemas import Domain
from schemas._brief import TaskBrief
from schemas._brief_messages import Commit, Committed, Proposal, Reply
from schemas._brief_ops import (
    AddBlocker,
    AddConstraint,
    AddDecision,
    AddNote,
    AddPending,
    BriefOp,
    Complete,
    Reject,
    SetGoal,
)
from schemas._brief_rules import apply, resolve, triage

DOMAIN = Domain.parse("alice/s1/t1")
OTHER = Domain.parse("bob/s1/t1")
_keys = itertools.count()


def next_key() -> str:
    """A fresh idempotency key."""
    return f"key-{next(_keys)}"


def submit(
    brief: TaskBrief, op: BriefOp, *, author: str = "agent-a", key: str | None = None, base: int | None = None
) -> tuple[TaskBrief, Reply]:
    """What a coordinator does with a proposal, minus the bus: triage, commit, apply."""
    proposal = Proposal(domain=brief.domain, author=author, op=op, key=key or next_key(), base_revision=base)
    reply = triage(brief, proposal)
    if reply is not None:
        return brief, reply
    commit = Commit.of(
        proposal, revision=brief.revision + 1, ts=1.0, committed_by="coord-1", resolved=resolve(brief, op)
    )
    return apply(brief, commit), Committed(revision=commit.revision)


def accept(brief: TaskBrief, op: BriefOp, *, author: str = "agent-a", key: str | None = None) -> TaskBrief:
    """Submit `op` and insist that it was committed; the brief after it."""
    after, reply = submit(brief, op, author=author, key=key)
    assert reply == Committed(revision=brief.revision + 1), reply
    return after


def seeded() -> TaskBrief:
    """A brief with at least one item of every kind, built through the rules."""
    brief = TaskBrief(domain=DOMAIN)
    for op in (
        SetGoal(text="Ship the shared brief"),
        AddPending(text="write the rules"),
        AddPending(text="write the tests"),
        AddConstraint(text="schemas imports nothing of ours"),
        AddBlocker(text="nats-server not installed"),
        AddNote(text="targets are in issue 5"),
        AddDecision(option="msgpack envelope", rationale="compact"),
        AddDecision(option="JetStream CAS on the subject", rationale="one writer per base"),
    ):
        brief = accept(brief, op)
    rejection = Reject(option="local lock + unique index", reason="two coordinators would both commit")
    brief = accept(brief, rejection, author="agent-b")
    brief = accept(brief, AddDecision(option="msgpack envelope v1", supersedes=brief.decisions[0].id))
    return accept(brief, Complete(item_id=brief.pending[1].id, outcome="40 cases"))


def words(text: str) -> int:
    """A stand-in token counter: `schemas` must not depend on the real tokenizer."""
    return len(text.split())
