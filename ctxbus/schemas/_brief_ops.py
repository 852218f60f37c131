"""Operations on the task brief: what an agent may propose and a commit may carry.

Each operation is a frozen model with a `Literal` `op` tag, and `BriefOp` is their union
discriminated on it, so a body with an unknown `op` fails validation naming the tag.
Operations say what to change, never the resulting state: ids, authors and revisions
are filled in when the commit is applied, identically on every replica.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal, TypeAlias, get_args

import msgpack
from pydantic import Field, TypeAdapter

from ctxbus.schemas._brief import BriefModel, ItemId, Option, Outcome, Reason, Text

__all__ = [
    "AGENT_OPS",
    "FOLD_MAX",
    "op_fingerprint",
    "AddBlocker",
    "AddConstraint",
    "AddDecision",
    "AddNote",
    "AddPending",
    "BriefOp",
    "BriefOpAdapter",
    "Close",
    "Complete",
    "FoldDone",
    "Reject",
    "RemoveConstraint",
    "Reopen",
    "ResolveBlocker",
    "SetGoal",
]


class SetGoal(BriefModel):
    """Set or replace the goal."""

    op: Literal["set_goal"] = "set_goal"
    text: Text
    """The new goal."""


class AddPending(BriefModel):
    """Add a piece of work to do."""

    op: Literal["add_pending"] = "add_pending"
    text: Text
    """What needs doing."""


class Complete(BriefModel):
    """Move a pending item to done."""

    op: Literal["complete"] = "complete"
    item_id: ItemId
    """Id of the pending item."""
    outcome: Outcome = ""
    """What came of it, kept as a fact even when done items are folded."""


class AddDecision(BriefModel):
    """Adopt an option, possibly in place of an earlier decision."""

    op: Literal["add_decision"] = "add_decision"
    option: Option
    """The option adopted; refused while it is rejected."""
    rationale: Reason = ""
    """Why."""
    supersedes: ItemId | None = None
    """Id of an active decision this one replaces; that one is kept, marked superseded."""


class Reject(BriefModel):
    """Rule an option out, so that no agent adopts it again without reopening it."""

    op: Literal["reject"] = "reject"
    option: Option
    """The option ruled out."""
    reason: Reason = ""
    """Why; required, and quoted to any agent that later tries to adopt the option."""


class Reopen(BriefModel):
    """Take an option off the rejected list so it may be decided on again."""

    op: Literal["reopen"] = "reopen"
    option: Option
    """The rejected option, matched as `normalize` compares: ignoring case, spacing,
    Unicode form and invisible characters."""
    reason: Reason = ""
    """Why the rejection no longer holds; required."""


class AddConstraint(BriefModel):
    """Add a hard rule every agent must follow."""

    op: Literal["add_constraint"] = "add_constraint"
    text: Text
    """The rule."""


class RemoveConstraint(BriefModel):
    """Drop a constraint; the only way one ever leaves the brief."""

    op: Literal["remove_constraint"] = "remove_constraint"
    item_id: ItemId
    """Id of the constraint."""
    reason: Reason = ""
    """Why it no longer applies; required."""


class AddBlocker(BriefModel):
    """Record something that stops progress."""

    op: Literal["add_blocker"] = "add_blocker"
    text: Text
    """The obstacle."""


class ResolveBlocker(BriefModel):
    """Remove a blocker that no longer blocks."""

    op: Literal["resolve_blocker"] = "resolve_blocker"
    item_id: ItemId
    """Id of the blocker."""


class AddNote(BriefModel):
    """Share anything else other agents should know."""

    op: Literal["add_note"] = "add_note"
    text: Text
    """The note."""


class Close(BriefModel):
    """Close the domain: every later operation is refused."""

    op: Literal["close"] = "close"
    reason: Reason = ""
    """Why, if worth saying."""


FOLD_MAX: Final = 10_000
"""Most done items a coordinator folds in one commit (the rest at the next one). Not a
limit of `FoldDone` itself: a log written before it existed must still replay."""


class FoldDone(BriefModel):
    """Fold done items into the done summary, keeping their facts.

    Issued by the coordinator when the brief is over its token budget (see `fold_done_op`).
    """

    op: Literal["fold_done"] = "fold_done"
    item_ids: Annotated[tuple[ItemId, ...], Field(min_length=1)]
    """Ids of the done items to fold, each at most once."""


BriefOp: TypeAlias = Annotated[
    SetGoal
    | AddPending
    | Complete
    | AddDecision
    | Reject
    | Reopen
    | AddConstraint
    | RemoveConstraint
    | AddBlocker
    | ResolveBlocker
    | AddNote
    | Close
    | FoldDone,
    Field(discriminator="op"),
]
"""Any operation on the brief, told apart by its `op` field."""

BriefOpAdapter: TypeAdapter[BriefOp] = TypeAdapter(BriefOp)
"""Validates one operation from a plain dict: `BriefOpAdapter.validate_python(raw)`."""

AGENT_OPS: Final[Mapping[str, type[BriefModel]]] = MappingProxyType(
    {
        model.model_fields["op"].default: model
        for model in get_args(get_args(BriefOp)[0])
        if model is not FoldDone  # the coordinator's own, issued when the brief is over budget
    }
)
"""The operations an agent may propose, by their `op` tag, in the order of `BriefOp`.

Each model's first field after `op` is the one the operation is about (the text, option
or item id), which is what a command line takes as its positional value.
"""


def op_fingerprint(op: BriefOp) -> int:
    """A 32-bit fingerprint of `op`, the same in every process and on every run.

    The brief keeps it with each idempotency key, so that a retry (the same op under the
    same key) can be told from a key reused for another op. Not a security measure:
    only an author's own mistakes are caught.
    """
    return zlib.crc32(msgpack.packb([getattr(op, name) for name in type(op).model_fields]))
