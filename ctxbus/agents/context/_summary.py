"""The summary layer's writer: extractive and rule-based, behind a small interface.

The default never paraphrases. It picks whole units (sentences, list items, error lines)
that carry facts, and when a unit is too long to quote it quotes its negation or rule
clause and the facts in it instead (numbers with units, paths, URLs, IDs), so "no more
than 10 books", "should not deploy", `/workspace/x.xlsx` or `django-11797` come out exactly
as they went in. An LLM summarizer can replace it by
implementing `Summarizer`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ctxbus.agents.context._archive import clip, error_lines
from ctxbus.agents.context._binding import states
from ctxbus.agents.context._classify import Span, facts, has_constraint, holds_fact, rule_spans, score_unit, split_units
from ctxbus.schemas import Message

__all__ = ["ExtractiveSummarizer", "Summarizer"]

_CALL = re.compile(r"<tool_call\b[^>]*?\bname=\"([^\"]*)\"[^>]*>(.*?)</tool_call>", re.DOTALL)
"""Calls written inline as `<tool_call name=".." id="..">ARGS</tool_call>` (the transcripts' form)."""
_FACTS_SCAN_CHARS = 2_000
_SCORE_MEMO = 8_192
_PICK_SCAN_CHARS = 6_000
_CHARS_PER_TOKEN = 3.0
"""Conservative chars-per-token used to plan sizes before the one real count."""
_CLAUSE_BREAK = re.compile(r"[,;:](?=\s)|\s[-–—]\s|[()]")
"""Where a clause ends inside a sentence (not the colon of `10:00` or the comma of `1,000`)."""
_MIN_CLAUSE_CONTEXT = 16
"""A later rule clause is quoted only with this many characters of it besides the trigger:
a bare "…not…" says nothing."""
_HEAD = re.compile(r"§\d+§ ")
_USER_RULE = 100.0
"""Added to the score of a user's line that states a rule: a merge keeps such lines before
any narration, however many facts the narration quotes (see `ExtractiveSummarizer._rank`)."""
_USER_STATEMENT = 50.0
"""Added to the score of a user's line that states something (`states`) though no rule was
recognised in it: a merge keeps it before any narration too. The rules miss some ways of
putting a rule; the summary still holds the user's own words."""
_STATEMENT_UNIT = 2.0
"""Added to the score of a sentence of the user's that states something, when picking a
line's units: a rule the rules missed outranks the chatter around it."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes the summary layer. Both methods must be pure functions of their input."""

    def summarize(self, messages: Sequence[Message]) -> str:
        """One summary entry for messages evicted together, oldest first."""
        ...

    def merge(self, texts: Sequence[str], max_tokens: int) -> str:
        """Fold several entries, oldest first, into one of about `max_tokens` or fewer.

        The engine counts the result and asks again with a smaller target if it is over.
        """
        ...


class ExtractiveSummarizer:
    """Keeps verbatim units ranked by `score_unit`; one line per message.

    A user's line quotes the sentences that state something before the chatter around
    them. A merge keeps the user's lines that state a rule or anything else first
    (shortest first), then the rest by score; acknowledgements and questions get no such
    place. A unit holding a number, a negation or a name is quoted whole or not at all;
    the first one picked for a line is kept whole even past the line's share (up to
    `max_chars`).

    :param ratio: share of a message's size its summary line may take.
    :param min_chars: a line may always take this much, so short turns stay whole.
    :param max_chars: cap per line, so one huge message cannot fill the layer.
    """

    def __init__(self, *, ratio: float = 0.15, min_chars: int = 160, max_chars: int = 480) -> None:
        self.ratio = ratio
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._scores: dict[str, float] = {}
        """`score_unit` of line bodies already ranked, so repeated merges need not re-run the
        rules. Only a speed-up: a fresh instance computes the same scores."""

    def summarize(self, messages: Sequence[Message]) -> str:
        return "\n".join(self._line(m) for m in messages)

    def merge(self, texts: Sequence[str], max_tokens: int) -> str:
        lines: list[str] = []
        seen: set[str] = set()
        for line in _entry_lines(texts):
            key = _body(line).strip().lower()
            if key not in seen:
                seen.add(key)
                lines.append(line)
        budget = max_tokens * _CHARS_PER_TOKEN
        ranked = sorted(range(len(lines)), key=lambda i: self._rank(lines[i], i))
        keep: set[int] = set()
        used = 0.0
        for i in ranked:
            cost = len(lines[i]) + 1
            if used + cost <= budget:
                keep.add(i)
                used += cost
        if keep:
            return "\n".join(lines[i] for i in sorted(keep))
        # Not even one line fits: shorten the best one to the budget.
        if not lines:
            return ""
        best = lines[ranked[0]]
        head = _head(best)
        return clip(head + _shorten(_body(best), int(budget) - len(head), set()), int(budget))

    def _rank(self, line: str, index: int) -> tuple[int, float, int]:
        """Where a line goes in a merge's order: the user's lines that state a rule or
        anything else first, shortest first (as many of them as fit: a standing
        instruction is said in a sentence, and a long turn is a task or a discussion whose
        rules are pinned already), then the rest by `score_unit`, oldest first on ties."""
        score = self._score(line)
        return (0, len(line), index) if score >= _USER_STATEMENT else (1, -score, index)

    def _score(self, line: str) -> float:
        score = self._scores.get(line)
        if score is None:
            if len(self._scores) >= _SCORE_MEMO:
                for key in list(self._scores)[: _SCORE_MEMO // 2]:
                    del self._scores[key]
            body = _body(line)
            score = score_unit(body)
            if _head(line).endswith(" user: "):
                if has_constraint(body):
                    score += _USER_RULE
                elif any(states(unit) for unit in split_units(body)):
                    score += _USER_STATEMENT
            self._scores[line] = score
        return score

    def _line(self, message: Message) -> str:
        who: str = message.role
        if message.tool_name and message.kind in ("tool_call", "tool_result"):
            who = f"{message.tool_name} {'call' if message.kind == 'tool_call' else 'result'}"
        head = f"§{message.tag}§ {' '.join(who.split())}: "
        user = message.role == "user" and message.kind not in ("tool_call", "tool_result")
        budget = int(min(self.max_chars, max(self.min_chars, len(message.content) * self.ratio)))
        noise = set(message.call_ids)
        if message.kind == "tool_result":
            body = self._tool_result(message, budget, noise)
        elif message.kind == "tool_call":
            body = self._tool_call(message, budget, noise)
        else:
            body = self._pick(
                message.content, budget, noise, whole_facts=True, by_function=message.role != "assistant", user=user
            )
        # One line per message, whatever its breaks (CRLF, soft wraps, code blocks): a merge
        # ranks and drops lines, and a piece without its `§N§` head would lose its source.
        return head + " ".join(body.split())

    def _tool_call(self, message: Message, budget: int, noise: set[str]) -> str:
        """The reasoning's best units, then each call's arguments (clipped, facts kept).

        The calls are the message's own (`tool_calls`), or, for a host that writes them
        into the text, its inline blocks; a call recorded without its arguments (the
        single-call form) says nothing beyond its name, which the line's head gives.
        """
        text = message.content
        calls = _CALL.findall(text)
        if not calls:
            calls = [(c.name, c.arguments) for c in message.tool_calls if c.arguments.strip() not in ("", "{}")]
        else:
            text = _CALL.sub(" ", text)
        if not calls:
            return self._pick(text, budget, noise)
        prose = self._pick(text, budget // 2, noise)
        parts = [prose] if prose else []
        for name, args in calls:
            shown = clip(" ".join(args.split()), 160)
            extra = [f for f in facts(args) if f not in shown and f not in noise][:4]
            parts.append(f"{name}({shown})" + (" · " + " · ".join(extra) if extra else ""))
        return clip(" ".join(parts), budget)

    def _tool_result(self, message: Message, budget: int, noise: set[str]) -> str:
        text = message.content
        lines = text.splitlines()
        parts = [f"{len(lines):,} lines"] if len(lines) > 1 else []  # "1 lines" tells nothing the line does not
        if message.state == "archived":
            parts.append("archived, ctx_read for detail")
        first = next((line.strip() for line in lines if line.strip()), "")
        if first:
            parts.append(clip(first, 120))
        parts.extend(clip(line.strip(), 160) for _, line in error_lines(lines, {1}, 2))
        out = "; ".join(parts)
        # Facts come from the head only: past a few kB a log repeats itself, and the whole
        # text stays readable in the archive.
        found = [f for f in facts(text[:_FACTS_SCAN_CHARS]) if f not in out and f not in noise][:8]
        if found:
            out += " · " + " · ".join(found)
        return clip(out, budget)

    def _pick(
        self,
        text: str,
        budget: int,
        noise: set[str],
        *,
        whole_facts: bool = False,
        by_function: bool = False,
        user: bool = False,
    ) -> str:
        # A line holds a few hundred characters: ranking the first units is enough, and
        # bounds the rule work on a long message.
        units = [u.strip() for u in split_units(text[:_PICK_SCAN_CHARS]) if u.strip()]
        if not units:
            return ""
        scores = [
            score_unit(unit, by_function=by_function) + (_statement_score(unit) if user else 0.0) for unit in units
        ]
        scored = sorted(range(len(units)), key=lambda i: (-(scores[i] + (i == 0)), i))
        keep: list[tuple[int, str]] = []
        used = 0
        for i in scored:
            unit = units[i]
            if len(unit) > budget and whole_facts and holds_fact(unit):
                if keep or len(unit) > self.max_chars:
                    continue  # not cut: a number, negation or name without its sentence misleads
                budget = len(unit) + 1
            elif len(unit) > budget:
                unit = _shorten(unit, budget - used - 1, noise)
                if not unit:
                    continue
            if used + len(unit) + 1 > budget:
                continue
            keep.append((i, unit))
            used += len(unit) + 1
        if not keep:
            return clip(units[0], budget)
        return " ".join(unit for _, unit in sorted(keep))


_INTERLOCUTOR = re.compile(r"\b(?:I|me|my|you|your)\b|\blet['’]?s\b", re.IGNORECASE)
"""Words of the conversation itself ("tell me when…", "the plan you outlined", "I read…")."""
_SHORT_STATEMENT = 100


def _statement_score(unit: str) -> float:
    """What stating something adds to a user's sentence when picking a line's units: more
    when it speaks of the work rather than of the two people talking, and when it is short
    (a standing rule is said in a line; chatter runs on)."""
    if not states(unit):
        return 0.0
    score = _STATEMENT_UNIT
    if not _INTERLOCUTOR.search(unit):
        score += 1.0
    if len(unit) <= _SHORT_STATEMENT:
        score += 1.0
    return score


def _shorten(unit: str, limit: int, noise: set[str]) -> str:
    """A unit too long to quote whole, in at most `limit` characters ("" if nothing fits).

    Its negation and rule clauses verbatim (clipped if need be) while they fit, then as many
    of its other facts as fit: the facts alone would turn "we should not deploy X" into "X",
    and a later "do not touch Y" into "Y".
    """
    parts: list[str] = []
    taken: list[Span] = []
    used = 0
    for span in rule_spans(unit):
        if any(a <= span[0] < b for a, b in taken):
            continue
        bounds = _clause_bounds(unit, span)
        sep = 3 if parts else 0
        clause = _clause(unit, span, bounds, limit - used - sep)
        useful = min(bounds[1] - bounds[0], span[1] - span[0] + _MIN_CLAUSE_CONTEXT)
        if not clause or (parts and len(clause) < useful):
            continue
        parts.append(clause)
        taken.append(bounds)
        used += len(clause) + sep
    quoted = " ".join(parts)
    for fact in facts(unit):
        cost = len(fact) + (3 if parts else 0)
        if fact in noise or fact in quoted or used + cost > limit:
            continue
        parts.append(fact)
        used += cost
    return " · ".join(parts)


def _clause_bounds(text: str, span: Span) -> Span:
    """Where the clause of `text` around `span` starts and ends."""
    a, b = span
    start = max((m.end() for m in _CLAUSE_BREAK.finditer(text, 0, a)), default=0)
    after = _CLAUSE_BREAK.search(text, b)
    end = after.start() if after else len(text)
    while start < a and text[start].isspace():
        start += 1
    return start, end


def _clause(text: str, span: Span, bounds: Span, limit: int) -> str:
    """The clause `bounds` of `text` around `span`, verbatim; if over `limit`, clipped around `span`.

    Cuts fall on spaces and are marked with "…"; "" if not even `span` fits. A clipped
    clause starts at the nearest fact before `span` if that leaves room after it: "in
    db/x.py has not been verified" says more than "has not been verified against".
    """
    a, b = span
    start, end = bounds
    if end - start <= limit:
        return text[start:end].rstrip()
    room = limit - 2  # both ends may carry a "…"
    if room < b - a:
        return ""
    left = max(start, a - (room - (b - a)) // 3)
    fact = max((text.rfind(f, start, a) for f in facts(text[start:left])), default=-1)
    if fact >= 0 and b + _MIN_CLAUSE_CONTEXT - fact <= room:
        left = fact
    elif left > start and not text[left - 1].isspace():
        space = text.find(" ", left, a)
        left = a if space == -1 else space + 1
    right = min(end, left + room)
    if right < end and not text[right].isspace():
        space = text.rfind(" ", b, right)
        right = right if space == -1 else space
    return ("…" if left > start else "") + text[left:right].strip() + ("…" if right < end else "")


def _head(line: str) -> str:
    """The `§N§ who: ` prefix of a summary line ("" if it has none)."""
    if line.startswith("§"):
        colon = line.find(": ")
        if colon != -1:
            return line[: colon + 2]
    return ""


def _body(line: str) -> str:
    return line[len(_head(line)) :]


def _entry_lines(texts: Sequence[str]) -> list[str]:
    """The lines of summary entries, each message's line whole.

    Entries written before lines were kept to one per message may still hold a line
    broken in several: a piece without a `§N§` head belongs to the line before it.
    """
    lines: list[str] = []
    for text in texts:
        first = len(lines)
        for piece in text.splitlines():
            if not piece.strip():
                continue
            if len(lines) > first and not _HEAD.match(piece):
                lines[-1] = f"{lines[-1].rstrip()} {piece.strip()}"
            else:
                lines.append(piece)
    return lines
