"""Compose: plan how the three layers fit the budget, apply the plan, render the prompt.

Every cost comes from counts cached at ingest (or when a summary entry or constraint
record was written), so a compose over a 128k window adds integers instead of
tokenizing. What is given up when the prompt is over budget, in order:

1. expired messages (low-value chat dropped, the rest summarized);
2. soft pins over the pinned cap, then long hard pins cut to their constraint sentences;
3. the least valuable units of rolling outside the protected window, into the summary
   (whose oldest entries are merged to keep it under its cap);
4. only when the rest alone is over budget: summary entries (folded smaller, dropped
   only when that cannot help), remaining pins, the protected window, and last, hard
   constraints (reported, never silent) and the brief.

The system message (the host's prompt, or the mode's template) is never given up: it
is what the host said the model is, and a prompt that cannot hold it is an error.

All of that happens only at a rebuild (docs/ARCHITECTURE.md section 3). Between rebuilds
a compose only appends to the previous prompt, so a provider's prompt cache serves it:
it rebuilds past the high-water mark (evicting down to the low-water mark), when the
cache has likely expired, or when something under the head changed (`HeadState.due`).

A compose (`LocalContext.compose`) is three steps. `plan`, here, reads the state and
changes nothing: it works on its own copies of what it may change and returns a `Plan`
holding every change it decided (messages evicted or demoted, the summary layer after
its folds, merges and drops, the constraint records made or forgotten, the next head:
appended to, or rebuilt with the queued drops applied). `ContextState.apply` writes
those changes, the one place a compose does; `render` turns the plan into the
`Composition`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping

from ctxbus.agents.context._authored import AUTHORED_HEADER, AuthoredItem, fit, is_authored, statement_density
from ctxbus.agents.context._classify import SHORT_RULE_CHARS, has_constraint
from ctxbus.agents.context._config import LayerBudgets
from ctxbus.agents.context._delta import brief_delta
from ctxbus.agents.context._errors import InputTooLarge, InvalidConfig
from ctxbus.agents.context._modes import ModeDescriptor
from ctxbus.agents.context._records import (
    LOW_VALUE_KINDS,
    ConstraintRecord,
    Entry,
    Layer,
    SummaryEntry,
    eviction_value,
)
from ctxbus.agents.context._render import OPENING, PINNED_HEADER, SUMMARY_HEADER, Plan, late_pins
from ctxbus.agents.context._report import Trim, TrimReason
from ctxbus.agents.context._state import ContextState, Delta, HeadState, Queued
from ctxbus.agents.context._summary import Summarizer
from ctxbus.agents.context._wire import STANDIN_RESULT
from ctxbus.schemas import MESSAGE_KINDS

__all__ = ["plan", "protected_units"]

_BRIEF_HEADER = "[shared brief]\n"
_MIN_SUMMARY_TARGET = 12
"""A summary cap below this many tokens holds nothing useful: entries are dropped instead."""
_MERGED_MAX = 512
"""Largest entry a merge of two produces. Keeping entries small keeps each merge (one
count of the merged text) cheap, so composes stay fast at large windows."""
_SHRINK_ATTEMPTS = 4
"""Times a lone summary entry over its room is merged again, smaller, before it goes."""
_SUMMARY_FOLD_BELOW = 256
"""New summary text joins the newest entry while their sum stays below this many tokens."""


_BINDING_KINDS = frozenset({"conclusion", "task_state", "knowledge"})
_ROLE_RANK = {"user": 2, "system": 1}


def _pin_rank(e: Entry) -> tuple[int, int]:
    """Order in which pins give way: the assistant's first, the user's last, oldest first."""
    return _ROLE_RANK.get(e.role, 0), e.tag


def _may_bind(e: Entry) -> bool:
    """Whether a constraint in this message binds later turns.

    User and system text is checked at ingest already; conclusions, task state and
    knowledge (say, an agreed decision the assistant wrote down) are checked when they are
    summarized. Tool output and plain assistant chat are not: "must" there describes code
    or a plan, not a rule.
    """
    return e.role in ("user", "system") or e.kind in _BINDING_KINDS


def _shows(text: str, record: str) -> bool:
    """Whether `text` holds every line of constraint record `record` (its `§N§ ` cut)."""
    lines = record.split("§ ", 1)[-1].split("\n")
    return all(line.strip() in text for line in lines if line.strip())


def protected_units(visible: list[Entry], recent: int) -> set[int]:
    """Units of the newest `recent` visible messages: eviction does not touch them."""
    return {e.unit for e in visible[len(visible) - recent :]} if recent else set()


def plan(
    state: ContextState,
    summarizer: Summarizer,
    mode: ModeDescriptor,
    user_input: str,
    brief: str | None,
    *,
    now: float,
    domain: str,
    count: Callable[[str], int],
) -> Plan:
    """Fit the layers to the budget (trimming as needed): what a compose at `now` does,
    with every change it decides. Changes nothing: the same state (and summarizer) gives
    an equal plan however often it is asked, and nothing is written until
    `ContextState.apply` takes it; `render` makes the prompt of it.

    :param count: a cached token counter for texts that repeat across composes (the
        system text, the brief, headers).
    :raises InvalidConfig: if the system prompt (the host's, or the mode's) alone does
        not fit the window.
    :raises InputTooLarge: if `user_input` alone does not fit.
    """
    return _Planner(state, summarizer, mode, user_input, brief, now, domain, count).plan()


class _Planner:
    """The working state of one plan: it reads the `ContextState` and keeps what it
    changes in its own copies (`moved`, and from a rebuild on the layers' lists, records
    and summary entries), which the `Plan` hands over."""

    def __init__(
        self,
        state: ContextState,
        summarizer: Summarizer,
        mode: ModeDescriptor,
        user_input: str,
        brief: str | None,
        now: float,
        domain: str,
        count: Callable[[str], int],
    ) -> None:
        self.st = state
        """Read, never written: see `ContextState.apply`."""
        self.cfg = state.config
        self.summarizer = summarizer
        self.mode = mode
        self.now = now
        self.domain = domain
        self.count = count
        self.ov = self.cfg.message_overhead
        host = self.cfg.system_prompt
        self.sys_text = host if host is not None else mode.system_text
        self.sys_cost = count(self.sys_text) + self.ov
        self.user_input = user_input
        self.input_cost = state.tokenizer.count(user_input) + self.ov if user_input else 0
        # The system prompt may take its reserve plus all of the layers' room; past that it
        # is the prompt that does not fit, whatever the input, and blaming the input misleads.
        room = self.cfg.window - self.cfg.reserve_output
        if self.sys_cost > room:
            whose = "the host's system prompt" if host is not None else f"mode {mode.name!r}'s system prompt"
            fix = "shorten it" if host is not None else "shorten the mode's system template"
            raise InvalidConfig(
                f"{whose} takes {self.sys_cost:,} tokens, over the {room:,} tokens the window leaves for it "
                f"after the output reserve; {fix} or use a model with a larger window"
            )
        excess = max(0, self.sys_cost - self.cfg.reserve_system)
        self.layers_cap = self.cfg.available - excess - self.input_cost
        if self.layers_cap < 0:
            raise InputTooLarge(self.input_cost, self.cfg.available - excess)
        self.b: LayerBudgets = self.cfg.budgets(self.layers_cap)
        self.head_brief = brief
        self.brief = f"{_BRIEF_HEADER}{brief}" if brief else None
        self.brief_tokens = count(self.brief) if self.brief else 0
        self.summary_header = count(SUMMARY_HEADER)
        self.pinned_header = count(PINNED_HEADER)
        self.authored_header = count(AUTHORED_HEADER)
        self.standin_cost = count(STANDIN_RESULT) + self.ov
        """A call shown with no result gets a stand-in result (see `agents.context._wire`)."""
        self.opening = False
        """Whether the head is `OPENING` alone: nothing else would come before an
        assistant message (see `needs_opening`)."""
        self.opening_cost = count(OPENING) + self.ov
        self.trims: list[Trim] = []
        self.promoted: list[int] = []
        self.notes: list[str] = []
        self.omitted: set[int] = set()
        self.merges = 0
        self.batch: list[Entry] = []
        self.pinned_overflow = 0
        self.evicted = False
        # The layers as this plan leaves them: the state's own until a rebuild starts
        # changing them (`_own`), then copies.
        self.rolling = state.rolling
        self.pinned = state.pinned
        self.authored = state.authored
        self.records = state.records
        self.keys = state.record_keys
        self.summaries = state.summaries
        self.summary_tokens = state.summary_tokens
        self.next_summary = state.next_summary_id
        self.moved: dict[int, Layer] = {}
        """Messages this plan moves to another layer: evicted, or demoted to rolling."""
        self.ttl_done: set[int] = set()
        """Messages with a ttl that left the layers: no longer checked for expiry."""
        head = state.head
        self.rebuild: str | None = head.due
        """Why this compose rebuilds the head, or None while it only appends."""
        if self.rebuild is None and head.composed_at is not None and now - head.composed_at > self.cfg.cache_lifetime:
            self.rebuild = "cache_expired"
        self.seen_brief = brief
        if self.rebuild is None and brief != head.seen_brief:
            if brief is None or head.seen_brief is None or head.brief_text != f"{_BRIEF_HEADER}{head.brief}":
                self.rebuild = "brief"  # no brief to change (or one cut to fit): the head shows it afresh
        # Everything below follows from whether this compose starts as a rebuild.
        self.queued: Mapping[int, Queued] = {} if self.rebuild else head.queued
        """Drops queued until the next rebuild: shown as they were (see `ContextState.drop`)."""
        self.stable = 0 if self.rebuild else head.tail_length
        """Tail messages the previous compose showed too (see `Prompt.stable`)."""
        self.deltas: tuple[Delta, ...] = ()
        """Changes of the brief since the last rebuild, shown in the tail."""
        self.boundary: int | None = None if self.rebuild else head.boundary
        """Pins and records from this tag on show in the tail; None while rebuilding (then
        it is the oldest message the rolling layer shows, as it goes)."""
        self.items: list[AuthoredItem] | None = None
        """The authored layer as this plan shows it; None until worked out (`shown_authored`)."""
        if self.rebuild is None:
            self.items = list(head.authored)
            self.opening = head.opening
            self.omitted = set(head.omitted)
            self.brief, self.brief_tokens = head.brief_text, head.brief_tokens
            self.deltas = head.deltas
            if brief != head.seen_brief:
                assert brief is not None and head.seen_brief is not None
                text = brief_delta(head.seen_brief, brief)
                self.deltas += (Delta(state.next_tag - 1, text, count(text)),)

    # -- costs -------------------------------------------------------------------------

    def pinned_cost(self) -> int:
        """The pinned layer with the brief, which shares its cap."""
        return self.rules_cost() + self.brief_cost()

    def shown_authored(self) -> list[AuthoredItem]:
        """The authored layer as shown: verbatim while it fits its share, else compressed
        (`agents.context._authored.fit`). Worked out again whenever a rebuild moves a
        message into it or out of it."""
        if self.items is None:
            cap = self.b.authored - self.authored_header - self.ov
            self.items = fit(self.authored, cap, self.st.authored_memo, self.count_once)
        return self.items

    def authored_cost(self) -> int:
        if not self.authored:
            return 0
        return self.ov + self.authored_header + sum(i.tokens + 1 for i in self.shown_authored())

    def verbatim_records(self) -> set[int]:
        """Authored messages that show every line of their constraint record: the record
        would say again what the user's words say there. One compressed so that a
        constraint went behind a locator or was folded shows its record in the pinned block."""
        if not self.authored or not self.records:
            return set()
        hidden = set()
        for item in self.shown_authored():
            record = self.records.get(item.tag)
            if record is not None and (item.form.verbatim or _shows(item.text, record.text)):
                hidden.add(item.tag)
        return hidden

    def brief_cost(self) -> int:
        """The brief in the head and its deltas in the tail."""
        head = self.brief_tokens + 1 + self.ov if self.brief else 0
        return head + sum(d.tokens + self.ov for d in self.deltas)

    def rules_cost(self) -> int:
        """The pinned layer without the brief: pinned messages and constraint records, and
        the opening line when the head is that alone. A pin shown in the tail (newer than
        the rolling layer's oldest message shown) is a message of its own there."""
        first = self.first_rolling()
        entries, moved = self.st.entries, self.moved
        hidden = self.verbatim_records() if self.records else set()
        items = 0
        total = self.opening_cost if self.opening else 0
        for e in self.pinned:
            if e.tag in self.omitted:
                continue
            if e.tag >= first:
                total += e.shown_tokens + self.ov
            else:
                items += 1
                total += e.shown_tokens + 1
        for tag, record in self.records.items():
            if tag not in self.omitted and tag not in hidden and moved.get(tag, entries[tag - 1].layer) != "pinned":
                items += 1
                total += record.tokens + 1
        return total + (self.ov + self.pinned_header if items else 0)

    def first_rolling(self) -> int:
        """Where the tail starts: the tag of the oldest message the rolling layer shows, or
        one past the newest tag when it shows none. Between rebuilds, where it started at
        the last one (`HeadState.boundary`): the head holds what is older."""
        if self.boundary is not None:
            return self.boundary
        moved = self.moved
        for e in self.visible:
            if moved.get(e.tag, e.layer) == "rolling":
                return e.tag
        return self.st.next_tag

    def summary_cost(self) -> int:
        if not self.summaries:
            return 0
        return self.ov + self.summary_header + self.summary_tokens

    def layer(self, e: Entry) -> Layer:
        """The layer `e` is in as this plan leaves it (in loops: `moved.get(e.tag, e.layer)`)."""
        return self.moved.get(e.tag, e.layer)

    # -- the plan ----------------------------------------------------------------------

    def needs_opening(self) -> bool:
        """Whether the prompt would show no user message before its first other message
        (nothing in the head, and the tail starting with an assistant turn) or no message
        at all after the system one: user-first APIs refuse both."""
        entries, moved, omitted = self.st.entries, self.moved, self.omitted
        if self.summary_cost() or self.brief or self.authored:
            return False
        if any(tag not in omitted and moved.get(tag, entries[tag - 1].layer) != "pinned" for tag in self.records):
            return False
        rolling = next((e for e in self.visible if moved.get(e.tag, e.layer) == "rolling"), None)
        late = late_pins(self.pinned, self.first_rolling(), omitted)
        if any(e.tag not in omitted and e not in late for e in self.pinned):
            return False  # a pin in the head
        first = min(late[:1] + ([rolling] if rolling else []), key=lambda e: e.tag, default=None)
        return first.role == "assistant" if first is not None else not self.user_input

    def plan(self) -> Plan:
        self._measure()
        if self.rebuild is None:
            if self._expiring():
                self.rebuild = "expired"
            elif not self.opening and self.needs_opening():
                self.rebuild = "opening"  # the prompt would show no user message (see `needs_opening`)
            elif self.total() <= self.layers_cap * self.cfg.high_water:
                return self._decided()
            else:
                self.rebuild = "pressure"
            self.boundary = None
            self.opening = False  # the rebuild decides afresh
            self.omitted, self.deltas, self.stable = set(), (), 0
            if self.queued:  # applied now: the rebuild shows their placeholders
                self.queued = {}
                self._measure()
            self.brief = f"{_BRIEF_HEADER}{self.head_brief}" if self.head_brief else None
            self.brief_tokens = self.count(self.brief) if self.brief else 0
        self._own()
        self._expire()
        while self.pinned_cost() > self.b.pinned and self._demote_one():
            self._measure()
        if self.rebuild in ("pressure", "cache_expired"):
            self._lower()
        self._fit()
        if self.needs_opening():
            # Room for the line is taken from the layers and the fit run again; what it
            # evicts may make a summary, which then opens the prompt instead.
            self.layers_cap -= self.opening_cost
            self._fit()
            self.opening = self.needs_opening()
        self.pinned_overflow = max(0, self.pinned_cost() - self.b.pinned)
        self.boundary = self.first_rolling()
        return self._decided()

    def _own(self) -> None:
        """Copy the layers this rebuild may change: the state's stay as they are."""
        self.rolling, self.pinned, self.authored = list(self.rolling), list(self.pinned), list(self.authored)
        self.records, self.keys = dict(self.records), dict(self.keys)
        self.summaries = list(self.summaries)

    def _decided(self) -> Plan:
        """What this plan decided, fixed: the changes for `ContextState.apply` and all the
        render reads."""
        assert self.boundary is not None
        st = self.st
        moved = self.moved
        rolling = [e for e in self.visible if moved.get(e.tag, e.layer) == "rolling"] if self.evicted else self.visible
        late = late_pins(self.pinned, self.boundary, self.omitted)
        tail_length = len(rolling) + len(late) + len(self.deltas)
        authored = tuple(self.shown_authored())
        head = HeadState(
            composed_at=self.now,
            boundary=self.boundary,
            opening=self.opening,
            brief=self.head_brief if self.rebuild else st.head.brief,
            brief_text=self.brief,
            brief_tokens=self.brief_tokens,
            seen_brief=self.seen_brief,
            deltas=self.deltas,
            omitted=frozenset(self.omitted),
            queued=self.queued,
            authored=authored,
            shown_upto=st.next_tag,
            tail_length=tail_length,
            due=None,
        )
        return Plan(
            mode=self.mode,
            domain=self.domain,
            budget=self.cfg.window - self.cfg.reserve_output,
            ov=self.ov,
            b=self.b,
            sys_text=self.sys_text,
            sys_cost=self.sys_cost,
            user_input=self.user_input,
            input_cost=self.input_cost,
            opening_cost=self.opening_cost,
            standin_cost=self.standin_cost,
            rebuild=self.rebuild,
            stable=self.stable,
            head=head,
            rolling=rolling,
            late=late,
            pinned=self.pinned,
            authored_entries=self.authored,
            hidden_records=frozenset(self.verbatim_records()),
            authored_cost=self.authored_cost(),
            records=self.records,
            record_keys=self.keys,
            summaries=self.summaries,
            next_summary=self.next_summary,
            unanswered=st.unanswered,
            moves=self.moved,
            ttl_done=frozenset(self.ttl_done),
            rules_cost=self.rules_cost(),
            summary_cost=self.summary_cost(),
            brief_cost=self.brief_cost(),
            trims=tuple(self.trims),
            promoted=tuple(self.promoted),
            notes=tuple(self.notes),
            merges=self.merges,
            pinned_overflow=self.pinned_overflow,
        )

    def total(self) -> int:
        """What the layers cost as they stand."""
        return self.pinned_cost() + self.authored_cost() + self.summary_cost() + self.rolling_cost

    def _expiring(self) -> bool:
        """Whether a message in the prompt has outlived its ttl."""
        return any(
            self.layer(e := self.st.entries[tag - 1]) in ("rolling", "pinned") and e.expired(self.now)
            for tag in self.st.ttl_tags
        )

    def _lower(self) -> None:
        """Evict by value down to the low-water mark: the turns after this rebuild then
        only append, until the prompt reaches the high-water mark again."""
        low = int(self.layers_cap * self.cfg.low_water)
        # What is evicted is summarized, and the summary grows: evict again until the
        # whole is down to the mark (or nothing outside the protected window is left).
        # What the user wrote beyond its share goes last: left there, it would keep the
        # prompt at the high-water mark and rebuild the head at every call.
        while (over := self.total() - low) > 0:
            if self._evict_by_value(over):
                self._flush_batch()
            elif not self._give_authored(beyond_share=True):
                return

    def _measure(self) -> None:
        """(Re)compute the visible rolling messages, their cost and the protected units.

        Linear in the rolling layer but only attribute reads: units are looked up in the
        state's unit index and candidates are taken lazily from the oldest end.
        """
        kinds = self.mode.kinds
        rolling, moved = self.rolling, self.moved
        if len(kinds) == len(MESSAGE_KINDS):
            self.visible = (
                [e for e in rolling if moved.get(e.tag, e.layer) == "rolling"] if self.evicted else list(rolling)
            )
        else:
            self.visible = [e for e in rolling if moved.get(e.tag, e.layer) == "rolling" and e.kind in kinds]
        self.rolling_cost = sum([e.shown_tokens for e in self.visible]) + self.ov * len(self.visible)
        if self.st.unanswered:
            self.rolling_cost += sum(self._standins(e) for e in self.visible)
        for tag, queued in self.queued.items():
            e = self.st.entries[tag - 1]
            if self.layer(e) == "rolling" and e.kind in kinds:
                self.rolling_cost += queued.tokens - e.shown_tokens
        self.protected = protected_units(self.visible, self.cfg.protected_recent)
        self.newest = self.visible[-1].tag if self.visible else 0
        self.candidates = self._candidates()
        self.window: list[int] = []
        self.values: dict[int, float] = {}

    def _standins(self, e: Entry) -> int:
        waiting = self.st.unanswered.get(e.tag)
        return len(waiting) * self.standin_cost if waiting else 0

    def _candidates(self) -> Iterator[int]:
        """Unprotected units in rolling, oldest first, each once."""
        seen: set[int] = set()
        moved = self.moved
        for e in self.visible:
            unit = e.unit
            if unit in seen or unit in self.protected or moved.get(e.tag, e.layer) != "rolling":
                continue
            seen.add(unit)
            yield unit

    def _members(self, unit: int) -> list[Entry]:
        kinds, moved = self.mode.kinds, self.moved
        return [e for e in self.st.members(unit) if moved.get(e.tag, e.layer) == "rolling" and e.kind in kinds]

    def _expire(self) -> None:
        if not self.st.ttl_tags:
            return
        due: list[int] = []
        for tag in sorted(self.st.ttl_tags):
            e = self.st.entries[tag - 1]
            if e.expired(self.now):
                self._forget_record(tag)  # a long message's constraints outlive its layer
            layer = self.layer(e)
            if layer not in ("rolling", "pinned"):
                self.ttl_done.add(tag)
            elif e.expired(self.now):
                if layer == "pinned":
                    self._demote(e)
                    self._trim(e, "expired", "pinned", "rolling", e.shown_tokens)
                    self._measure()
                if e.kind in self.mode.kinds and e.unit not in self.protected and e.unit not in due:
                    due.append(e.unit)
        for unit in due:
            self._evict(self._members(unit), "expired")
        self._flush_batch()

    def _fit(self) -> None:
        while True:
            over = self.total() - self.layers_cap
            if over <= 0:
                return
            if self._evict_by_value(over):
                self._flush_batch()
            elif self.summaries and self._fold_summary(over):
                pass
            elif self.summaries:
                self._drop_summary(0)
            elif self._demote_one():
                self._measure()
            elif self._give_authored(beyond_share=True):
                self._note(
                    "what the user wrote is over its share with everything else given up; the oldest is summarized"
                )
            elif self._evict_protected():
                self._note("the protected recent window alone is over budget; evicting inside it")
                self._flush_batch()
            elif self._give_authored(beyond_share=False):
                self._note("what the user wrote alone is over budget; the oldest is summarized")
            elif self._omit_newest_hard():
                self._note("hard constraints alone exceed the budget; the newest are left out of this prompt")
            elif self.brief:
                self._cut_brief(over)
            else:
                return

    def _evict_by_value(self, over: int) -> int:
        """Evict the least valuable unprotected units until `over` tokens are freed.

        Only the oldest `eviction_scan` units are weighed against each other: age is part
        of value anyway, and it keeps each pick cheap on long histories.
        """
        freed = 0
        scan = self.cfg.eviction_scan
        window = self.window
        while freed < over:
            while len(window) < scan:
                unit = next(self.candidates, None)
                if unit is None:
                    break
                window.append(unit)
            if not window:
                break
            unit = min(window, key=self._unit_value)
            window.remove(unit)
            freed += self._evict(self._members(unit), "low_value")
        return freed

    def _unit_value(self, unit: int) -> tuple[float, int]:
        value = self.values.get(unit)
        if value is None:
            members = self._members(unit)
            value = max((eviction_value(e, self.newest) for e in members), default=0.0)
            self.values[unit] = value
        return (value, unit)

    def _evict_protected(self) -> bool:
        """Evict the oldest protected unit (only when nothing else is left to give);
        False if none has anything this mode can evict (or `_fit` would loop forever)."""
        for e in self.visible:
            if self.layer(e) == "rolling" and e.unit in self.protected and (members := self._members(e.unit)):
                self._evict(members, "over_budget")
                return True
        return False

    def _evict(self, members: list[Entry], reason: TrimReason) -> int:
        freed = 0
        for e in members:
            cost = e.shown_tokens + self.ov + self._standins(e)
            freed += cost
            expired = e.expired(self.now)
            if (
                e.state == "dropped"
                or e.kind == "synthetic"
                or (expired and e.kind in LOW_VALUE_KINDS and e.importance < 0.5)
            ):
                self.moved[e.tag] = "gone"
                destination = "dropped"
            elif not expired and is_authored(e):
                # Author first: what the user wrote is kept in their words, whatever it says.
                self.moved[e.tag] = destination = "authored"
                bisect.insort(self.authored, e, key=lambda x: x.tag)
                self.items = None
            else:
                self.moved[e.tag] = "summary"
                destination = "summary"
                self.batch.append(e)
            self._trim(e, "expired" if expired else reason, "rolling", destination, e.shown_tokens)
        self.rolling_cost -= freed
        self.evicted = True
        return freed

    def _give_authored(self, *, beyond_share: bool) -> bool:
        """Make room from what the user wrote, when nothing else is left to give: summarize the message of the layer's oldest that holds the
        fewest statements for its size (a long paste of chatter before a short fact; its
        constraints then show as records, and the summary keeps a user's statements before
        narration). With `beyond_share`, only while the layer is over its share: within
        it, the protected window gives way first. False when there is nothing to give."""
        if not self.authored or (beyond_share and self.authored_cost() <= self.b.authored):
            return False
        memo, scan = self.st.authored_memo, self.authored[: self.cfg.eviction_scan]
        e = min(scan, key=lambda x: (statement_density(x, memo), x.tag))
        self.authored.remove(e)
        self.items = None
        self.moved[e.tag] = "summary"
        self.batch.append(e)
        self._trim(e, "over_budget", "authored", "summary", e.shown_tokens)
        self._flush_batch()
        return True

    def _demote(self, e: Entry) -> None:
        """Move a pinned message into rolling, at its place in time."""
        self.pinned.remove(e)
        bisect.insort(self.rolling, e, key=lambda x: x.tag)
        self.moved[e.tag] = "rolling"

    def _record(self, e: Entry, *, compact: bool = False) -> ConstraintRecord | None:
        """Make the constraint record of `e` (see `ContextState.constraint_record`)."""
        made = self.st.constraint_record(e, self.keys, compact=compact)
        if made is None:
            return None
        key, record = made
        self.records[e.tag] = record
        self.keys[key] = e.tag
        return record

    def _forget_record(self, tag: int) -> None:
        """Drop the constraint record of message §tag§ (its ttl ran out): what no longer
        binds must leave the pinned layer, record and all."""
        if self.records.pop(tag, None) is not None:
            self.keys = {key: source for key, source in self.keys.items() if source != tag}

    def _flush_batch(self) -> None:
        """Summarize what was just evicted, promote constraints found in it, fit the summary."""
        if not self.batch:
            return
        # Evicted by value, but summarized (and ranged) oldest first, as `Summarizer` promises.
        batch, self.batch = sorted(self.batch, key=lambda e: e.tag), []
        text = self.summarizer.summarize([e.to_message() for e in batch])
        if text.strip():
            self._add_summary(batch[0].tag, batch[-1].tag, text)
        for e in batch:
            # An expired message no longer binds: promoting it would re-pin what its ttl
            # just took out (its text still reaches the summary above).
            if e.expired(self.now):
                continue
            if _may_bind(e) and e.tag not in self.records and has_constraint(e.content):
                if self._record(e) is not None:
                    self.promoted.append(e.tag)
        self._fit_summary()

    def _add_summary(self, first_tag: int, last_tag: int, text: str) -> None:
        """Append a summary entry, counted once.

        A new entry is folded into the newest one while that is still small, so the layer
        holds a few dozen entries rather than one per eviction. The folded size is the sum
        of both counts plus one for the newline: a bound from above, with no recount.
        """
        tokens = self.count_once(text)
        last = self.summaries[-1] if self.summaries else None
        if last is not None and last.tokens + tokens < _SUMMARY_FOLD_BELOW:
            self.summaries[-1] = last.widened(f"{last.text}\n{text}", last.tokens + tokens + 1, first_tag, last_tag)
        else:
            self.summaries.append(SummaryEntry(self.next_summary, first_tag, last_tag, text, tokens))
            self.next_summary += 1
        self.summary_tokens += tokens + 1

    def _fit_summary(self) -> None:
        """Merge the oldest summary entries until the layer is under its cap."""
        summaries = self.summaries
        while summaries and self.summary_cost() > self.b.summary:
            first = summaries[0]
            if len(summaries) >= 2:
                second = summaries[1]
                target = max(_MIN_SUMMARY_TARGET, min((first.tokens + second.tokens) * 2 // 3, _MERGED_MAX))
                text = self.summarizer.merge([first.text, second.text], target)
                tokens = self.count_once(text)
                if not text.strip() or tokens >= first.tokens + second.tokens:
                    self._drop_summary(0)
                    continue
                summaries[0] = first.widened(text, tokens, second.first_tag, second.last_tag)
                del summaries[1]
                self.summary_tokens += tokens - first.tokens - second.tokens - 1
            else:
                shrunk = self._shrink(first.text, self.b.summary - self.ov - self.summary_header - 1)
                if shrunk is None:
                    self._drop_summary(0)
                    continue
                summaries[0] = first.widened(*shrunk, first.first_tag, first.last_tag)
                self.summary_tokens += summaries[0].tokens - first.tokens
            self.merges += 1

    def _fold_summary(self, over: int) -> bool:
        """Give `over` tokens of the summary back by merging its oldest entries into one
        that much smaller, rather than drop the oldest whole: a merge keeps the user's
        lines before narration (`Summarizer.merge`), so a rule the classifier missed
        survives. False when what would be left holds nothing useful (the caller drops
        the oldest entry then)."""
        summaries = self.summaries
        take = tokens = 0
        for entry in summaries:
            take += 1
            tokens += entry.tokens
            if tokens >= 2 * over:
                break
        limit = tokens - over
        if limit < _MIN_SUMMARY_TARGET:
            return False
        folded = summaries[:take]
        shrunk = self._shrink("\n".join(e.text for e in folded), limit)
        if shrunk is None:
            return False
        first = folded[0]
        summaries[0] = first.widened(*shrunk, min(e.first_tag for e in folded), max(e.last_tag for e in folded))
        del summaries[1:take]
        self.summary_tokens += summaries[0].tokens - sum(e.tokens + 1 for e in folded) + 1
        self.merges += 1
        return True

    def _shrink(self, text: str, limit: int) -> tuple[str, int] | None:
        """`text` merged down to `limit` tokens at most, and its count; None if it cannot be.

        The summarizer aims in characters and may miss: it is asked again with its target
        cut by how far it missed, a few times, before the entry is given up.
        """
        target = limit
        for _ in range(_SHRINK_ATTEMPTS):
            if target < _MIN_SUMMARY_TARGET:
                return None
            merged = self.summarizer.merge([text], target)
            tokens = self.count_once(merged) if merged.strip() else 0
            if not tokens:
                return None
            if tokens <= limit:
                return merged, tokens
            target = target * limit // tokens - 1
        return None

    def count_once(self, text: str) -> int:
        return self.st.tokenizer.count(text)

    def _drop_summary(self, index: int) -> None:
        entry = self.summaries.pop(index)
        self.summary_tokens -= entry.tokens + 1
        self.trims.append(Trim(None, f"summary-{entry.id}", "over_budget", "summary", "archive", entry.tokens))

    def _demote_one(self) -> bool:
        """Demote the oldest soft pin, else cut the oldest long hard pin to its constraints
        (`pinned` is in tag order, however late a message was pinned). The assistant's
        pins go before the system's, and those before the user's; a rule shorter than
        `SHORT_RULE_CHARS` is never cut (its record would be its trigger sentence alone)."""
        soft = min((e for e in self.pinned if e.pin == "soft"), key=_pin_rank, default=None)
        if soft is not None:
            self._demote(soft)
            self._trim(soft, "over_budget", "pinned", "rolling", soft.shown_tokens)
            return True
        for e in sorted(self.pinned, key=_pin_rank):
            if e.tag in self.omitted or len(e.content) <= SHORT_RULE_CHARS:
                continue
            record = self.records.get(e.tag) or self._record(e, compact=True)
            if record is not None and record.tokens < e.shown_tokens:
                self._demote(e)
                self._trim(e, "over_budget", "pinned", "constraint", e.shown_tokens)
                return True
        return False

    def _omit_newest_hard(self) -> bool:
        shown = [e.tag for e in self.pinned if e.tag not in self.omitted]
        shown += [
            tag for tag in self.records if tag not in self.omitted and self.layer(self.st.entries[tag - 1]) != "pinned"
        ]
        if not shown:
            return False
        self.omitted.add(max(shown))  # logged once the plan is applied (see `_log`)
        return True

    def _cut_brief(self, over: int) -> None:
        assert self.brief is not None
        lines = self.brief.splitlines()
        allowed = self.brief_tokens - over
        best: tuple[str, int] | None = None
        low, high = 1, len(lines) - 1
        while low <= high:
            keep = (low + high) // 2
            text = "\n".join(lines[:keep]) + f"\n[brief cut: {len(lines) - keep} lines left out]"
            tokens = self.count_once(text)
            if tokens <= allowed:
                best, low = (text, tokens), keep + 1
            else:
                high = keep - 1
        self.brief, self.brief_tokens = best if best else (None, 0)
        self._note("the shared brief was cut to fit the budget")

    def _trim(self, e: Entry, reason: TrimReason, source: str, destination: str, tokens: int) -> None:
        self.trims.append(Trim(e.tag, e.id, reason, source, destination, tokens))

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
