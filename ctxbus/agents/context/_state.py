"""The engine's in-memory state and the ingest path.

Ingest is the hot path (every message of every turn), so it does one tokenization and
a few dictionary operations: no SQLite write (changes are flushed in batches), no
pydantic validation (arguments are checked by hand), regexes only on user and system
text and on large tool output.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ctxbus.agents.context._archive import compact_form
from ctxbus.agents.context._authored import AuthoredItem, AuthoredMemo
from ctxbus.agents.context._calls import CALL_OVERHEAD, Call, calls_text, calls_tokens, coerce_calls, legacy_calls
from ctxbus.agents.context._classify import PIN_COPY_MAX_CHARS, constraint_text, has_constraint, mostly_rule
from ctxbus.agents.context._config import ContextConfig
from ctxbus.agents.context._errors import InvalidMessage, UnknownReference
from ctxbus.agents.context._records import ConstraintRecord, Entry, Shown, SummaryEntry
from ctxbus.agents.context._report import log_trim, logger
from ctxbus.agents.context._tokens import Tokenizer
from ctxbus.schemas import MESSAGE_KINDS, MESSAGE_ROLES, message_id

if TYPE_CHECKING:
    from ctxbus.agents.context._render import Plan

__all__ = ["Changes", "ContextState", "Delta", "HeadState", "Queued", "check_message", "default_importance"]

_TAG_REF = re.compile(r"§(\d+)§")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
"""A lone surrogate: what `os.fsdecode` and other 'surrogateescape' decoders make of
bytes that are not UTF-8. SQLite (UTF-8) and the model's JSON cannot carry one."""
_DEFAULT_IMPORTANCE = {
    "conclusion": 0.7,
    "task_state": 0.7,
    "knowledge": 0.6,
    "chat": 0.4,
    "tool_call": 0.3,
    "tool_result": 0.3,
    "reasoning": 0.2,
    "synthetic": 0.1,
}
PIN_IMPORTANCE = 0.8
"""Importance at or above which a message is pinned."""


def default_importance(role: str, kind: str, *, first_user: bool) -> float:
    """Importance when the caller gives none: system text and the goal are pinned."""
    if role == "system":
        return 0.9
    if role == "user" and kind == "chat":
        return PIN_IMPORTANCE if first_user else 0.5
    return _DEFAULT_IMPORTANCE[kind]


@dataclass(frozen=True, slots=True)
class Delta:
    """A change of the shared brief, shown in the tail after message §after§."""

    after: int
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Changes:
    """Everything to write at a flush, taken from the state at once (`ContextState.drain`)."""

    new: list[Entry]
    changed: list[Entry]
    summaries: dict[int, SummaryEntry | None]
    """Summary entries written (or, as None, removed), by id."""
    all_summaries: list[SummaryEntry] | None
    """The whole summary layer, when it was replaced (restore); else None."""
    constraints: list[ConstraintRecord] | None
    """Every constraint record, when any changed; else None."""
    next_summary: int

    @property
    def empty(self) -> bool:
        return not (
            self.new or self.changed or self.summaries or self.all_summaries is not None or self.constraints is not None
        )


@dataclass(frozen=True, slots=True)
class Queued:
    """A message dropped since the last rebuild, still shown as it was until the next."""

    view: Shown
    tokens: int
    """Its `shown_tokens` before the drop."""
    tail_tokens: int
    """Its `tail_tokens` before the drop."""


@dataclass(frozen=True, slots=True)
class HeadState:
    """What the head of the prompt was built from, as of the last rebuild.

    Between rebuilds a compose only appends (docs/ARCHITECTURE.md section 3), so the
    head, and every message the previous prompt showed, render to the same bytes.
    A value: each compose plans the next one (`Plan.head`) and `ContextState.apply`
    puts it in place. In memory only: a reopened context rebuilds at its first compose
    (`due`).
    """

    composed_at: float | None = None
    """When the last compose ran (the context's clock); None: never since open."""
    boundary: int = 0
    """Pins and constraint records from this tag on are shown at their place in the tail,
    not in the head: the oldest message the rolling layer showed at the rebuild (or the
    next tag, if it showed none)."""
    opening: bool = False
    """Whether the head was the opening line alone."""
    brief: str | None = None
    """The brief the head was built from (as the host gave it)."""
    brief_text: str | None = None
    """What the head shows of it (headed; cut, if it did not fit), and its tokens."""
    brief_tokens: int = 0
    seen_brief: str | None = None
    """The brief as the model sees it: the head's with the deltas applied."""
    deltas: tuple[Delta, ...] = ()
    """Changes of the brief since the rebuild, shown in the tail (`agents.context._delta`)."""
    omitted: frozenset[int] = frozenset()
    """Hard constraints the rebuild left out of the head (they alone exceeded the budget)."""
    queued: Mapping[int, Queued] = field(default_factory=dict)
    """Drops queued until the next rebuild, by tag: what the message showed before."""
    authored: tuple[AuthoredItem, ...] = ()
    """The authored layer as the head shows it: each message the user wrote that the
    rolling layer let go, verbatim or compressed (`agents.context._authored.fit`)."""
    shown_upto: int = 0
    """One past the newest tag the last compose could show."""
    tail_length: int = 0
    """Messages of the tail the last compose showed."""
    due: str | None = "first"
    """Why the next compose must rebuild whatever the budget says, or None."""


class ContextState:
    """Messages, layers, summary entries and constraint records of one agent, in memory.

    The one writer of all of it: ingest, drops, notes, references and restores through
    its methods, a compose's changes through `apply` (the planner only reads), and every
    write handed out for the store at once by `drain`.
    """

    def __init__(self, config: ContextConfig, tokenizer: Tokenizer) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.entries: list[Entry] = []
        """All messages; `entries[tag - 1]` is the message with that tag."""
        self.rolling: list[Entry] = []
        """Messages of the rolling layer, oldest first."""
        self.pinned: list[Entry] = []
        """Messages pinned whole, in tag order (oldest first, as demotion expects), however
        late classification pinned them."""
        self.authored: list[Entry] = []
        """Messages of the authored layer (what the user wrote, let go by rolling), in tag order."""
        self.authored_memo = AuthoredMemo()
        """How the authored layer's messages split and render, worked out once (a cache)."""
        self.records: dict[int, ConstraintRecord] = {}
        """Constraint records by source tag."""
        self.summaries: list[SummaryEntry] = []
        self.summary_tokens = 0
        """Sum over summary entries of tokens + 1 (the newline joining them), kept current."""
        self.next_summary_id = 1
        self.ttl_tags: set[int] = set()
        """Tags of messages with a ttl: only these are checked for expiry."""
        self.new: list[Entry] = []
        self.unclassified: list[Entry] = []
        """User and system messages not yet checked for constraints; see `classify_pending`."""
        self.dirty: dict[int, Entry] = {}
        self.summary_changes: dict[int, SummaryEntry | None] = {}
        """Summary entries written (or, as None, removed) since the last flush, by id."""
        self.summaries_reset = False
        """Set when the whole summary layer was replaced (restore): rewrite it all."""
        self.records_dirty = False
        self.units: dict[int, list[Entry]] = {}
        """Members of each tool call/result unit, by the unit's first tag (a message that
        stands alone has no entry here: see `members`)."""
        self._open_calls: dict[str, int] = {}
        self._keys: set[str] = set()
        """Every call key handed out: a call whose id an earlier call had gets another."""
        self.unanswered: dict[int, list[int]] = {}
        """Calls no result answers yet: the call's tag -> the indexes of those calls. A
        rendering shows a stand-in result for each one it shows."""
        self.record_keys: dict[str, int] = {}
        """Normalized constraint text -> the tag that stated it first (dedupes restatements)."""
        self._has_user = False
        self.head = HeadState()
        """What the head was built from at the last rebuild; see `HeadState`."""
        self._pin_max = config.budgets(config.available).pinned
        count = tokenizer.count
        self._ascii_tag = count("§") == count("@") == 1 and count("§12§ x") == count("@12@ x")

    @property
    def next_tag(self) -> int:
        """The tag the next message will get."""
        return len(self.entries) + 1

    def add(
        self,
        role: str,
        content: str,
        *,
        kind: str | None,
        tool_name: str | None,
        call_id: str | None,
        importance: float | None,
        ttl: float | None,
        created_at: float,
        tool_calls: object = None,
    ) -> Entry:
        """Record one message: count it once, archive it if large, pin it if it binds.

        :raises InvalidMessage: naming the field and value that cannot be used.
        """
        kind, calls = check_message(role, content, kind, tool_name, call_id, importance, ttl, created_at, tool_calls)
        if calls:  # a comma-joined legacy pair names its first call, like tool_calls do
            tool_name, call_id = calls[0].name, calls[0].id or None
        tag = len(self.entries) + 1
        content = _replace_surrogates(content, tag)
        user_turn = _is_user_turn(role, kind, content)
        if importance is None:
            importance = default_importance(role, kind, first_user=user_turn and not self._has_user)
        entry = Entry(
            tag,
            message_id(content, tag),
            role,
            kind,
            content,
            tool_name,
            call_id,
            float(importance),
            None if ttl is None else float(ttl),
            float(created_at),
            0,
            calls=calls,
        )
        self._join_unit(entry)  # first: the calls are counted under the keys it gives them
        entry.tokens = entry.shown_tokens = self._count_rendered(tag, content, entry)
        if user_turn:
            self._has_user = True
        if kind == "tool_result" and entry.tokens > self.config.archive_threshold:
            self._archive(entry)
        elif role in ("user", "system") and kind not in ("tool_call", "tool_result"):
            self.unclassified.append(entry)
        elif entry.importance >= PIN_IMPORTANCE and kind not in ("tool_call", "tool_result"):
            self._pin(entry, "soft")
        if "§" in content:
            self._count_refs(content, tag)
        self.entries.append(entry)
        self.new.append(entry)
        if entry.layer == "rolling":
            self.rolling.append(entry)
        if ttl is not None:
            self.ttl_tags.add(tag)
        return entry

    def _count_rendered(self, tag: int, content: str, entry: Entry) -> int:
        """Tokens of `§N§ content` and of the entry's calls, with one tokenizer call.

        The non-ASCII `§` would make tiktoken re-encode the whole string to UTF-8 (an
        ASCII string is handed over as is), costing a fifth of ingest speed. `@` splits
        into the same pre-tokenizer pieces, so where both are one token (checked at
        start) `@N@ content` has exactly the same count. Otherwise prefix and content
        are counted apart, which can only over-count (the prefix's space stops merging
        into the first word).
        """
        calls = calls_text(entry.calls, entry.keys) if entry.calls else ""
        extra = CALL_OVERHEAD * len(entry.calls)
        if self._ascii_tag:
            return self.tokenizer.count(f"@{tag}@ {content}{calls}") + extra
        return self.tokenizer.count(content + calls) + self.tokenizer.count(f"§{tag}§ ") + extra

    def load(
        self, entries: list[Entry], summaries: list[SummaryEntry], records: list[ConstraintRecord], next_summary: int
    ) -> None:
        """Rebuild the in-memory state from stored rows."""
        legacy = [e for e in entries if e.kind == "tool_call" and not e.calls]
        for entry in legacy:
            # A row from before `tool_calls`: its calls are its name and id, with no
            # arguments (their cost is counted below, once they have their keys).
            entry.calls = legacy_calls(entry.tool_name, entry.call_id)
        self.entries = entries
        self.summaries = summaries
        self.summary_tokens = sum(e.tokens + 1 for e in summaries)
        self.records = {r.source_tag: r for r in records}
        self.reindex()
        self.next_summary_id = next_summary
        self._has_user = any(_is_user_turn(e.role, e.kind, e.content) for e in entries)
        self.units = {}
        self._open_calls, self._keys, self.unanswered = {}, set(), {}
        for entry in entries:
            self._join_unit(entry)
        for entry in legacy:
            if entry.calls:
                entry.tokens += calls_tokens(self.tokenizer.count, entry.calls, entry.keys)
                entry.sync_tokens()

    def reindex(self) -> None:
        """Rebuild the layer lists, the ttl set and the restatement keys from the entries
        and records, after a load or a restore placed messages wholesale.

        Both must leave the state a running context would have, or a reopen changes what
        the next compose does. A hard pin later cut to a record keeps the key of its whole
        text: a word-for-word restatement is then still recognised.
        """
        self.rebuild_due("layers")
        self.rolling = [e for e in self.entries if e.layer == "rolling"]
        self.pinned = [e for e in self.entries if e.layer == "pinned"]
        self.authored = [e for e in self.entries if e.layer == "authored"]
        self.ttl_tags = {e.tag for e in self.entries if e.ttl is not None}
        keys: dict[str, int] = {}
        for e in self.entries:
            record = self.records.get(e.tag)
            if e.pin == "hard" or record is not None:
                keys.setdefault(_key(e.content), e.tag)
            if record is not None:
                keys.setdefault(_key(record.text.split("§ ", 1)[-1]), e.tag)
        self.record_keys = keys

    def entry(self, tag: int) -> Entry | None:
        """The message with `tag`, if any."""
        return self.entries[tag - 1] if 0 < tag <= len(self.entries) else None

    def members(self, unit: int) -> list[Entry]:
        """The messages of a unit, in order."""
        return self.units.get(unit) or [self.entries[unit - 1]]

    def rebuild_due(self, reason: str) -> None:
        """Make the next compose rebuild the head (the layers changed under it)."""
        if self.head.due is None:
            self.head = replace(self.head, due=reason)

    def apply(self, plan: Plan) -> None:
        """Make the changes a compose planned (`agents.context._compose.plan`): the one
        place a compose writes.

        The head it planned replaces the last one. An append-only compose changes nothing
        else; a rebuild also moves the messages it evicted or demoted, puts in the
        constraint records and the summary layer as it left them, and stops checking the
        ttl of messages that left the layers. Trims, promotions and hard constraints
        left out are logged here, once made.
        """
        self.head = plan.head
        if plan.rebuild is None:
            return
        _log(self, plan)
        evicted = False
        for tag, layer in plan.moves.items():
            entry = self.entries[tag - 1]
            if entry.layer == "pinned":  # demoted (and maybe evicted after)
                self.pinned.remove(entry)
                entry.pin = ""
                if layer == "rolling":
                    bisect.insort(self.rolling, entry, key=lambda e: e.tag)
            evicted |= layer != "rolling"
            entry.layer = layer
            self.touch(entry)
        if evicted:
            self.rolling = [e for e in self.rolling if e.layer == "rolling"]
        self.authored = list(plan.authored_entries)
        if plan.records != self.records:
            self.records = dict(plan.records)
            self.record_keys = dict(plan.record_keys)
            self.records_dirty = True
        before = {s.id: s for s in self.summaries}
        for summary in plan.summaries:
            if before.pop(summary.id, None) != summary:
                self.summary_changes[summary.id] = summary
        self.summary_changes.update(dict.fromkeys(before))  # merged into another, or dropped
        self.summaries = list(plan.summaries)
        self.summary_tokens = sum(s.tokens + 1 for s in self.summaries)
        self.next_summary_id = plan.next_summary
        self.ttl_tags -= plan.ttl_done

    def drop(self, entry: Entry, placeholder: str, tokens: int, *, queue: bool) -> None:
        """Replace what `entry` shows by its drop placeholder (`tokens` long).

        A message the last prompt showed keeps showing as it was until the next rebuild
        when `queue` (its drop is queued: the prompt's prefix stays cached), else the
        next compose rebuilds. One no prompt showed yet just shows the placeholder.
        """
        head = self.head
        shown = entry.tag < head.shown_upto
        if shown and queue and head.due is None:
            queued = Queued(entry.shown_view(), entry.shown_tokens, entry.tail_tokens)
            self.head = replace(head, queued={**head.queued, entry.tag: queued})
        elif shown:
            self.rebuild_due("drop")
        entry.state = "dropped"
        entry.set_compact(placeholder, tokens)
        self.touch(entry)

    def annotate(self, tag: int, text: str) -> Entry:
        """Append `text` to what the model is shown of tool result §tag§.

        :raises UnknownReference: if there is no such message, or it is not a tool result.
        """
        entry = self.entry(tag)
        if entry is None or entry.kind != "tool_result":
            what = "no message" if entry is None else f"a {entry.kind} message"
            raise UnknownReference(f"§{tag}§ is {what}; only a tool result takes a note")
        entry.add_note(text, self.tokenizer.count(text) + 1 if text else 0)
        self.touch(entry)
        if tag < self.head.shown_upto:
            self.rebuild_due("note")  # a message a prompt already showed changes
        return entry

    def touch(self, entry: Entry) -> None:
        """Mark an entry as changed so the next flush writes it."""
        self.dirty[entry.tag] = entry

    def record_constraints(self, entry: Entry) -> None:
        """Record the constraints of a message just classified (see `constraint_record`)."""
        made = self.constraint_record(entry, self.record_keys)
        if made is not None:
            key, record = made
            self.records[entry.tag] = record
            self.record_keys[key] = entry.tag
            self.records_dirty = True
            self.rebuild_due("constraint")  # the head shows it from the next compose on

    def constraint_record(
        self, entry: Entry, keys: Mapping[str, int], *, compact: bool = False
    ) -> tuple[str, ConstraintRecord] | None:
        """The constraint record of a message, and the key it takes in `keys` (the
        restatement keys: `record_keys`, or a plan's copy of them). Changes nothing.

        Short messages that are mostly rule are recorded whole unless `compact`; others
        give their constraint units, up to `PIN_COPY_MAX_CHARS`. None if there is no
        constraint, or `keys` gives its text, word for word, to another message.
        """
        whole = not compact and entry.tokens <= self.config.constraint_whole_max and mostly_rule(entry.content)
        text = entry.content if whole else constraint_text(entry.content, PIN_COPY_MAX_CHARS)
        key = _key(text)
        if not key or keys.get(key, entry.tag) != entry.tag:
            return None
        shown = f"§{entry.tag}§ {text}"
        return key, ConstraintRecord(entry.tag, shown, self.tokenizer.count(shown))

    def replace_summaries(self, entries: list[SummaryEntry]) -> None:
        """Swap the whole summary layer (on restore)."""
        self.summaries = entries
        self.summary_tokens = sum(e.tokens + 1 for e in entries)
        self.summary_changes = {}
        self.summaries_reset = True

    def classify_pending(self) -> None:
        """Pin the user and system messages added since the last call, if they bind.

        Done in a batch before anything reads the layers (compose, tail, snapshots,
        flush) rather than in `add`: the regexes cost more than tokenizing a short chat
        message, and ingest is the hot path.
        """
        if not self.unclassified:
            return
        pending, self.unclassified = self.unclassified, []
        for entry in pending:
            if entry.layer == "rolling" and entry.state == "active":
                self._classify(entry)
        if any(entry.layer == "pinned" for entry in pending):
            self.rolling = [e for e in self.rolling if e.layer == "rolling"]

    def drain(self) -> Changes:
        """Take every change since the last flush, to be written in one transaction."""
        self.classify_pending()
        new, self.new = self.new, []
        new_tags = {e.tag for e in new}
        changed = [e for tag, e in self.dirty.items() if tag not in new_tags]
        self.dirty = {}
        changes = Changes(
            new,
            changed,
            self.summary_changes,
            list(self.summaries) if self.summaries_reset else None,
            sorted(self.records.values(), key=lambda r: r.source_tag) if self.records_dirty else None,
            self.next_summary_id,
        )
        self.summary_changes = {}
        self.summaries_reset = self.records_dirty = False
        return changes

    def undrain(self, changes: Changes) -> None:
        """Give back what `drain` took, when writing it failed: the next flush retries it."""
        self.new = changes.new + self.new
        self.dirty = {e.tag: e for e in changes.changed} | self.dirty
        self.summary_changes = changes.summaries | self.summary_changes
        self.summaries_reset |= changes.all_summaries is not None
        self.records_dirty |= changes.constraints is not None

    def referred(self, entry: Entry) -> None:
        """Count a reference to `entry` (a read, a search hit): it weighs in its value."""
        entry.refs += 1
        self.touch(entry)

    def restore(
        self,
        *,
        max_tag: int,
        placed: dict[int, tuple[str, str]],
        summaries: list[SummaryEntry],
        records: list[ConstraintRecord],
    ) -> None:
        """Put back the layers of a snapshot taken when `max_tag` was the newest tag.

        Messages added since stay where they are (but not in the summary: in rolling);
        a message dropped since is not pinned again; constraint records of messages added
        or dropped since are kept.
        """
        for e in self.entries:
            layer, pin = placed.get(e.tag, ("rolling", "")) if e.tag <= max_tag else (e.layer, e.pin)
            if (e.tag > max_tag and layer == "summary") or (layer == "pinned" and e.state == "dropped"):
                layer, pin = "rolling", ""
            if (layer, pin) != (e.layer, e.pin):
                e.layer, e.pin = layer, pin  # type: ignore[assignment]
                self.touch(e)
        self.replace_summaries(summaries)
        kept = {tag: r for tag, r in self.records.items() if tag > max_tag or self.entries[tag - 1].state == "dropped"}
        self.records = {r.source_tag: r for r in records} | kept
        self.records_dirty = True
        self.reindex()

    def _join_unit(self, entry: Entry) -> None:
        """Tool calls open a unit; their results join it. Everything else stands alone.

        Also pairs each result with the call it answers, for the renderings: the oldest
        unanswered call with its id, or (a result with no id) the first unanswered call
        of the unit it joins. Run in history order, at ingest and again at load, so it
        pairs the same way every time.
        """
        if not entry.unit:
            entry.unit = self._unit_for(entry)
        if entry.kind == "tool_call":
            self._open(entry)
        elif entry.kind == "tool_result":
            self._answer(entry)
        if entry.kind == "tool_call" or entry.unit != entry.tag:
            self.units.setdefault(entry.unit, []).append(entry)

    def _open(self, entry: Entry) -> None:
        tag, used = entry.tag, self._keys
        keys: list[str] = []
        for index, call in enumerate(entry.calls):
            if call.id:
                self._open_calls[call.id] = tag
            key = call.id or f"call_{tag}_{index}"
            while key in used:  # an id used before: the renderings need it unique
                key = f"{key}_{tag}"
            used.add(key)
            keys.append(key)
        entry.keys = tuple(keys)
        if keys:
            self.unanswered[tag] = list(range(len(keys)))

    def _answer(self, entry: Entry) -> None:
        """Pair a result with the call it answers: the newest call with its id (the one
        whose unit it joins), or the unit's first unanswered call if it has no id."""
        waiting = self.unanswered.get(entry.unit) if entry.unit != entry.tag else None
        if not waiting:
            return
        ids = _split_ids(entry.call_id)
        calls = self.entries[entry.unit - 1].calls
        index = next((i for i in waiting if calls[i].id in ids), None) if ids else waiting[0]
        if index is None:
            return
        waiting.remove(index)
        if not waiting:
            del self.unanswered[entry.unit]
        entry.answers = self.entries[entry.unit - 1].keys[index]

    def _unit_for(self, entry: Entry) -> int:
        if entry.kind != "tool_result":
            return entry.tag
        ids = _split_ids(entry.call_id)
        for cid in ids:
            if cid in self._open_calls:
                return self._open_calls[cid]
        if not ids and self.entries and self.entries[-1].kind in ("tool_call", "tool_result"):
            # Calls without ids (classic SWE-agent): the result answers the call before it.
            return self.entries[-1].unit
        return entry.tag

    def _archive(self, entry: Entry) -> None:
        cfg = self.config
        entry.state = "archived"
        compact = compact_form(
            entry.tag,
            entry.content,
            tool_name=entry.tool_name,
            tokens=entry.tokens,
            lines=cfg.compact_lines,
            line_chars=cfg.compact_line_chars,
            error_count=cfg.compact_error_lines,
        )
        entry.set_compact(compact, self.tokenizer.count(compact))

    def _classify(self, entry: Entry) -> None:
        if has_constraint(entry.content):
            if entry.tokens <= self.config.constraint_whole_max and mostly_rule(entry.content):
                key = _key(entry.content)
                if key in self.record_keys:
                    return  # a word-for-word restatement: the first one is pinned already
                if self._pin(entry, "hard"):
                    self.record_keys[key] = entry.tag
                    return
            self.record_constraints(entry)
        if entry.importance >= PIN_IMPORTANCE:
            self._pin(entry, "soft")

    def _pin(self, entry: Entry, pin: str) -> bool:
        if entry.tokens > self._pin_max:
            return False
        entry.layer = "pinned"
        entry.pin = pin
        bisect.insort(self.pinned, entry, key=lambda e: e.tag)
        return True

    def _count_refs(self, content: str, tag: int) -> None:
        for match in _TAG_REF.finditer(content):
            target = self.entry(int(match.group(1)))
            if target is not None and target.tag != tag:
                target.refs += 1
                self.touch(target)


def _log(state: ContextState, plan: Plan) -> None:
    """Log what a rebuild changed: trims, promoted constraints, hard constraints left out
    (newest first, as the plan left them out)."""
    for trim in plan.trims:
        log_trim(plan.domain, trim)
    for tag in plan.promoted:
        logger.info(
            "context promote §%s§ constraint to pinned",
            tag,
            extra={"event": "promote", "domain": plan.domain, "msg_id": state.entries[tag - 1].id, "tag": tag},
        )
    for tag in sorted(plan.head.omitted, reverse=True):
        logger.warning(
            "context: hard constraint §%s§ left out: hard constraints alone exceed the budget",
            tag,
            extra={"event": "hard_omitted", "domain": plan.domain, "tag": tag},
        )


_ROLES = frozenset(MESSAGE_ROLES)
_KINDS = frozenset(MESSAGE_KINDS)


def check_message(
    role: str,
    content: str,
    kind: str | None,
    tool_name: str | None,
    call_id: str | None,
    importance: float | None,
    ttl: float | None,
    created_at: float | None = None,
    tool_calls: object = None,
) -> tuple[str, tuple[Call, ...]]:
    """The message's kind (defaulted from the role when None) and its calls, once every
    field is usable.

    Content may hold lone surrogates (`add` replaces them); identifiers may not, since a
    replaced call id could pair a result with the wrong call. A call given by
    `tool_name`/`call_id` alone (the single-call form, or the older comma-joined one) is
    turned into its `ToolCall`s, with no arguments.

    :raises InvalidMessage: naming the field and value that cannot be used.
    """
    if not isinstance(role, str) or role not in _ROLES:
        raise InvalidMessage(f"role {role!r} is not one of {', '.join(MESSAGE_ROLES)}")
    if content.__class__ is not str and not isinstance(content, str):
        raise InvalidMessage(f"content must be a string, got {type(content).__name__}")
    calls = coerce_calls(tool_calls) if tool_calls is not None else ()
    if calls:
        if role != "assistant":
            raise InvalidMessage(f"only an assistant message makes tool calls, not role {role!r}")
        if kind not in (None, "tool_call"):
            raise InvalidMessage(f"a message with tool_calls is a 'tool_call', not kind {kind!r}")
        if tool_name is not None or call_id is not None:
            raise InvalidMessage(
                "give a turn's calls either in tool_calls or, one call, as tool_name and call_id; not both"
            )
    if kind is None:
        if role == "tool":
            kind = "tool_result"
        elif role == "assistant" and (tool_name or call_id or calls):
            kind = "tool_call"
        else:
            kind = "chat"
    elif kind not in _KINDS:
        raise InvalidMessage(f"kind {kind!r} is not one of {', '.join(MESSAGE_KINDS)}")
    if (role == "tool") != (kind == "tool_result"):
        raise InvalidMessage(f"kind {kind!r} does not fit role {role!r}: tool results and only they have role 'tool'")
    if kind == "tool_call" and role != "assistant":
        raise InvalidMessage(f"kind 'tool_call' needs role 'assistant', got {role!r}")
    if importance is not None and not (isinstance(importance, int | float) and 0.0 <= importance <= 1.0):
        raise InvalidMessage(f"importance must be between 0 and 1, got {importance!r}")
    if ttl is not None and not (isinstance(ttl, int | float) and ttl > 0):
        raise InvalidMessage(f"ttl must be a positive number of seconds, got {ttl!r}")
    if tool_name is not None and not isinstance(tool_name, str):
        raise InvalidMessage(f"tool_name must be a string or None, got {tool_name!r}")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidMessage(f"call_id must be a string or None, got {call_id!r}")
    for name, ident in (("tool_name", tool_name), ("call_id", call_id)):
        if ident and (at := _surrogate_at(ident)) >= 0:
            raise InvalidMessage(
                f"{name} has an undecodable character {ident[at]!r} at position {at} (bytes that are not "
                "UTF-8, decoded with 'surrogateescape'); decode it with errors='replace'"
            )
    if created_at is not None and not (
        isinstance(created_at, int | float) and not isinstance(created_at, bool) and math.isfinite(created_at)
    ):
        raise InvalidMessage(
            f"created_at must be seconds since the epoch (a finite number), got {type(created_at).__name__} "
            f"{created_at!r:.60}"
        )
    if kind == "tool_call" and not calls:
        calls = legacy_calls(tool_name, call_id)
    return kind, calls


def _surrogate_at(text: str) -> int:
    """Index of the first lone surrogate in `text`, or -1 (at once for ASCII text)."""
    if text.isascii():
        return -1
    found = _SURROGATE.search(text)
    return -1 if found is None else found.start()


def _replace_surrogates(content: str, tag: int) -> str:
    """`content` with each lone surrogate replaced by U+FFFD, as decoding with
    errors='replace' would have done.

    Replaced rather than refused: such text is mostly tool output (file names from
    `os.listdir`, a subprocess decoded with 'surrogateescape'), the undecodable bytes can
    reach neither the store nor the model, and refusing would leave the tool call without
    its result. A message could not be stored otherwise, and every later flush would fail.
    """
    if _surrogate_at(content) < 0:
        return content
    replaced, count = _SURROGATE.subn("\ufffd", content)
    logger.warning(
        "context: §%s§ had %s undecodable character(s); stored as U+FFFD",
        tag,
        count,
        extra={"event": "surrogates_replaced", "tag": tag, "count": count},
    )
    return replaced


def _is_user_turn(role: str, kind: str, content: str) -> bool:
    """Whether a message is a real user turn: the first one is the goal.

    A synthetic user message (a Channel 2 "prune now") is not, nor is a blank one (an
    image-only turn's text part), so neither can take the goal's place and leave the real
    goal unpinned.
    """
    return role == "user" and kind == "chat" and bool(content) and not content.isspace()


def _split_ids(call_id: str | None) -> list[str]:
    if not call_id:
        return []
    if "," not in call_id:
        return [call_id.strip()]
    return [part.strip() for part in call_id.split(",") if part.strip()]


def _key(text: str) -> str:
    return " ".join(text.split()).lower()
