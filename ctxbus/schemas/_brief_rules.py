"""The rules of the brief, as pure functions both the coordinator and the replicas run.

The coordinator judges a batch of proposals with `judge_batch` (`triage` for each, on
the brief after the ones before it) before it appends the commits; every replica calls
`apply` on each commit in log order. Nothing here does I/O, reads a clock or draws a
random number (the time a judgement is made is an argument), so the same log gives the
same brief, and the same `brief_hash`, everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final, TypeVar, assert_never

from ctxbus.schemas._brief import (
    CLOCK_SKEW_MAX,
    KEY_GRACE,
    KEYS_PRUNE_EVERY,
    KEYS_REMEMBERED,
    KEYS_TRIM_SLACK,
    PROPOSAL_TTL_MAX,
    Closure,
    Decision,
    DoneItem,
    Entry,
    Item,
    ItemField,
    RejectedOption,
    RememberedKey,
    TaskBrief,
    normalize,
)
from ctxbus.schemas._brief_fold import fold_updates
from ctxbus.schemas._brief_messages import Commit, Committed, Proposal, Rejection, Reply
from ctxbus.schemas._brief_messages import RejectionCode as Code
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
from ctxbus.schemas._errors import CtxbusError

__all__ = ["ReplayError", "applied_revision", "apply", "apply_accepted", "resolve", "triage", "validate"]

_KEYS: Final = "applied_keys"

_QUOTE_MAX: Final = 80
_E = TypeVar("_E", bound=Entry)


class ReplayError(CtxbusError):
    """Raised when a commit cannot follow the brief.

    Either it belongs to another domain, or commits between the brief's revision and
    the commit's are missing: the replica must reload rather than guess.
    """


def applied_revision(brief: TaskBrief, author: str, key: str) -> int | None:
    """Revision at which `author`'s proposal `key` was committed, if it is remembered."""
    applied = brief.applied_keys.get(author, {}).get(key)
    return None if applied is None else applied[0]


def triage(brief: TaskBrief, proposal: Proposal, *, now: float) -> Reply | None:
    """The reply to send without committing, or `None` to commit at `brief.revision + 1`.

    `now` is the judging coordinator's clock (Unix seconds). A key already committed is
    answered with its original revision (`duplicate=True`), before any other rule: a
    retried `close` must still hear that it was committed, even past its deadline. The
    same key with another op is refused: answering it "committed" would lose the op.
    Then a proposal past its deadline is refused (`expired`), and so is one too old to be
    told apart from a copy of a commit whose key is forgotten; nothing else can commit a
    proposal twice. Rejections are not remembered, so a retried rejected proposal is
    judged afresh.
    """
    applied = brief.applied_keys.get(proposal.author, {}).get(proposal.key)
    if applied is not None:
        revision, fingerprint, _ = applied
        if fingerprint != op_fingerprint(proposal.op):
            return _no(
                Code.KEY_REUSED,
                f"key {proposal.key!r} was committed at rev {revision} for another operation; "
                "a new operation needs a new key",
            )
        return Committed(revision=revision, duplicate=True)
    return _check_deadline(brief, proposal, now) or validate(brief, proposal)


def _check_deadline(brief: TaskBrief, proposal: Proposal, now: float) -> Rejection | None:
    deadline = proposal.deadline
    if not math.isfinite(deadline) or deadline > now + PROPOSAL_TTL_MAX + CLOCK_SKEW_MAX:
        return _no(
            Code.INVALID_OP,
            f"the proposal's deadline is {deadline - now:,.0f}s away; a proposal may stay valid "
            f"for {PROPOSAL_TTL_MAX:.0f}s at most",
        )
    if now > deadline:
        return _no(
            Code.EXPIRED,
            f"proposal {proposal.key!r} reached a coordinator {now - deadline:.1f}s after its deadline, "
            "and was not committed; if an earlier attempt was, its key is in the brief",
        )
    if math.ceil(deadline) <= brief.keys_forgotten_until:
        return _no(
            Code.EXPIRED,
            f"proposal {proposal.key!r} is older than the idempotency keys the brief still remembers "
            f"(this domain committed more than {KEYS_REMEMBERED:,} proposals within their deadlines): "
            "it cannot be told apart from a retry of a commit, so it was not committed; "
            "propose it again with a new key if it is not in the brief",
        )
    return None


def validate(brief: TaskBrief, proposal_or_op: Proposal | BriefOp) -> Rejection | None:
    """Why `brief` cannot take the proposal or op, or `None` if it can.

    A bare op is checked against the brief's content only; a `Proposal` is also checked
    for its domain and base revision, before its op: an op refused on a brief that moved
    on under the agent is better answered with "re-read it". Idempotency is `triage`'s
    job, not this one's.
    """
    if isinstance(proposal_or_op, Proposal):
        proposal = proposal_or_op
        if proposal.domain != brief.domain:
            return _no(Code.WRONG_DOMAIN, f"the proposal is for domain {proposal.domain}, not {brief.domain}")
        return _closed(brief) or _check_base(brief, proposal.base_revision) or _check(brief, proposal.op)
    return _closed(brief) or _check(brief, proposal_or_op)


def apply(brief: TaskBrief, commit: Commit) -> TaskBrief:
    """The brief after `commit`; `brief` itself is left as it was.

    A commit at or below the brief's revision was applied already and changes nothing,
    so a replica may replay from any point before its revision. A commit whose key is
    already remembered, or that cannot take effect (a closed domain, an item that is not
    there: only a faulty writer can cause it), advances the revision and nothing else:
    every replica still agrees, and the log stays the one source of truth.

    The policy rules (duplicates, a rejected option adopted, a missing reason) are the
    coordinator's, at proposal time, and are not judged again here: they compare texts
    in `normalize`'s form, which a later version may refine and another Python's Unicode
    tables may differ in. A replica judging them again could turn a commit another
    replica applied into a no-op, and the two would diverge.

    :raises ReplayError: if the commit is of another domain or would leave a gap.
    """
    if commit.domain != brief.domain:
        raise ReplayError(f"commit of domain {commit.domain} cannot apply to the brief of {brief.domain}")
    if commit.revision <= brief.revision:
        return brief
    if commit.revision != brief.revision + 1:
        raise ReplayError(
            f"commit of rev {commit.revision} cannot follow rev {brief.revision} of {brief.domain}: "
            f"revisions {brief.revision + 1}..{commit.revision - 1} are missing"
        )
    if (
        applied_revision(brief, commit.author, commit.key) is not None
        or _closed(brief) is not None
        or not _takes_effect(brief, commit)
    ):
        return brief.model_copy(update={"revision": commit.revision})
    return apply_accepted(brief, commit)


def _takes_effect(brief: TaskBrief, commit: Commit) -> bool:
    """Whether the items the commit works on are there for it: what `_effect` relies on."""
    match commit.op:
        case Complete(item_id=item_id):
            return _find(brief.pending, item_id) is not None
        case AddDecision(supersedes=str() as supersedes):
            old = _find(brief.decisions, supersedes)
            return old is not None and old.superseded_by is None
        case FoldDone(item_ids=item_ids):
            return _check_fold(brief, item_ids) is None
        case Reopen():
            rejected = {r.id for r in brief.rejected}
            return all(item_id in rejected for item_id in commit.resolved)
        case _:
            return True


def resolve(brief: TaskBrief, op: BriefOp) -> tuple[str, ...]:
    """Ids of the entries of `brief` that `op` names by text: the rejections a `reopen`
    lifts. The coordinator records them in the commit (`Commit.resolved`)."""
    match op:
        case Reopen(option=option):
            return tuple(r.id for r in _rejections_of(brief, option))
        case _:
            return ()


def apply_accepted(brief: TaskBrief, commit: Commit) -> TaskBrief:
    """The brief after a commit `triage` has just accepted on this very `brief`.

    The coordinator's path: the rules already ran on this brief, so running them again
    (as `apply` must for commits read from the log) would only double the cost of each
    proposal. Anything else must call `apply`.
    """
    changes = _effect(brief, commit.op, author=commit.author, rev=commit.revision, resolved=commit.resolved)
    return brief.model_copy(update={**changes, **_remember(brief, commit), "revision": commit.revision})


def _closed(brief: TaskBrief) -> Rejection | None:
    closure = brief.closed
    if closure is None:
        return None
    why = f": {closure.reason}" if closure.reason else ""
    return _no(Code.DOMAIN_CLOSED, f"domain {brief.domain} was closed at rev {closure.rev} by {closure.author}{why}")


def _check_base(brief: TaskBrief, base: int | None) -> Rejection | None:
    if base is None or base == brief.revision:
        return None
    if base > brief.revision:
        return _no(
            Code.BASE_AHEAD,
            f"the proposal is based on rev {base}, but this copy of the brief is only at rev {brief.revision}",
        )
    return _no(
        Code.STALE_BASE,
        f"the proposal is based on rev {base}, but the brief is at rev {brief.revision} now; "
        "re-read it and propose again",
    )


def _check(brief: TaskBrief, op: BriefOp) -> Rejection | None:
    blank = _invisible_field(op)
    if blank is not None:
        return _no(Code.INVALID_OP, f"{blank} has no visible characters")
    match op:
        case SetGoal(text=text):
            if brief.goal is not None and brief.goal.norm == normalize(text):
                return _no(Code.DUPLICATE, f"the goal is already {_q(text)}")
            return None
        case AddPending(text=text):
            return _check_new("pending item", brief, "pending", text)
        case Complete(item_id=item_id):
            return _check_complete(brief, item_id)
        case AddDecision():
            return _check_decision(brief, op)
        case Reject(option=option, reason=reason):
            return _need_reason("rejecting an option", reason) or _check_reject(brief, option)
        case Reopen(option=option, reason=reason):
            return _need_reason("reopening an option", reason) or _check_reopen(brief, option)
        case AddConstraint(text=text):
            return _check_new("constraint", brief, "constraints", text)
        case RemoveConstraint(item_id=item_id, reason=reason):
            return _need_reason("removing a constraint", reason) or _check_known(
                "constraint", brief.constraints, item_id
            )
        case AddBlocker(text=text):
            return _check_new("blocker", brief, "blockers", text)
        case ResolveBlocker(item_id=item_id):
            return _check_known("blocker", brief.blockers, item_id)
        case AddNote(text=text):
            return _check_new("note", brief, "notes", text)
        case Close():
            return None
        case FoldDone(item_ids=item_ids):
            return _check_fold(brief, item_ids)
        case _:
            assert_never(op)


def _invisible_field(op: BriefOp) -> str | None:
    """The text field of `op` that shows nothing (zero-width or control characters only).

    A proposal-time rule, not a schema constraint: a schema constraint would also refuse
    entries an earlier version stored, and a replica that cannot read one entry of the
    log cannot read past it.
    """
    fields = type(op).model_fields
    for name in ("text", "option"):
        value = getattr(op, name) if name in fields else None  # a missing one costs pydantic an exception
        if isinstance(value, str) and not (value.isascii() and value.isprintable()) and not normalize(value):
            return name
    return None


def _check_new(kind: str, brief: TaskBrief, field: ItemField, text: str) -> Rejection | None:
    item = brief.item_by_norm(field, normalize(text))
    if item is not None:
        return _no(Code.DUPLICATE, f"{kind} {item.id} already says {_q(item.text)}")
    return None


def _check_known(kind: str, items: tuple[_E, ...], item_id: str) -> Rejection | None:
    if _find(items, item_id) is None:
        return _no(Code.UNKNOWN_ITEM, f"there is no {kind} {item_id!r}")
    return None


def _check_complete(brief: TaskBrief, item_id: str) -> Rejection | None:
    if _find(brief.pending, item_id) is not None:
        return None
    done = _find(brief.done, item_id)
    if done is not None:
        return _no(
            Code.CONFLICT,
            f"pending item {item_id} was already completed at rev {done.done_rev} by {done.done_by}",
        )
    return _no(Code.UNKNOWN_ITEM, f"there is no pending item {item_id!r} to complete")


def _check_decision(brief: TaskBrief, op: AddDecision) -> Rejection | None:
    rejected = _rejection_of(brief, op.option)
    if rejected is not None:
        return _no(
            Code.REJECTED_OPTION,
            f"option {_q(rejected.option)} was rejected at rev {rejected.rev} by {rejected.author}: "
            f"{rejected.reason} (reopen it with a reason before deciding on it)",
        )
    if op.supersedes is not None:
        old = _find(brief.decisions, op.supersedes)
        if old is None:
            return _no(Code.UNKNOWN_ITEM, f"there is no decision {op.supersedes!r} to supersede")
        if old.superseded_by is not None:
            return _no(Code.CONFLICT, f"decision {old.id} was already superseded by {old.superseded_by}")
    norm = normalize(op.option)
    for decision in brief.active_decisions():
        if decision.norm == norm and decision.id != op.supersedes:
            return _no(Code.DUPLICATE, f"option {_q(op.option)} is already decision {decision.id}")
    return None


def _check_reject(brief: TaskBrief, option: str) -> Rejection | None:
    earlier = _rejection_of(brief, option)
    if earlier is not None:
        return _no(
            Code.DUPLICATE,
            f"option {_q(option)} was already rejected at rev {earlier.rev} by {earlier.author}: {earlier.reason}",
        )
    norm = normalize(option)
    for decision in brief.active_decisions():
        if decision.norm == norm:
            return _no(
                Code.CONFLICT,
                f"option {_q(option)} is the adopted decision {decision.id}; "
                "supersede it with another decision before rejecting it",
            )
    return None


def _check_reopen(brief: TaskBrief, option: str) -> Rejection | None:
    if _rejection_of(brief, option) is None:
        return _no(Code.UNKNOWN_ITEM, f"option {_q(option)} is not rejected, so there is nothing to reopen")
    return None


def _check_fold(brief: TaskBrief, item_ids: tuple[str, ...]) -> Rejection | None:
    done = {d.id for d in brief.done}
    seen: set[str] = set()
    for item_id in item_ids:  # linear: a fold may name thousands of items
        if item_id in seen:
            return _no(Code.INVALID_OP, f"done item {item_id} is listed more than once")
        if item_id not in done:
            return _no(Code.UNKNOWN_ITEM, f"there is no done item {item_id!r} to fold")
        seen.add(item_id)
    return None


def _need_reason(action: str, reason: str) -> Rejection | None:
    if normalize(reason):  # a reason nobody can see is no reason
        return None
    return _no(Code.MISSING_REASON, f"{action} needs a reason; say why")


def _effect(brief: TaskBrief, op: BriefOp, *, author: str, rev: int, resolved: tuple[str, ...]) -> dict[str, object]:
    """The fields `op` changes, for `model_copy(update=...)`; `op` is known to be valid,
    and `resolved` names the entries it acts on if it names them by text."""

    def item(prefix: str, text: str) -> Item:
        return Item(id=f"{prefix}{rev}", author=author, rev=rev, text=text)

    match op:
        case SetGoal(text=text):
            return {"goal": item("g", text)}
        case AddPending(text=text):
            return {"pending": (*brief.pending, item("p", text))}
        case Complete(item_id=item_id, outcome=outcome):
            todo = _find(brief.pending, item_id)
            assert todo is not None
            done = DoneItem(**todo.model_dump(), done_by=author, done_rev=rev, outcome=outcome)
            return {"pending": _without(brief.pending, item_id), "done": (*brief.done, done)}
        case AddDecision(option=option, rationale=rationale, supersedes=supersedes):
            new = Decision(
                id=f"d{rev}",
                author=author,
                rev=rev,
                option=option,
                rationale=rationale,
                supersedes=supersedes,
            )
            decisions = tuple(
                d.model_copy(update={"superseded_by": new.id}) if d.id == supersedes else d for d in brief.decisions
            )
            return {"decisions": (*decisions, new)}
        case Reject(option=option, reason=reason):
            rejected = RejectedOption(id=f"r{rev}", author=author, rev=rev, option=option, reason=reason)
            return {"rejected": (*brief.rejected, rejected)}
        case Reopen(option=option) if not resolved:  # committed by an earlier version
            norm = normalize(option)
            return {"rejected": tuple(r for r in brief.rejected if r.norm != norm)}
        case Reopen():
            lifted = set(resolved)
            return {"rejected": tuple(r for r in brief.rejected if r.id not in lifted)}
        case AddConstraint(text=text):
            return {"constraints": (*brief.constraints, item("c", text))}
        case RemoveConstraint(item_id=item_id):
            return {"constraints": _without(brief.constraints, item_id)}
        case AddBlocker(text=text):
            return {"blockers": (*brief.blockers, item("b", text))}
        case ResolveBlocker(item_id=item_id):
            return {"blockers": _without(brief.blockers, item_id)}
        case AddNote(text=text):
            return {"notes": (*brief.notes, item("n", text))}
        case Close(reason=reason):
            return {"closed": Closure(author=author, rev=rev, reason=reason)}
        case FoldDone(item_ids=item_ids):
            return fold_updates(brief, item_ids, rev=rev)
        case _:
            assert_never(op)


def _remember(brief: TaskBrief, commit: Commit) -> dict[str, object]:
    """The key fields of the brief once `commit`'s key is remembered.

    Keys past their time (`KEY_GRACE` after their deadline, by the commit's clock) are
    swept every `KEYS_PRUNE_EVERY` revisions; beyond `KEYS_REMEMBERED` (and its slack),
    those with the earliest deadlines are dropped, and `keys_forgotten_until` says how
    far that reached. Both happen at revisions every replica reaches, and depend only on
    the log, so every replica keeps the same keys.
    """
    entry: RememberedKey = (commit.revision, op_fingerprint(commit.op), commit.key_deadline)
    keys = {**brief.applied_keys, commit.author: {**brief.applied_keys.get(commit.author, {}), commit.key: entry}}
    if commit.revision % KEYS_PRUNE_EVERY == 0:
        keys = _without_expired(keys, now=commit.ts)
    remembered = sum(map(len, keys.values()))
    if remembered <= KEYS_REMEMBERED + KEYS_TRIM_SLACK:
        return {_KEYS: keys}
    # Keep the KEYS_REMEMBERED with the latest deadlines: revisions are unique, so the
    # cut is exact, and every replica makes the same one.
    order = sorted((deadline, revision) for entries in keys.values() for revision, _, deadline in entries.values())
    forgotten_until, _ = order[remembered - KEYS_REMEMBERED - 1]
    oldest_kept = order[remembered - KEYS_REMEMBERED]
    kept = {
        author: {key: e for key, e in entries.items() if (e[2], e[0]) >= oldest_kept}
        for author, entries in keys.items()
    }
    return {
        _KEYS: {author: entries for author, entries in kept.items() if entries},
        "keys_forgotten_until": max(brief.keys_forgotten_until, forgotten_until),
    }


def _without_expired(keys: dict[str, dict[str, RememberedKey]], *, now: float) -> dict[str, dict[str, RememberedKey]]:
    """`keys` without those more than `KEY_GRACE` past their deadline at `now`."""
    horizon = now - KEY_GRACE
    swept = {author: {k: e for k, e in entries.items() if e[2] >= horizon} for author, entries in keys.items()}
    return {author: entries for author, entries in swept.items() if entries}


def _rejection_of(brief: TaskBrief, option: str) -> RejectedOption | None:
    return next(_rejections_of(brief, option), None)


def _rejections_of(brief: TaskBrief, option: str) -> Iterator[RejectedOption]:
    """The rejections of `option`, as `normalize` compares."""
    norm = normalize(option)
    return (r for r in brief.rejected if r.norm == norm)


def _find(items: tuple[_E, ...], item_id: str) -> _E | None:
    return next((i for i in items if i.id == item_id), None)


def _without(items: tuple[_E, ...], item_id: str) -> tuple[_E, ...]:
    return tuple(i for i in items if i.id != item_id)


def _q(text: str) -> str:
    """`text` in quotes, cut short if long: reasons quote items, they do not repeat them."""
    shown = text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 3] + "..."
    return f"'{shown}'"


def _no(code: Code, reason: str) -> Rejection:
    return Rejection(code=code, reason=reason)
