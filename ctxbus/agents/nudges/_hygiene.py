"""Tail hygiene: how much of the rendered tail (T) the agent could still reclaim (U).

T counts what the model sees and pays for: text, tool inputs and outputs, files. It
leaves out what the agent cannot act on or did not write: reasoning, synthetic
messages, drop placeholders (with the input of the call whose output they replaced,
when the parts share an `arc`) and our own reminder spans. U is the part of T owned
by an active tag that is neither protected nor already queued for dropping.

Counting tokens is the expensive step, so `HygieneWalker` keeps the last render: when
the new render only appends to it, only the new parts are counted; when anything
earlier changed (a drop was applied, a compaction ran) it re-walks everything, reusing
the counts of texts it has already seen.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

from ctxbus.agents.nudges._bands import DEFAULT_FLOORS, Band, NudgeFloors, band_for, channel2_armed, severity
from ctxbus.agents.nudges._hints import ReclaimHint
from ctxbus.agents.nudges._ledger import TagLedger, Tally
from ctxbus.agents.nudges._markers import is_drop_placeholder, strip_reminder_spans
from ctxbus.agents.nudges._protection import newest_reduce_tags, protection_window
from ctxbus.agents.nudges._tail import PartKind, TailPart, TailTag, TokenCounter

__all__ = ["HygieneWalker", "TailMeasure"]


@dataclass(frozen=True, slots=True)
class TailMeasure:
    """One measurement of the tail: {U, T} and what a reminder needs to say."""

    u: int
    """Reclaimable tokens: tagged, active, not protected, not queued."""
    t: int
    """Eligible tokens of the whole rendered tail."""
    spent_outputs: int
    """Tool outputs that count in U: what a reminder calls spent."""
    hints: tuple[ReclaimHint, ...]
    """Up to `HINT_LIMIT` tags to suggest, in suggestion order."""
    protected: frozenset[int]
    """Tags whose mass counts in T but not in U (window, ctx_reduce calls, overrides)."""
    full: bool
    """True when this walk counted everything again rather than a delta."""
    floors: NudgeFloors = DEFAULT_FLOORS
    """The absolute figures of the rules for the agent's window; every decision made on
    this measurement uses them."""

    @property
    def severity(self) -> float:
        """U / max(T, 1), for display."""
        return severity(self.u, self.t)

    @property
    def band(self) -> Band:
        """The nudge band of this measurement, CHANNEL2 included."""
        return band_for(self.u, self.t, floors=self.floors)

    @property
    def channel2(self) -> bool:
        """Whether the Channel 2 predicate holds for this measurement."""
        return channel2_armed(self.u, self.t, floors=self.floors)


class HygieneWalker:
    """Measures {U, T} over successive renders of one agent's tail.

    Not thread-safe: one walker belongs to one context. Tag rows must be passed in
    ascending tag-number order, one row per number.
    """

    def __init__(self, counter: TokenCounter, *, protected_floor: int, floors: NudgeFloors = DEFAULT_FLOORS) -> None:
        """
        :param counter: counts tokens of text parts (the agent's tokenizer).
        :param protected_floor: token floor of the recency window, usually
            `protected_floor(usable_tokens)`.
        :param floors: the rules' absolute figures, usually `NudgeFloors.for_window(window)`;
            magic-context's by default.
        """
        self._counter = counter
        self._floor = protected_floor
        self._floors = floors
        self._parts: list[TailPart] = []
        self._counts: dict[str, int] = {}
        self._tallies: dict[int, Tally] = {}
        self._changed: set[int] = set()
        self._ledger = TagLedger()
        self._arcs: set[str] = set()
        self._dropped: set[str] = set()
        self._t = 0

    def __repr__(self) -> str:
        return f"HygieneWalker(parts={len(self._parts)}, t={self._t}, tags={len(self._tallies)}, floor={self._floor})"

    def reset(self) -> None:
        """Forget the last render and every count; the next walk starts cold."""
        self._clear_totals()
        self._counts = {}

    def _clear_totals(self) -> None:
        self._parts = []
        self._tallies = {}
        self._changed = set()
        self._arcs = set()
        self._dropped = set()
        self._t = 0

    def measure(
        self,
        parts: Sequence[TailPart],
        tags: Sequence[TailTag],
        *,
        queued: Set[int] = frozenset(),
        protected: Set[int] | None = None,
    ) -> TailMeasure:
        """Measure the tail as rendered now.

        :param parts: the rendered tail, oldest part first.
        :param tags: tag rows, ascending by number.
        :param queued: tags ctx_reduce has queued for dropping; they leave U at once
            and stay in T until the next compose renders their placeholder.
        :param protected: replaces the token window with an explicit set (a legacy
            rule, or a test); the newest ctx_reduce calls are protected either way.
        """
        full = not self._extends_last(parts) or not self._absorb(parts[len(self._parts) :])
        if full:
            self._remeasure(parts)
            self._ledger.rebuild(tags, self._tallies)
        else:
            self._ledger.sync(tags, self._tallies, self._changed)
        self._changed.clear()
        window = protection_window(tags, self._floor) if protected is None else protected
        shielded = frozenset(window) | newest_reduce_tags(tags)
        reclaimable = self._ledger.reclaimable(shielded | queued)
        return TailMeasure(
            u=min(reclaimable.u, self._t),
            t=self._t,
            spent_outputs=reclaimable.spent_outputs,
            hints=reclaimable.hints,
            protected=shielded,
            full=full,
            floors=self._floors,
        )

    def _extends_last(self, parts: Sequence[TailPart]) -> bool:
        old = self._parts
        if not old or len(parts) < len(old):
            return False
        # Identity first: an adapter that reuses its part objects pays almost nothing.
        if all(map(operator.is_, old, parts)):
            return True
        return all(a is b or a == b for a, b in zip(old, parts, strict=False))

    def _remeasure(self, parts: Sequence[TailPart]) -> None:
        previous = self._counts
        self._clear_totals()
        # Keep only counts for texts still in the tail, so the memo cannot outgrow it.
        self._counts = {}
        self._absorb(parts, previous)

    def _absorb(self, parts: Sequence[TailPart], known: dict[str, int] | None = None) -> bool:
        """Add `parts` to the running totals; False if they invalidate earlier parts."""
        newly_dropped = _dropped_arcs(parts)
        if not newly_dropped.isdisjoint(self._arcs):
            return False
        self._dropped |= newly_dropped
        dropped = self._dropped
        for part in parts:
            tokens = self._eligible_tokens(part, dropped, known)
            self._parts.append(part)
            if not tokens:
                continue
            self._t += tokens
            if part.arc is not None:
                self._arcs.add(part.arc)
            if part.tag is None:
                continue
            tally = self._tallies.get(part.tag)
            if tally is None:
                tally = self._tallies[part.tag] = Tally()
            self._changed.add(part.tag)
            tally.tokens += tokens
            if part.kind is PartKind.TOOL_OUTPUT:
                tally.outputs += 1
                tally.output_tokens += tokens
        return True

    def _eligible_tokens(self, part: TailPart, dropped: Set[str], known: dict[str, int] | None) -> int:
        if part.synthetic or part.kind is PartKind.REASONING:
            return 0
        if part.arc is not None and part.arc in dropped:
            return 0
        text = part.text
        if part.kind is not PartKind.TOOL_INPUT:
            text = strip_reminder_spans(text)
            if is_drop_placeholder(text):
                return 0
        if part.tokens is not None:
            return max(part.tokens, 0)
        if not text:
            return 0
        count = self._counts.get(text)
        if count is None:
            count = known.get(text) if known is not None else None
            if count is None:
                count = self._counter.count(text)
            self._counts[text] = count
        return count


def _dropped_arcs(parts: Iterable[TailPart]) -> frozenset[str]:
    """Tool calls whose output is a drop placeholder: their input goes with it."""
    return frozenset(
        part.arc
        for part in parts
        if part.kind is PartKind.TOOL_OUTPUT
        and part.arc is not None
        and is_drop_placeholder(strip_reminder_spans(part.text))
    )
