"""Applying commits: order, no-ops, the canonical hash, and replicas that converge."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbus.schemas import DecodeError, Envelope, EnvelopeInvalid, MessageType, WireError
from ctxbus.schemas._brief import TaskBrief, brief_hash
from ctxbus.schemas._brief_fold import fold_done_op
from ctxbus.schemas._brief_messages import Commit, Committed, Proposal
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
)
from ctxbus.schemas._brief_rules import ReplayError, applied_revision, apply, apply_accepted, resolve, triage, validate
from ctxbus.schemas._brief_snapshot import BriefSnapshot
from tests.brief.helpers import DOMAIN, NOW, OTHER, TTL, accept, seeded, words

# --- apply ---------------------------------------------------------------


def _commit(brief: TaskBrief, op: BriefOp, *, key: str = "k-x", revision: int | None = None) -> Commit:
    proposal = Proposal(deadline=NOW + TTL, domain=brief.domain, author="agent-a", op=op, key=key)
    return Commit.of(proposal, revision=revision or brief.revision + 1, ts=2.0, committed_by="coord-2")


def test_commit_already_applied_is_skipped() -> None:
    brief = seeded()
    assert apply(brief, _commit(brief, AddNote(text="x"), revision=brief.revision)) is brief


def test_commit_after_a_gap_is_refused() -> None:
    brief = seeded()
    with pytest.raises(ReplayError, match=f"revisions {brief.revision + 1}..{brief.revision + 1} are missing"):
        apply(brief, _commit(brief, AddNote(text="x"), revision=brief.revision + 2))


def test_commit_of_another_domain_is_refused() -> None:
    brief = seeded()
    alien = _commit(brief, AddNote(text="x")).model_copy(update={"domain": OTHER})
    with pytest.raises(ReplayError, match="bob/s1/t1"):
        apply(brief, alien)


@pytest.mark.parametrize(
    "op",
    [
        Complete(item_id="p999"),
        AddDecision(option="anything", supersedes="d999"),
        FoldDone(item_ids=("p999",)),
    ],
    ids=["complete_unknown", "supersede_unknown", "fold_unknown"],
)
def test_commit_that_cannot_take_effect_only_advances_the_revision(op: BriefOp) -> None:
    brief = seeded()
    after = apply(brief, _commit(brief, op))
    assert after == brief.model_copy(update={"revision": brief.revision + 1})


def test_a_policy_rule_is_not_judged_again_on_replay() -> None:
    """Duplicates and rejected options compare normalized texts, which versions (and
    Python's Unicode tables) may judge differently: the commit stands as written."""
    brief = seeded()
    rejected = brief.rejected[0].option
    for op in (AddNote(text=brief.notes[0].text), AddDecision(option=rejected)):
        assert validate(brief, op) is not None
        after = apply(brief, _commit(brief, op))
        assert after == apply_accepted(brief, _commit(brief, op)) and after.revision == brief.revision + 1


def test_a_reopen_lifts_the_rejections_its_commit_names_however_the_replica_normalizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The coordinator matched the option to rejection ids; a replica whose `normalize`
    differs (another Python's Unicode tables) still lifts exactly those."""
    brief = seeded()
    op = Reopen(option="LOCAL  lock + unique index", reason="the index is per domain")
    proposal = Proposal(deadline=NOW + TTL, domain=brief.domain, author="agent-a", op=op, key="k-reopen")
    resolved = Commit.of(proposal, revision=brief.revision + 1, ts=2.0, committed_by="c", resolved=resolve(brief, op))
    assert resolved.resolved == (brief.rejected[0].id,)
    expected = apply(brief, resolved)
    assert expected.rejected == brief.rejected[1:]

    unlike = str.strip  # no case folding, no collapsing of spaces
    monkeypatch.setattr("ctxbus.schemas._brief.normalize", unlike)
    monkeypatch.setattr("ctxbus.schemas._brief_rules.normalize", unlike)
    assert apply(brief, resolved) == expected
    by_text = resolved.model_copy(update={"resolved": ()})  # as an earlier version committed it
    assert apply(brief, by_text).rejected == brief.rejected, "matching the text again lifts nothing here"


def test_a_reopen_naming_a_rejection_that_is_not_there_only_advances_the_revision() -> None:
    brief = seeded()
    commit = _commit(brief, Reopen(option=brief.rejected[0].option, reason="r")).model_copy(
        update={"resolved": ("r999",)}
    )
    assert apply(brief, commit) == brief.model_copy(update={"revision": brief.revision + 1})


def test_only_a_commit_that_resolved_something_carries_it_on_the_wire() -> None:
    """A replica of an earlier version refuses a field it does not know: every other
    commit keeps the form it had."""
    brief = seeded()
    plain = _commit(brief, AddNote(text="x"))
    assert "resolved" not in plain.model_dump(mode="json")
    reopen = Reopen(option=brief.rejected[0].option, reason="r")
    proposal = Proposal(deadline=NOW + TTL, domain=brief.domain, author="agent-a", op=reopen, key="k")
    commit = Commit.of(proposal, revision=brief.revision + 1, ts=2.0, committed_by="c", resolved=resolve(brief, reopen))
    wire = msgpack.packb(commit.model_dump(mode="json"))
    assert Commit.model_validate(msgpack.unpackb(wire)) == commit and commit.resolved
    assert "resolved" not in plain.model_dump(exclude={"resolved"}), "a caller's exclude still works"


def test_commit_with_a_remembered_key_only_advances_the_revision() -> None:
    brief = accept(seeded(), AddNote(text="x"), key="k-dup")
    after = apply(brief, _commit(brief, AddNote(text="y"), key="k-dup"))
    assert after == brief.model_copy(update={"revision": brief.revision + 1})


def test_apply_is_deterministic() -> None:
    brief = seeded()
    commit = _commit(brief, AddDecision(option="cbor", supersedes=brief.active_decisions()[0].id))
    first, second = apply(brief, commit), apply(brief, commit)
    assert first == second and first is not second
    assert brief_hash(first) == brief_hash(second) != brief_hash(brief)


# --- hash ---------------------------------------------------------------


def test_hash_survives_round_trips() -> None:
    brief = accept(accept(seeded(), AddNote(text="Grüße, 世界")), AddNote(text="x"), author="agent-z")
    digest = brief_hash(brief)
    assert brief_hash(TaskBrief.model_validate(brief.model_dump())) == digest
    assert brief_hash(TaskBrief.model_validate_json(brief.model_dump_json())) == digest
    unpacked = msgpack.unpackb(msgpack.packb(brief.model_dump(mode="json")))
    assert brief_hash(TaskBrief.model_validate(unpacked)) == digest


def test_hash_ignores_dict_order_but_not_content() -> None:
    brief = accept(accept(seeded(), AddNote(text="x"), author="agent-z"), AddNote(text="y"), author="agent-b")
    reordered = brief.model_copy(update={"applied_keys": dict(reversed(brief.applied_keys.items()))})
    assert list(reordered.applied_keys) != list(brief.applied_keys)
    assert brief_hash(reordered) == brief_hash(brief)
    assert brief_hash(brief.model_copy(update={"revision": brief.revision + 1})) != brief_hash(brief)
    assert json.loads(brief.canonical_bytes()) == brief.model_dump(mode="json")


# --- properties ---------------------------------------------------------------

AUTHORS = ("agent-a", "agent-b", "agent-c")
WORDS = (
    "Redis",
    "redis ",
    "local lock",
    "JetStream CAS",
    "jetstream  cas",
    "SQLite",
    "write tests",
    "Grüße 世界",
)
# Strategies are built once: building them per step costs more than running the rules.
TEXTS = st.one_of(st.sampled_from(WORDS), st.text(alphabet="abxyZ é世 ", min_size=1, max_size=12).filter(str.strip))
REASONS = st.one_of(st.just(""), TEXTS)
INDEX = st.integers(min_value=0, max_value=63)
FLIP = st.booleans()


def _pick(draw: st.DrawFn, choices: list[str]) -> str:
    return choices[draw(INDEX) % len(choices)]


def _item_id(draw: st.DrawFn, brief: TaskBrief) -> str:
    """An id from the brief, of any kind, or one that names nothing."""
    items = (*brief.pending, *brief.done, *brief.decisions, *brief.constraints, *brief.blockers, *brief.notes)
    return _pick(draw, [item.id for item in items] + ["p999"])


def _option(draw: st.DrawFn, brief: TaskBrief) -> str:
    """Often an option already rejected, so decisions run into the rejection rule."""
    rejected = [r.option for r in brief.rejected]
    if draw(FLIP) and rejected:
        return _pick(draw, rejected)
    return draw(TEXTS)


OP_BUILDERS: dict[str, Callable[[st.DrawFn, TaskBrief], BriefOp]] = {
    "set_goal": lambda d, b: SetGoal(text=d(TEXTS)),
    "add_pending": lambda d, b: AddPending(text=d(TEXTS)),
    "complete": lambda d, b: Complete(item_id=_item_id(d, b), outcome=d(REASONS)),
    "add_decision": lambda d, b: AddDecision(
        option=_option(d, b), rationale=d(REASONS), supersedes=_item_id(d, b) if d(FLIP) else None
    ),
    "reject": lambda d, b: Reject(option=_option(d, b), reason=d(REASONS)),
    "reopen": lambda d, b: Reopen(option=_option(d, b), reason=d(REASONS)),
    "add_constraint": lambda d, b: AddConstraint(text=d(TEXTS)),
    "remove_constraint": lambda d, b: RemoveConstraint(item_id=_item_id(d, b), reason=d(REASONS)),
    "add_blocker": lambda d, b: AddBlocker(text=d(TEXTS)),
    "resolve_blocker": lambda d, b: ResolveBlocker(item_id=_item_id(d, b)),
    "add_note": lambda d, b: AddNote(text=d(TEXTS)),
    "fold_done": lambda d, b: FoldDone(item_ids=(_item_id(d, b), _item_id(d, b))[: 1 + d(FLIP)]),
}
OP_NAMES = st.sampled_from(sorted(OP_BUILDERS))
CLOSE_ODDS = st.integers(0, 40)


def _draw_op(draw: st.DrawFn, brief: TaskBrief) -> BriefOp:
    """Any op, with ids and options drawn mostly from the brief, so most of them apply."""
    if draw(CLOSE_ODDS) == 0:  # close rarely, or most runs would end early
        return Close()
    return OP_BUILDERS[draw(OP_NAMES)](draw, brief)


def _via_msgpack(commit: Commit) -> Commit:
    return Commit.model_validate(msgpack.unpackb(msgpack.packb(commit.model_dump(mode="python"))))


def _via_json(commit: Commit) -> Commit:
    return Commit.model_validate_json(commit.model_dump_json())


def _protected(brief: TaskBrief) -> tuple[object, ...]:
    """What a fold must leave exactly as it was."""
    return brief.decisions, brief.rejected, brief.constraints


def _facts(brief: TaskBrief) -> Counter[str]:
    """Every done fact, folded or not, with multiplicity."""
    folded = brief.done_summary.facts if brief.done_summary else ()
    return Counter((*folded, *(d.fact for d in brief.done)))


AUTHOR = st.sampled_from(AUTHORS)
BUDGET = st.integers(1, 200)
STEPS = st.integers(1, 40)


@st.composite
def coordinated(draw: st.DrawFn) -> tuple[TaskBrief, list[Commit]]:
    """Up to 40 random proposals run through the rules as a coordinator would: its brief,
    and its log. Some proposals reuse a key, some are the folds the budget asks for.
    Texts come from a small pool, so duplicates, and re-adding what was removed, are common."""
    brief = TaskBrief(domain=DOMAIN)
    log: list[Commit] = []
    sent: list[tuple[str, str]] = []
    for _ in range(draw(STEPS)):
        op = _draw_op(draw, brief)
        if draw(FLIP) and brief.done:
            op = fold_done_op(brief, draw(BUDGET), words) or op
        if sent and draw(INDEX) < 8:
            author, key = sent[draw(INDEX) % len(sent)]
        else:
            author, key = draw(AUTHOR), f"k{len(sent)}"
        sent.append((author, key))
        proposal = Proposal(deadline=NOW + TTL, domain=DOMAIN, author=author, op=op, key=key)
        reply = triage(brief, proposal, now=NOW)
        # The brief carries its duplicate index from copy to copy; a fresh copy builds
        # its own. Both must judge alike, or the carried index went stale.
        assert reply == triage(TaskBrief.model_validate(brief.model_dump()), proposal, now=NOW)
        if isinstance(reply, Committed):
            assert reply.duplicate and applied_revision(brief, author, key) == reply.revision
        if reply is not None:
            continue
        # Some commits come from an earlier version, which did not resolve reopens to ids.
        resolved = resolve(brief, op) if draw(FLIP) else ()
        commit = Commit.of(
            proposal, revision=brief.revision + 1, ts=float(len(log)), committed_by="c", resolved=resolved
        )
        before, brief = brief, apply(brief, commit)
        log.append(commit)
        if isinstance(op, FoldDone):
            assert _protected(brief) == _protected(before)
            assert _facts(brief) == _facts(before)
    return brief, log


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=coordinated(), data=st.data())
def test_replicas_converge_on_any_sequence(run: tuple[TaskBrief, list[Commit]], data: st.DataObject) -> None:
    """Three replicas apply what the coordinator committed: one directly, one through
    msgpack, one through JSON starting from a snapshot taken mid-run."""
    coordinator, log = run
    assert [c.revision for c in log] == list(range(1, len(log) + 1))
    direct = TaskBrief(domain=DOMAIN)
    packed = TaskBrief(domain=DOMAIN)
    for commit in log:
        direct = apply(direct, commit)
        packed = apply(packed, _via_msgpack(commit))
    cut = data.draw(st.integers(0, len(log)))
    snapshot = TaskBrief(domain=DOMAIN)
    for commit in log[:cut]:
        snapshot = apply(snapshot, commit)
    joiner = TaskBrief.model_validate_json(snapshot.model_dump_json())
    for commit in log[max(0, cut - 3) :]:  # replay overlaps the snapshot, as after a restart
        joiner = apply(joiner, _via_json(commit))
    assert brief_hash(direct) == brief_hash(packed) == brief_hash(joiner) == brief_hash(coordinator)
    assert joiner.revision == len(log)


# --- snapshots ---------------------------------------------------------------


def test_snapshot_round_trip_keeps_the_hash() -> None:
    brief = accept(seeded(), AddNote(text="Grüße, 世界"))
    loaded = BriefSnapshot.decode(BriefSnapshot(seq=41, brief=brief).encode())
    assert (loaded.seq, brief_hash(loaded.brief)) == (41, brief_hash(brief))


def test_snapshot_of_another_domain_is_refused() -> None:
    body = BriefSnapshot(seq=1, brief=seeded()).model_dump(mode="json")
    data = Envelope[dict[str, Any]](type=MessageType.SNAPSHOT, domain=OTHER, sender="x", body=body).encode()
    with pytest.raises(EnvelopeInvalid, match=f"envelope of {OTHER} holds the brief of {DOMAIN}"):
        BriefSnapshot.decode(data)


@pytest.mark.parametrize(
    ("data", "error", "says"),
    [
        (b"\xc1", DecodeError, "not valid msgpack"),
        (
            Envelope[dict[str, Any]](type=MessageType.COMMIT, domain=DOMAIN, sender="x", body={}).encode(),
            EnvelopeInvalid,
            "got a 'commit' envelope",
        ),
        (
            Envelope[dict[str, Any]](type=MessageType.SNAPSHOT, domain=DOMAIN, sender="x", body={"seq": -1}).encode(),
            EnvelopeInvalid,
            "field 'seq'",
        ),
    ],
    ids=["garbage", "not_a_snapshot", "bad_body"],
)
def test_unreadable_snapshot_raises_a_wire_error(data: bytes, error: type[WireError], says: str) -> None:
    with pytest.raises(error, match=says):
        BriefSnapshot.decode(data)
