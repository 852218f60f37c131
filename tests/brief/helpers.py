"""Building briefs the way a coordinator would, for the brief tests."""

from __future__ import annotations

import itertools

from ctxbus.schemas import Domain
from ctxbus.schemas._brief import TaskBrief
from ctxbus.schemas._brief_messages import Commit, Committed, Proposal, Reply
from ctxbus.schemas._brief_ops import (
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
from ctxbus.schemas._brief_rules import apply, resolve, triage

DOMAIN = Domain.parse("alice/s1/t1")
OTHER = Domain.parse("bob/s1/t1")
NOW = 1_750_000_000.0
"""The clock of the rule tests at revision 0: `submit` judges a proposal, and stamps its
commit, 10 ms later for each revision of the brief (so the same proposals make the same
brief), unless a test says otherwise."""
TTL = 60.0
"""How long a proposal of the rule tests stays valid, unless a test says otherwise."""
_keys = itertools.count()


def next_key() -> str:
    """A fresh idempotency key."""
    return f"key-{next(_keys)}"


def proposal(
    domain: Domain,
    op: BriefOp,
    *,
    author: str = "agent-a",
    key: str | None = None,
    base: int | None = None,
    deadline: float = NOW + TTL,
) -> Proposal:
    """A proposal as an agent sends it."""
    return Proposal(domain=domain, author=author, op=op, key=key or next_key(), base_revision=base, deadline=deadline)


def submit(
    brief: TaskBrief,
    op: BriefOp,
    *,
    author: str = "agent-a",
    key: str | None = None,
    base: int | None = None,
    now: float | None = None,
    deadline: float | None = None,
) -> tuple[TaskBrief, Reply]:
    """What a coordinator does with a proposal, minus the bus: triage, commit, apply
    (`apply`, as a replica does, not the coordinator's shortcut)."""
    now = NOW + brief.revision * 0.01 if now is None else now
    sent = proposal(
        brief.domain, op, author=author, key=key, base=base, deadline=now + TTL if deadline is None else deadline
    )
    reply = triage(brief, sent, now=now)
    if reply is not None:
        return brief, reply
    commit = Commit.of(sent, revision=brief.revision + 1, ts=now, committed_by="coord-1", resolved=resolve(brief, op))
    return apply(brief, commit), Committed(revision=commit.revision)


def accept(
    brief: TaskBrief, op: BriefOp, *, author: str = "agent-a", key: str | None = None, now: float | None = None
) -> TaskBrief:
    """Submit `op` and insist that it was committed; the brief after it."""
    after, reply = submit(brief, op, author=author, key=key, now=now)
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
