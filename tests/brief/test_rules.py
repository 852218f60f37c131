"""Every op accepted, every rejection code, bad bodies and idempotent retries."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbus.schemas import BodyInvalid, Domain, ProposalEnvelope, judge_batch, refuse_agent_proposal
from ctxbus.schemas._brief import (
    CLOCK_SKEW_MAX,
    KEY_GRACE,
    KEYS_PRUNE_EVERY,
    KEYS_REMEMBERED,
    KEYS_TRIM_SLACK,
    PROPOSAL_TTL_MAX,
    TEXT_MAX,
    Closure,
    DoneSummary,
    Item,
    TaskBrief,
    brief_hash,
    normalize,
)
from ctxbus.schemas._brief_messages import (
    Committed,
    Proposal,
    Rejection,
    RejectionCode,
    Reply,
    ReplyAdapter,
)
from ctxbus.schemas._brief_ops import (
    AddBlocker,
    AddConstraint,
    AddDecision,
    AddNote,
    AddPending,
    BriefOp,
    Close,
    Complete,
    FoldDone,
    Reject,
    RemoveConstraint,
    Reopen,
    ResolveBlocker,
    SetGoal,
    op_fingerprint,
)
from ctxbus.schemas._brief_rules import applied_revision, triage, validate
from tests.brief.helpers import DOMAIN, NOW, OTHER, TTL, accept, proposal, seeded, submit

# --- every op, accepted ---------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    name: str
    build: Callable[[TaskBrief], BriefOp]
    effect: Callable[[TaskBrief, TaskBrief], tuple[object, object]]
    """Given the brief before and after, what changed and what should have."""


def _newest(items: tuple[Item, ...]) -> tuple[str, str, int]:
    """Text, author and revision of the newest item."""
    return items[-1].text, items[-1].author, items[-1].rev


ACCEPTED = [
    Accepted(
        "set_goal",
        lambda b: SetGoal(text="Ship it today"),
        lambda b, a: (a.goal and (a.goal.id, a.goal.text), (f"g{a.revision}", "Ship it today")),
    ),
    Accepted(
        "add_pending",
        lambda b: AddPending(text="  benchmark it "),
        lambda b, a: (
            (a.pending[:-1], _newest(a.pending)),
            (b.pending, ("benchmark it", "agent-a", a.revision)),
        ),
    ),
    Accepted(
        "complete",
        lambda b: Complete(item_id=b.pending[0].id, outcome="done"),
        lambda b, a: (
            (a.pending, a.done[-1].model_dump()),
            (
                b.pending[1:],
                {
                    **b.pending[0].model_dump(),
                    "done_by": "agent-a",
                    "done_rev": a.revision,
                    "outcome": "done",
                },
            ),
        ),
    ),
    Accepted(
        "add_decision",
        lambda b: AddDecision(option="embedded nats", rationale="no setup"),
        lambda b, a: (
            (a.decisions[:-1], a.decisions[-1].option, a.decisions[-1].rationale),
            (b.decisions, "embedded nats", "no setup"),
        ),
    ),
    Accepted(
        "add_decision_superseding",
        lambda b: AddDecision(option="KV CAS", supersedes=b.active_decisions()[-1].id),
        lambda b, a: (
            (a.decisions[len(b.decisions) - 1].superseded_by, a.decisions[-1].supersedes, len(a.decisions)),
            (a.decisions[-1].id, b.active_decisions()[-1].id, len(b.decisions) + 1),
        ),
    ),
    Accepted(
        "reject",
        lambda b: Reject(option="polling", reason="too slow"),
        lambda b, a: (
            (a.rejected[:-1], a.rejected[-1].option, a.rejected[-1].reason),
            (b.rejected, "polling", "too slow"),
        ),
    ),
    Accepted(
        "reopen",
        lambda b: Reopen(option="  LOCAL Lock +   unique index ", reason="new facts"),
        lambda b, a: (a.rejected, tuple(r for r in b.rejected if r.option != "local lock + unique index")),
    ),
    Accepted(
        "add_constraint",
        lambda b: AddConstraint(text="p99 under 5 ms"),
        lambda b, a: ((a.constraints[:-1], a.constraints[-1].text), (b.constraints, "p99 under 5 ms")),
    ),
    Accepted(
        "remove_constraint",
        lambda b: RemoveConstraint(item_id=b.constraints[0].id, reason="moved to CI"),
        lambda b, a: (a.constraints, b.constraints[1:]),
    ),
    Accepted(
        "add_blocker",
        lambda b: AddBlocker(text="CI is red"),
        lambda b, a: ((a.blockers[:-1], a.blockers[-1].text), (b.blockers, "CI is red")),
    ),
    Accepted(
        "resolve_blocker",
        lambda b: ResolveBlocker(item_id=b.blockers[0].id),
        lambda b, a: (a.blockers, b.blockers[1:]),
    ),
    Accepted(
        "add_note",
        lambda b: AddNote(text="ask agent-b first"),
        lambda b, a: (
            (a.notes[:-1], _newest(a.notes)),
            (b.notes, ("ask agent-b first", "agent-a", a.revision)),
        ),
    ),
    Accepted(
        "close",
        lambda b: Close(reason="shipped"),
        lambda b, a: (a.closed, Closure(author="agent-a", rev=a.revision, reason="shipped")),
    ),
    Accepted(
        "fold_done",
        lambda b: FoldDone(item_ids=(b.done[0].id,)),
        lambda b, a: (
            (a.done, a.done_summary),
            (b.done[1:], DoneSummary(facts=(b.done[0].fact,), through_rev=a.revision)),
        ),
    ),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.name)
def test_op_is_committed_and_applied(case: Accepted) -> None:
    before = seeded()
    digest = brief_hash(before)
    after, reply = submit(before, case.build(before))
    assert reply == Committed(revision=before.revision + 1)
    assert after.revision == before.revision + 1
    actual, expected = case.effect(before, after)
    assert actual == expected
    assert brief_hash(before) == digest, "apply changed its input"


def test_every_op_has_an_accepted_case() -> None:
    tags = {get_args(model.model_fields["op"].annotation)[0] for model in get_args(get_args(BriefOp)[0])}
    assert tags == {case.build(seeded()).op for case in ACCEPTED}


def test_reopened_option_can_be_decided() -> None:
    brief = accept(seeded(), Reopen(option="local lock + unique index", reason="index is per domain"))
    after = accept(brief, AddDecision(option="Local lock + unique index"))
    assert after.active_decisions()[-1].option == "Local lock + unique index"


@pytest.mark.parametrize(
    "disguise",
    [
        "local lock+unique index",  # spacing by punctuation
        "ｌｏｃａｌ lock + unique index",  # full-width letters
        "local\u200b lock + unique index",  # zero-width space
        "lo\xadcal lock + unique index",  # soft hyphen
    ],
    ids=["punctuation", "fullwidth", "zero_width", "soft_hyphen"],
)
def test_a_rejected_option_cannot_be_adopted_in_disguise(disguise: str) -> None:
    refusal = validate(seeded(), _proposal(AddDecision(option=disguise)))
    assert isinstance(refusal, Rejection) and refusal.code is RejectionCode.REJECTED_OPTION


def test_composed_and_decomposed_accents_are_one_option() -> None:
    brief = accept(seeded(), Reject(option="caf\u00e9 lock", reason="deadlocks"))
    refusal = validate(brief, _proposal(AddDecision(option="cafe\u0301 lock")))
    assert isinstance(refusal, Rejection) and refusal.code is RejectionCode.REJECTED_OPTION
    reopened = accept(brief, Reopen(option="CAFE\u0301 LOCK", reason="fixed upstream"))
    assert [r.option for r in reopened.rejected] == [r.option for r in seeded().rejected]


@pytest.mark.parametrize("invisible", ["\u200b", "\x1f", "\u2060", "\ufeff"])
def test_an_invisible_reason_is_no_reason(invisible: str) -> None:
    op = RemoveConstraint(item_id=seeded().constraints[0].id, reason=invisible)
    refusal = validate(seeded(), _proposal(op))
    assert isinstance(refusal, Rejection) and refusal.code is RejectionCode.MISSING_REASON


@pytest.mark.parametrize("invisible", ["\u200b", "\x1c", "\u200b \ufeff"])
def test_an_item_must_have_visible_text(invisible: str) -> None:
    for op, field in ((AddPending(text=invisible), "text"), (Reject(option=invisible, reason="r"), "option")):
        refusal = validate(seeded(), _proposal(op))
        assert isinstance(refusal, Rejection) and refusal.code is RejectionCode.INVALID_OP
        assert refusal.reason == f"{field} has no visible characters"


def test_an_invisible_text_an_earlier_version_stored_still_loads() -> None:
    """A schema constraint would make a log entry written before it unreadable, and a
    replica that cannot read one entry cannot read past it."""
    op = AddNote(text="\u200b")
    proposal = Proposal.model_validate(
        {"domain": str(DOMAIN), "author": "a", "op": op.model_dump(), "key": "k", "deadline": NOW}
    )
    assert proposal.op == op


# --- every rejection code ---------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    name: str
    build: Callable[[TaskBrief], BriefOp | Proposal]
    code: RejectionCode
    says: Callable[[TaskBrief], str]
    """Text the reason must contain, from the brief the op was refused by."""


def _proposal(op: BriefOp, *, domain: Domain = DOMAIN, base: int | None = None) -> Proposal:
    return proposal(domain, op, base=base)


REFUSED = [
    Refused(
        "rejected_option",
        lambda b: AddDecision(option=" LOCAL lock +  Unique INDEX"),
        RejectionCode.REJECTED_OPTION,
        lambda b: (
            f"option '{b.rejected[0].option}' was rejected at rev {b.rejected[0].rev} by agent-b: "
            f"{b.rejected[0].reason}"
        ),
    ),
    Refused("complete_unknown", lambda b: Complete(item_id="p999"), RejectionCode.UNKNOWN_ITEM, lambda b: "'p999'"),
    Refused(
        "complete_a_decision",
        lambda b: Complete(item_id=b.decisions[0].id),
        RejectionCode.UNKNOWN_ITEM,
        lambda b: b.decisions[0].id,
    ),
    Refused(
        "resolve_unknown",
        lambda b: ResolveBlocker(item_id="b999"),
        RejectionCode.UNKNOWN_ITEM,
        lambda b: "'b999'",
    ),
    Refused(
        "remove_unknown",
        lambda b: RemoveConstraint(item_id="c999", reason="x"),
        RejectionCode.UNKNOWN_ITEM,
        lambda b: "'c999'",
    ),
    Refused(
        "supersede_unknown",
        lambda b: AddDecision(option="x", supersedes="d999"),
        RejectionCode.UNKNOWN_ITEM,
        lambda b: "'d999'",
    ),
    Refused(
        "reopen_not_rejected",
        lambda b: Reopen(option="Redis", reason="x"),
        RejectionCode.UNKNOWN_ITEM,
        lambda b: "'Redis' is not rejected",
    ),
    Refused("fold_unknown", lambda b: FoldDone(item_ids=("p999",)), RejectionCode.UNKNOWN_ITEM, lambda b: "'p999'"),
    Refused(
        "reject_without_reason",
        lambda b: Reject(option="Redis", reason="   "),
        RejectionCode.MISSING_REASON,
        lambda b: "rejecting an option needs a reason",
    ),
    Refused(
        "reopen_without_reason",
        lambda b: Reopen(option=b.rejected[0].option),
        RejectionCode.MISSING_REASON,
        lambda b: "reopening an option needs a reason",
    ),
    Refused(
        "remove_without_reason",
        lambda b: RemoveConstraint(item_id=b.constraints[0].id),
        RejectionCode.MISSING_REASON,
        lambda b: "removing a constraint needs a reason",
    ),
    Refused(
        "same_goal",
        lambda b: SetGoal(text="ship the  SHARED brief"),
        RejectionCode.DUPLICATE,
        lambda b: "goal",
    ),
    Refused(
        "same_pending",
        lambda b: AddPending(text="Write The Rules"),
        RejectionCode.DUPLICATE,
        lambda b: b.pending[0].id,
    ),
    Refused(
        "same_constraint",
        lambda b: AddConstraint(text=b.constraints[0].text.upper()),
        RejectionCode.DUPLICATE,
        lambda b: b.constraints[0].id,
    ),
    Refused(
        "same_blocker",
        lambda b: AddBlocker(text=b.blockers[0].text),
        RejectionCode.DUPLICATE,
        lambda b: b.blockers[0].id,
    ),
    Refused("same_note", lambda b: AddNote(text=b.notes[0].text), RejectionCode.DUPLICATE, lambda b: b.notes[0].id),
    Refused(
        "rejected_twice",
        lambda b: Reject(option="Local Lock + Unique Index", reason="still"),
        RejectionCode.DUPLICATE,
        lambda b: f"already rejected at rev {b.rejected[0].rev}",
    ),
    Refused(
        "decided_twice",
        lambda b: AddDecision(option="jetstream cas on the SUBJECT"),
        RejectionCode.DUPLICATE,
        lambda b: b.active_decisions()[0].id,
    ),
    Refused(
        "complete_done",
        lambda b: Complete(item_id=b.done[0].id),
        RejectionCode.CONFLICT,
        lambda b: f"already completed at rev {b.done[0].done_rev}",
    ),
    Refused(
        "supersede_superseded",
        lambda b: AddDecision(option="cbor", supersedes=b.decisions[0].id),
        RejectionCode.CONFLICT,
        lambda b: f"already superseded by {b.decisions[0].superseded_by}",
    ),
    Refused(
        "reject_adopted",
        lambda b: Reject(option="JetStream CAS on the subject", reason="x"),
        RejectionCode.CONFLICT,
        lambda b: f"adopted decision {b.active_decisions()[0].id}",
    ),
    Refused(
        "fold_repeats_id",
        lambda b: FoldDone(item_ids=(b.done[0].id, b.done[0].id)),
        RejectionCode.INVALID_OP,
        lambda b: "more than once",
    ),
    Refused(
        "wrong_domain",
        lambda b: _proposal(AddNote(text="x"), domain=OTHER),
        RejectionCode.WRONG_DOMAIN,
        lambda b: f"{OTHER}, not {DOMAIN}",
    ),
    Refused(
        "stale_base",
        lambda b: _proposal(AddNote(text="x"), base=b.revision - 1),
        RejectionCode.STALE_BASE,
        lambda b: f"at rev {b.revision} now",
    ),
    Refused(
        "base_ahead",
        lambda b: _proposal(AddNote(text="x"), base=b.revision + 1),
        RejectionCode.BASE_AHEAD,
        lambda b: f"only at rev {b.revision}",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.name)
def test_rule_rejections(case: Refused) -> None:
    brief = seeded()
    rejection = validate(brief, case.build(brief))
    assert rejection is not None
    assert rejection.code is case.code
    assert case.says(brief) in rejection.reason


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.name)
def test_every_op_on_a_closed_domain_is_rejected(case: Accepted) -> None:
    brief = seeded()
    closed = accept(brief, Close(reason="done"), author="agent-c")
    after, reply = submit(closed, case.build(brief))
    assert after is closed
    assert isinstance(reply, Rejection) and reply.code is RejectionCode.DOMAIN_CLOSED
    assert reply.reason == f"domain {DOMAIN} was closed at rev {closed.revision} by agent-c: done"


def test_base_revision_equal_to_the_brief_is_accepted() -> None:
    brief = seeded()
    assert validate(brief, _proposal(AddNote(text="x"), base=brief.revision)) is None


BAD_BODIES = [
    pytest.param({"op": {"op": "frobnicate"}}, RejectionCode.INVALID_OP, "'frobnicate'", id="unknown_op"),
    pytest.param({"op": {"op": "add_note"}}, RejectionCode.INVALID_OP, "op.add_note.text", id="missing_text"),
    pytest.param(
        {"op": {"op": "add_note", "text": "  "}},
        RejectionCode.INVALID_OP,
        "op.add_note.text",
        id="blank_text",
    ),
    pytest.param({"op": {"op": "close", "force": True}}, RejectionCode.INVALID_OP, "op.close.force", id="extra_field"),
    pytest.param({"domain": "alice/s1/t.1"}, RejectionCode.INVALID_OP, "contains '.'", id="bad_domain"),
    pytest.param({"key": ""}, RejectionCode.INVALID_OP, "'key'", id="empty_key"),
    pytest.param(
        {"op": {"op": "add_pending", "text": "x" * (TEXT_MAX + 1)}},
        RejectionCode.FIELD_TOO_LONG,
        f"'op.add_pending.text' is {TEXT_MAX + 1:,} characters long, over the limit of {TEXT_MAX:,}",
        id="long_text",
    ),
    pytest.param(
        {"op": {"op": "reject", "option": "o" * 501, "reason": "r"}},
        RejectionCode.FIELD_TOO_LONG,
        "'op.reject.option' is 501 characters",
        id="long_option",
    ),
    pytest.param(
        {"op": {"op": "fold_done", "item_ids": ["d1"]}},
        RejectionCode.INVALID_OP,
        "fold_done is the coordinators' own operation",
        id="fold_from_an_agent",
    ),
]


def _taken_in(body: dict[str, object]) -> Proposal | Rejection:
    """A proposal body as a coordinator takes it in: its envelope decoded (which
    validates the body), then the one check that needs no brief."""
    raw = {"v": 1, "type": "proposal", "id": "m1", "domain": str(DOMAIN), "sender": "agent-a", "ts": NOW, "body": body}
    try:
        sent = ProposalEnvelope.decode(msgpack.packb(raw)).body
    except BodyInvalid as exc:
        return Rejection.from_validation_error(exc.validation_error, skip=1)
    return refuse_agent_proposal(sent) or sent


@pytest.mark.parametrize(("body", "code", "says"), BAD_BODIES)
def test_bad_proposal_bodies_are_answered(body: dict[str, object], code: RejectionCode, says: str) -> None:
    raw: dict[str, object] = {
        "domain": str(DOMAIN), "author": "agent-a", "key": "k1", "deadline": NOW + TTL, "op": {"op": "close"}
    }  # fmt: skip
    result = _taken_in({**raw, **body})
    assert isinstance(result, Rejection), result
    assert result.code is code
    assert says in result.reason


def test_good_proposal_body_parses() -> None:
    body = {
        "domain": str(DOMAIN), "author": "agent-a", "key": "k1", "deadline": NOW, "op": {"op": "add_note", "text": " hi "}
    }  # fmt: skip
    assert _taken_in(body) == Proposal(domain=DOMAIN, author="agent-a", key="k1", op=AddNote(text="hi"), deadline=NOW)


def test_a_proposal_without_a_deadline_is_refused_naming_it() -> None:
    body = {"domain": str(DOMAIN), "author": "agent-a", "key": "k1", "op": {"op": "close"}}
    result = _taken_in(body)
    assert isinstance(result, Rejection) and result.code is RejectionCode.INVALID_OP
    assert result.reason == "field 'deadline': Field required"


def test_every_rejection_code_has_a_case() -> None:
    # DOMAIN_CLOSED has its own test, run for every op.
    # KEY_REUSED has its own test too, with the idempotency tests.
    covered = {c.code for c in REFUSED} | {p.values[1] for p in BAD_BODIES}
    covered |= {RejectionCode.DOMAIN_CLOSED, RejectionCode.KEY_REUSED}
    # EXPIRED has its own tests, with the deadlines.
    covered |= {RejectionCode.EXPIRED}
    # BUSY is the coordinator's answer to contention, never a rule's verdict.
    assert covered == set(RejectionCode) - {RejectionCode.BUSY}


def test_replies_round_trip_through_msgpack() -> None:
    for reply in (Committed(revision=3, duplicate=True), Rejection(code=RejectionCode.CONFLICT, reason="no")):
        wire = msgpack.packb(reply.model_dump(mode="json"))
        assert ReplyAdapter.validate_python(msgpack.unpackb(wire)) == reply


# --- idempotency ---------------------------------------------------------------


def test_repeated_key_returns_the_original_revision() -> None:
    brief, first = submit(seeded(), AddNote(text="once"), key="k-note")
    brief = accept(brief, AddPending(text="something else"))
    again, reply = submit(brief, AddNote(text="once"), key="k-note")
    assert isinstance(first, Committed)
    assert reply == Committed(revision=first.revision, duplicate=True)
    assert again is brief


def test_repeated_close_is_committed_not_refused() -> None:
    closed, first = submit(seeded(), Close(), key="k-close")
    again, reply = submit(closed, Close(), key="k-close")
    assert isinstance(first, Committed)
    assert reply == Committed(revision=first.revision, duplicate=True)
    assert again is closed


def test_a_key_reused_for_another_op_is_refused_not_reported_committed() -> None:
    brief, first = submit(seeded(), AddNote(text="once"), key="k-reused")
    assert isinstance(first, Committed)
    after, reply = submit(brief, AddPending(text="something else entirely"), key="k-reused")
    assert isinstance(reply, Rejection) and reply.code is RejectionCode.KEY_REUSED
    assert f"committed at rev {first.revision} for another operation" in reply.reason
    assert after is brief
    # The same text through another op, or the same op with other text, is another op too.
    for other in (AddPending(text="once"), AddNote(text="twice")):
        refused = submit(brief, other, key="k-reused")[1]
        assert isinstance(refused, Rejection) and refused.code is RejectionCode.KEY_REUSED


def test_op_fingerprints_are_the_same_in_every_process() -> None:
    # Pinned values: a fingerprint that changed between runs or processes would refuse
    # every retry, or accept every reuse, on replicas of another build.
    assert op_fingerprint(AddNote(text="once")) == 1376399159
    assert op_fingerprint(FoldDone(item_ids=("d1", "d2"))) == 2585971470


def test_keys_are_per_author() -> None:
    brief = accept(seeded(), AddNote(text="from a"), key="same")
    after = accept(brief, AddNote(text="from b"), key="same", author="agent-b")
    assert applied_revision(after, "agent-a", "same") == brief.revision
    assert applied_revision(after, "agent-b", "same") == after.revision


def test_a_key_is_remembered_past_its_deadline_whatever_else_its_author_commits() -> None:
    """A copy of a proposal may reach a coordinator late, after its author committed
    any number of other proposals: it must still be told apart from a new one."""
    brief = accept(seeded(), AddNote(text="first"), key="k-first")
    for i in range(3 * KEYS_PRUNE_EVERY):  # sweeps included, all well within the grace
        brief = accept(brief, AddNote(text=f"note {i}"), now=NOW + i * 0.1)
    assert applied_revision(brief, "agent-a", "k-first") is not None
    late = proposal(DOMAIN, AddNote(text="first"), key="k-first", deadline=NOW + TTL)
    assert triage(brief, late, now=NOW + TTL + 1) == Committed(revision=seeded().revision + 1, duplicate=True)


def test_a_key_is_forgotten_by_the_sweep_once_no_copy_can_be_committed() -> None:
    brief = accept(seeded(), AddNote(text="first"), key="k-first")
    gone = NOW + TTL + KEY_GRACE + 5  # the commits' clock, once the first key's time is over
    while (brief.revision + 1) % KEYS_PRUNE_EVERY:
        brief = accept(brief, AddNote(text=f"note {brief.revision}"), now=gone)
        assert applied_revision(brief, "agent-a", "k-first") is not None, "kept until the sweep"
    brief = accept(brief, AddNote(text="at the sweep"), now=gone)
    assert applied_revision(brief, "agent-a", "k-first") is None
    assert brief.keys_forgotten_until == 0, "forgotten in its time, not for want of room"
    # What a copy of it meets now: its deadline is long past, on any coordinator.
    late = proposal(DOMAIN, AddNote(text="first"), key="k-first", deadline=NOW + TTL)
    reply = triage(brief, late, now=gone - KEY_GRACE + 2 * CLOCK_SKEW_MAX)
    assert isinstance(reply, Rejection) and reply.code is RejectionCode.EXPIRED


def test_a_proposal_past_its_deadline_is_refused_not_committed() -> None:
    brief = seeded()
    after, reply = submit(brief, AddNote(text="late"), now=NOW + 10, deadline=NOW + 9.5)
    assert isinstance(reply, Rejection) and reply.code is RejectionCode.EXPIRED
    assert reply.reason.endswith(
        "0.5s after its deadline, and was not committed; if an earlier attempt was, its key is in the brief"
    )
    assert after is brief
    on_time = submit(brief, AddNote(text="late"), now=NOW + 9.5, deadline=NOW + 9.5)[1]
    assert on_time == Committed(revision=brief.revision + 1)


def test_a_deadline_further_than_any_proposal_may_wait_is_refused() -> None:
    too_far = submit(seeded(), AddNote(text="x"), deadline=NOW + PROPOSAL_TTL_MAX + CLOCK_SKEW_MAX + 1)[1]
    assert isinstance(too_far, Rejection) and too_far.code is RejectionCode.INVALID_OP
    assert "may stay valid for 600s at most" in too_far.reason
    for bad in (float("inf"), float("nan")):
        refused = submit(seeded(), AddNote(text="x"), deadline=bad)[1]
        assert isinstance(refused, Rejection) and refused.code is RejectionCode.INVALID_OP
    skewed = submit(seeded(), AddNote(text="x"), deadline=NOW + PROPOSAL_TTL_MAX + CLOCK_SKEW_MAX)[1]
    assert isinstance(skewed, Committed), "a proposer's clock may run ahead by the skew allowed"


def test_the_brief_remembers_a_bounded_number_of_keys_and_refuses_what_it_cannot_tell() -> None:
    """A domain committing faster than the keys can be kept: those with the earliest
    deadlines are dropped, and a proposal as old as those is refused rather than risk
    committing a copy twice; a newer one commits."""
    brief = base = TaskBrief(domain=DOMAIN)
    total = KEYS_REMEMBERED + KEYS_TRIM_SLACK + 1

    def deadline(i: int) -> float:
        return NOW + 1 + i * 0.05

    for i in range(total):  # one key each from as many authors, all within their time
        sent = proposal(DOMAIN, AddNote(text=f"note {i}"), key=f"k{i}", author=f"agent-{i}", deadline=deadline(i))
        [reply], brief = _judged(brief, sent)
        assert reply == Committed(revision=base.revision + 1 + i)
    remembered = sum(map(len, brief.applied_keys.values()))
    assert remembered == KEYS_REMEMBERED
    kept = [i for i in range(total) if applied_revision(brief, f"agent-{i}", f"k{i}") is not None]
    assert kept == list(range(total - KEYS_REMEMBERED, total)), "the latest deadlines are kept, without a gap"
    assert brief.keys_forgotten_until == math.ceil(deadline(total - KEYS_REMEMBERED - 1))
    # A copy of the first proposal, still within its deadline on this clock: forgotten,
    # so it cannot be told from new; refused.
    copy = proposal(DOMAIN, AddNote(text="note 0"), key="k0", author="agent-0", deadline=deadline(0))
    [refused], _ = _judged(brief, copy)
    assert isinstance(refused, Rejection) and refused.code is RejectionCode.EXPIRED
    assert "cannot be told apart from a retry" in refused.reason
    fresh = proposal(DOMAIN, AddNote(text="new"), author="agent-0", deadline=NOW + TTL)
    assert _judged(brief, fresh)[0] == [Committed(revision=brief.revision + 1)]


def _judged(brief: TaskBrief, *sent: Proposal, now: float = NOW) -> tuple[list[Reply], TaskBrief]:
    judgement = judge_batch(brief, sent, now=now, committed_by="coord-1")
    return list(judgement.replies), judgement.brief


def test_copies_built_on_one_brief_judge_duplicates_by_their_own_items() -> None:
    """A coordinator that lost a race builds again on a brief that another copy was built
    on. The duplicate index those copies share must not carry one's items into the other."""

    def says(brief: TaskBrief, text: str) -> bool:
        _, reply = submit(brief, AddNote(text=text))
        return isinstance(reply, Rejection) and reply.code is RejectionCode.DUPLICATE

    base = accept(seeded(), AddNote(text="shared"))
    assert says(base, "shared")  # indexed now, so the copies below start from this index
    mine = accept(base, AddNote(text="mine"))
    theirs = accept(base, AddNote(text="theirs"))
    after_mine = accept(mine, AddNote(text="mine again"))
    assert [says(mine, t) for t in ("shared", "mine", "theirs", "mine again")] == [True, True, False, False]
    assert [says(theirs, t) for t in ("shared", "mine", "theirs", "mine again")] == [True, False, True, False]
    assert [says(base, t) for t in ("shared", "mine", "theirs", "mine again")] == [True, False, False, False]
    assert [says(after_mine, t) for t in ("shared", "mine", "theirs", "mine again")] == [True, True, False, True]


@settings(max_examples=2_000, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
def test_normalizing_twice_changes_nothing(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)


def test_a_mark_left_after_a_dropped_space_is_composed() -> None:
    assert normalize("a\u2002\u0300H") == normalize("\u00e0h")
