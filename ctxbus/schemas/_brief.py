"""The shared task brief: what every agent of one task agrees on, at one revision.

The brief is never edited in place. The coordinator turns accepted proposals into commits,
and every replica derives the same brief by applying them in log order
(`schemas._brief_rules.apply`). That is why every model here is frozen, lists are tuples
(so successive briefs share their unchanged items) and `brief_hash` is defined over a
canonical form: two replicas agree exactly when their hashes do.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Final, Literal, Self, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, StringConstraints

from ctxbus.schemas._domain import Domain
from ctxbus.schemas._errors import UsageError

__all__ = [
    "AUTHOR_MAX",
    "ID_MAX",
    "CLOCK_SKEW_MAX",
    "KEY_GRACE",
    "KEYS_PRUNE_EVERY",
    "KEYS_REMEMBERED",
    "KEYS_TRIM_SLACK",
    "PROPOSAL_TTL_MAX",
    "RememberedKey",
    "KEY_MAX",
    "OPTION_MAX",
    "REASON_MAX",
    "TEXT_MAX",
    "AuthorId",
    "BriefModel",
    "Closure",
    "Decision",
    "DomainField",
    "DoneItem",
    "DoneSummary",
    "Entry",
    "IdempotencyKey",
    "Item",
    "ItemId",
    "Option",
    "Outcome",
    "Reason",
    "RejectedOption",
    "Revision",
    "TaskBrief",
    "Text",
    "brief_hash",
    "normalize",
    "ItemField",
]

TEXT_MAX: Final = 2000
"""Longest goal, pending item, constraint, blocker, note or outcome, in characters."""
OPTION_MAX: Final = 500
"""Longest option of a decision or rejection; options are names, not essays."""
REASON_MAX: Final = 2000
"""Longest reason or rationale."""
ID_MAX: Final = 32
"""Longest item id accepted in a reference; real ids are a letter and a revision."""
AUTHOR_MAX: Final = 128
"""Longest agent or coordinator id, as for the envelope's `sender`."""
KEY_MAX: Final = 128
"""Longest idempotency key."""
PROPOSAL_TTL_MAX: Final = 600.0
"""Longest a proposal may stay valid, in seconds from when a coordinator first sees it:
a deadline further out is refused, since it would keep its key remembered as long."""
CLOCK_SKEW_MAX: Final = 30.0
"""How far apart, in seconds, the clocks of proposers and coordinators may be. Deadlines
are Unix times set by the proposer's clock and judged by the coordinator's, and keys are
forgotten by the commits' timestamps, so the rules leave this much room each way."""
KEY_GRACE: Final = 300.0
"""Seconds past its proposal's deadline that a committed key is remembered: at least
twice `CLOCK_SKEW_MAX` (so no coordinator, however its clock runs, can still take a copy
of the proposal once the key is forgotten), and long enough that proposing again by hand
with the same key after a timeout is still recognised; see `TaskBrief.applied_keys`."""
KEYS_REMEMBERED: Final = 8192
"""Keys remembered at most, of all authors together: bounds the brief (and its snapshot)
however fast a domain commits. Only a domain committing faster than this many per
`KEY_GRACE` and deadline reaches it; see `TaskBrief.keys_forgotten_until`."""
KEYS_TRIM_SLACK: Final = 512
"""Keys remembered beyond `KEYS_REMEMBERED` before the oldest are dropped, all at once:
the trim sorts every key, so it runs once per this many commits, not on each."""
KEYS_PRUNE_EVERY: Final = 256
"""Revisions between two sweeps of the keys past their time: the sweep reads every key,
so it runs at fixed revisions (the same on every replica), not on each commit."""


def normalize(text: str) -> str:
    """The form in which options and item texts are compared, so that `'Local  Lock'`,
    `'local lock'` and `'ｌｏｃａｌ\u200b lock'` match.

    An agent must not get around a rejection, or slip in a duplicate, by changing case,
    spacing, Unicode form or invisible characters: the text is NFKC-normalized, loses its
    format characters (zero-width spaces, soft hyphens), is case-folded, and its runs of
    whitespace become one space, with none beside punctuation (`'a + b'` is `'a+b'`).
    ASCII text, the usual case, skips the Unicode steps: they cannot change it.
    """
    if text.isascii():
        return " ".join(_SPACE_BY_PUNCTUATION.sub("", text.lower()).split())
    text = unicodedata.normalize("NFKC", text)
    text = "".join(char for char in text if unicodedata.category(char) != "Cf")
    text = " ".join(_SPACE_BY_PUNCTUATION.sub("", text.casefold()).split())
    # Folding and dropped spaces can leave a form NFKC would compose (a mark after a
    # space that is gone): once more, so that normalizing is idempotent.
    return unicodedata.normalize("NFKC", text)


_SPACE_BY_PUNCTUATION: Final = re.compile(r"\s+(?=[^\w\s])|(?<=[^\w\s])\s+")


Text: TypeAlias = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TEXT_MAX)]
Option: TypeAlias = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=OPTION_MAX)]
# A reason may be blank at the schema level so that the rules, not pydantic, refuse a
# missing one: the proposer then gets `missing_reason` and a sentence, not a schema error.
Reason: TypeAlias = Annotated[str, StringConstraints(strip_whitespace=True, max_length=REASON_MAX)]
Outcome: TypeAlias = Annotated[str, StringConstraints(strip_whitespace=True, max_length=TEXT_MAX)]
ItemId: TypeAlias = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=ID_MAX)]
AuthorId: TypeAlias = Annotated[str, StringConstraints(min_length=1, max_length=AUTHOR_MAX)]
IdempotencyKey: TypeAlias = Annotated[str, StringConstraints(min_length=1, max_length=KEY_MAX)]
Revision: TypeAlias = Annotated[int, Field(ge=0)]
RememberedKey: TypeAlias = tuple[Revision, int, int]
"""A committed idempotency key's revision, op fingerprint and deadline (whole Unix
seconds, rounded up), as `TaskBrief.applied_keys` holds it."""


def _parse_domain(value: object) -> object:
    return Domain.parse(value) if isinstance(value, str) else value


DomainField: TypeAlias = Annotated[Domain, BeforeValidator(_parse_domain), PlainSerializer(str, return_type=str)]
"""A `Domain` that loads from `'user/session/task'` and dumps back to that string."""


class BriefModel(BaseModel):
    """Base of the brief's models: immutable, and strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Entry(BriefModel):
    """What every item of the brief has: an id, an author and a revision."""

    id: ItemId
    """Stable id: a kind letter and the revision that created it (`p12`, `d15`)."""
    author: AuthorId
    """Agent (or coordinator) whose proposal created the entry."""
    rev: Revision
    """Revision of the commit that created the entry."""


class Item(Entry):
    """A goal, pending item, constraint, blocker or note: one line of text."""

    text: Text
    """What it says."""

    @cached_property
    def norm(self) -> str:
        """`text` normalized, for duplicate checks.

        Cached because every proposal compares against every item. `model_copy` carries
        the cache over, which is safe only because an entry's text is never updated.
        """
        return normalize(self.text)


class DoneItem(Item):
    """A pending item that was completed; keeps the pending item's id, author and rev."""

    done_by: AuthorId
    """Agent that completed it."""
    done_rev: Revision
    """Revision of the `complete` commit."""
    outcome: Outcome = ""
    """What came of it, if the agent said; empty otherwise."""

    @property
    def fact(self) -> str:
        """The item as one fact: its text, and its outcome if any. Folding keeps this."""
        return f"{self.text} -> {self.outcome}" if self.outcome else self.text


class DoneSummary(BriefModel):
    """Done items folded together to save tokens: their facts survive, their metadata not."""

    facts: tuple[str, ...]
    """`DoneItem.fact` of every folded item, oldest first."""
    through_rev: Revision
    """Revision of the latest fold."""


class Decision(Entry):
    """An option the task adopted, and why."""

    option: Option
    """The adopted option."""
    rationale: Reason = ""
    """Why it was adopted."""
    supersedes: ItemId | None = None
    """Id of the decision this one replaced, if any."""
    superseded_by: ItemId | None = None
    """Id of the decision that replaced this one. Superseded decisions are kept: the
    history of what was decided is part of what agents must not relitigate."""

    @cached_property
    def norm(self) -> str:
        """`option` normalized, for matching against rejections and other decisions."""
        return normalize(self.option)


class RejectedOption(Entry):
    """An option the task ruled out; adopting it needs a `reopen` with a reason first."""

    option: Option
    """The rejected option."""
    reason: Reason
    """Why it was rejected; quoted back to any agent that tries to adopt it."""

    @cached_property
    def norm(self) -> str:
        """`option` normalized, for matching against proposed decisions."""
        return normalize(self.option)


class Closure(BriefModel):
    """Who closed the domain, when and why. A closed brief accepts no more operations."""

    author: AuthorId
    """Agent or coordinator that closed it."""
    rev: Revision
    """Revision of the `close` commit."""
    reason: Reason = ""
    """Why, if given."""


ItemField: TypeAlias = Literal["pending", "constraints", "blockers", "notes"]
"""The lists of `Item`s the rules search by normalized text (for duplicates)."""

_NORM_INDEX: Final = "_items_by_norm"
"""Key in a brief's `__dict__` of its norm index: not a field, so not dumped, hashed or compared."""


class TaskBrief(BriefModel):
    """The state of one domain's task, as of `revision`.

    Build a new one with `TaskBrief(domain=...)`; change it only through
    `schemas._brief_rules.apply`, which returns a new brief.
    """

    domain: DomainField
    """The `user/session/task` this brief belongs to; commits of other domains are refused."""
    revision: Revision = 0
    """Revision of the last applied commit; 0 for a fresh brief."""
    closed: Closure | None = None
    """Set by `close`; `None` while the domain is open."""
    goal: Item | None = None
    """What the task is for; `set_goal` replaces it."""
    pending: tuple[Item, ...] = ()
    """Work not done yet, oldest first."""
    done: tuple[DoneItem, ...] = ()
    """Completed work not yet folded, in order of completion."""
    done_summary: DoneSummary | None = None
    """Older done items, folded into facts when the brief was over its token budget."""
    decisions: tuple[Decision, ...] = ()
    """Adopted options, superseded ones included, oldest first."""
    rejected: tuple[RejectedOption, ...] = ()
    """Options ruled out and not reopened, oldest first."""
    constraints: tuple[Item, ...] = ()
    """Hard rules every agent must follow; only an explicit, reasoned removal drops one."""
    blockers: tuple[Item, ...] = ()
    """Open obstacles, oldest first; resolving one removes it."""
    notes: tuple[Item, ...] = ()
    """Anything else worth sharing, oldest first."""
    applied_keys: dict[AuthorId, dict[IdempotencyKey, RememberedKey]] = Field(default_factory=dict)
    """Per author, the idempotency keys committed recently, each with its revision, the
    fingerprint of its op (`op_fingerprint`) and its proposal's deadline. Part of the
    replicated state so that any coordinator can answer a retried proposal with its
    original revision, and refuse a key reused for another op.

    A key is kept until `KEY_GRACE` seconds past its deadline, by the timestamps of the
    commits that follow (swept every `KEYS_PRUNE_EVERY` revisions): by then no copy of
    its proposal can be committed, since coordinators refuse a proposal past its
    deadline. Of all authors, at most `KEYS_REMEMBERED` or so are kept, those with the
    latest deadlines; see `keys_forgotten_until` for what is given up then."""
    keys_forgotten_until: int = 0
    """The latest deadline (Unix seconds) of a key forgotten before its time, because more
    than `KEYS_REMEMBERED` were due to be kept; 0 if none was. A proposal with a deadline
    no later than this, whose key is not remembered, may be a copy of one of those: it is
    refused (`expired`) rather than risk committing it twice."""

    @property
    def is_closed(self) -> bool:
        """Whether `close` has been committed."""
        return self.closed is not None

    def purged(self) -> TaskBrief:
        """What a closed domain keeps once its log is purged: revision, closure and
        idempotency keys, none of its content.

        Stored as the domain's last snapshot, it keeps the domain closed: without it, a
        proposal after the purge would find no brief at all and start the task afresh
        at revision 1, under replicas that still hold the old one. The keys let a
        retried `close` still hear that it was committed.
        """
        if self.closed is None:
            raise UsageError(f"the brief of {self.domain} is open: only a closed domain is purged")
        return TaskBrief(
            domain=self.domain,
            revision=self.revision,
            closed=self.closed,
            applied_keys=self.applied_keys,
            keys_forgotten_until=self.keys_forgotten_until,
        )

    def active_decisions(self) -> tuple[Decision, ...]:
        """Decisions not superseded, oldest first."""
        return tuple(d for d in self.decisions if d.superseded_by is None)

    def item_by_norm(self, field: ItemField, norm: str) -> Item | None:
        """The first item of `field` whose normalized text is `norm`, if any.

        Every proposal asks this, so each list is indexed on first use, and `model_copy`
        passes the index on (extended in place when an item was appended).
        """
        items: tuple[Item, ...] = getattr(self, field)
        indexes: dict[str, _NormIndex] = self.__dict__.setdefault(_NORM_INDEX, {})
        index = indexes.get(field)
        if index is None:
            index = indexes[field] = _NormIndex(items)
        return index.find(items, norm)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        indexes: dict[str, _NormIndex] | None = copied.__dict__.pop(_NORM_INDEX, None)
        if indexes and not deep:
            carried = {}
            for field, index in indexes.items():
                if index.take_over(getattr(self, field), getattr(copied, field)):
                    carried[field] = index
            copied.__dict__[_NORM_INDEX] = carried
        return copied

    def canonical_bytes(self) -> bytes:
        """The brief as sorted-key, whitespace-free UTF-8 JSON: the input of `brief_hash`."""
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()


class _NormIndex:
    """Where each normalized text first occurs in a list of items, shared by every brief
    whose list is a prefix of that list.

    Nearly every commit appends one item to one list; copying the index for each new
    brief would cost as much as the rest of the commit once the list is long. So the
    newest brief extends the index in place and takes it over, and an older brief reads
    it only up to its own length.
    """

    __slots__ = ("_items", "_first")

    def __init__(self, items: tuple[Item, ...]) -> None:
        self._items = items
        self._first: dict[str, int] = {}
        for position, item in enumerate(items):
            self._first.setdefault(item.norm, position)

    def find(self, items: tuple[Item, ...], norm: str) -> Item | None:
        """The first item of `items` (a prefix of the indexed list) with `norm`."""
        position = self._first.get(norm)
        return items[position] if position is not None and position < len(items) else None

    def take_over(self, before: tuple[Item, ...], after: tuple[Item, ...]) -> bool:
        """Whether the index serves a copy whose list went from `before` to `after`.

        Yes if nothing changed, or if one item was appended to the newest list indexed
        (the index is extended for it); no otherwise (the copy indexes on first use).
        """
        if after is before:
            return True
        if before is self._items and len(after) == len(before) + 1 and after[:-1] == before:
            self._first.setdefault(after[-1].norm, len(before))
            self._items = after
            return True
        return False


def brief_hash(brief: TaskBrief) -> str:
    """SHA-256 hex digest of the brief's canonical form.

    Covers every field, the revision and the remembered idempotency keys included, and
    nothing that is not a field, so it survives a dump/validate round trip and does not
    depend on the order a dict was built in.
    """
    return hashlib.sha256(brief.canonical_bytes()).hexdigest()
