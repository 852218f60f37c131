"""The brief as text, for an agent's pinned context.

Compact on purpose: the rendered brief is paid for in every prompt of every agent. Items
keep their ids (agents need them to complete, resolve or supersede) and drop revisions;
rejected options keep their reasons so an agent sees why before proposing one again.

Every text is rendered on one line: an agent's note must not be able to draw a heading
or an item of its own ("...\nConstraints (must hold):\n- [c1] ...") into every other
agent's pinned context.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from ctxbus.schemas._brief import Decision, DoneItem, TaskBrief
from ctxbus.schemas._brief_messages import Commit

__all__ = ["render_brief", "render_growth_bound", "done_line", "summary_line"]

_LINE_BREAK = re.compile(r"[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character `str.splitlines` breaks on: what a reader of the text may split it by."""
_LINE_BREAKS = re.compile(rf"\s*{_LINE_BREAK.pattern}+\s*")
_SHOWN_BREAK = " ⏎ "


def render_brief(brief: TaskBrief) -> str:
    """Render `brief` as a few headed lists; empty sections are left out."""
    lines = [_title(brief)]
    if brief.goal is not None:
        lines.append(f"Goal: {_one_line(brief.goal.text)}")
    _section(lines, "Constraints (must hold)", (_entry(f"[{c.id}] {c.text}") for c in brief.constraints))
    _section(lines, "Decisions", (_entry(_decision_text(d)) for d in brief.decisions))
    _section(
        lines,
        "Rejected (do not adopt unless reopened)",
        (_entry(f"[{r.id}] {r.option}: {r.reason}") for r in brief.rejected),
    )
    _section(lines, "Blockers", (_entry(f"[{b.id}] {b.text}") for b in brief.blockers))
    _section(lines, "Pending", (_entry(f"[{p.id}] {p.text}") for p in brief.pending))
    summary = () if brief.done_summary is None else (summary_line(brief.done_summary.facts),)
    _section(lines, "Done", (*summary, *map(done_line, brief.done)))
    _section(lines, "Notes", (_entry(f"[{n.id}] {n.text} ({n.author})") for n in brief.notes))
    return "\n".join(lines)


def done_line(item: DoneItem) -> str:
    """A done item's line in the rendered brief."""
    return _entry(f"[{item.id}] {item.fact} (by {item.done_by})")


def summary_line(facts: tuple[str, ...]) -> str:
    """The line of folded done items in the rendered brief, above the items still listed."""
    return _entry(_earlier(facts))


def _entry(text: str) -> str:
    return f"- {_one_line(text)}"


def _one_line(text: str) -> str:
    # Most texts have no break: finding none is a fifth of the cost of `sub` on them.
    return text if _LINE_BREAK.search(text) is None else _LINE_BREAKS.sub(_SHOWN_BREAK, text)


def _title(brief: TaskBrief) -> str:
    title = f"Task brief {brief.domain} @ rev {brief.revision}"
    if brief.closed is not None:
        why = f": {brief.closed.reason}" if brief.closed.reason else ""
        title += f" (CLOSED at rev {brief.closed.rev} by {brief.closed.author}{why})"
    return _one_line(title)


def _decision_text(decision: Decision) -> str:
    if decision.superseded_by is not None:
        # Kept short: it only tells agents not to act on it any more.
        return f"[{decision.id}] (superseded by {decision.superseded_by}) {decision.option}"
    if decision.rationale:
        return f"[{decision.id}] {decision.option}: {decision.rationale}"
    return f"[{decision.id}] {decision.option}"


def _section(lines: list[str], heading: str, entries: Iterable[str]) -> None:
    body = list(entries)
    if body:
        lines.append(f"{heading}:")
        lines.extend(body)


SUMMARY_SHOWN_CHARS: Final = 1_500
"""Characters of folded facts the rendered brief shows, newest first; the rest are
counted. Every fold adds facts: shown whole, the summary would outgrow any budget, and
the coordinator would fold (and count the brief) on every commit."""


def _earlier(facts: tuple[str, ...]) -> str:
    """The summary line of folded done items: the newest facts that fit, oldest first."""
    shown: list[str] = []
    used = 0
    for fact in reversed(facts):
        used += len(fact) + 2
        if shown and used > SUMMARY_SHOWN_CHARS:
            break
        shown.append(fact)
    hidden = len(facts) - len(shown)
    more = f" (and {hidden:,} earlier)" if hidden else ""
    return f"earlier: {'; '.join(reversed(shown))}{more}"


_LINE_MARKS = 64
"""Bytes of a rendered line besides its texts: id, brackets, "(by ...)", a heading."""


def render_growth_bound(commit: Commit) -> int:
    """At most how many tokens `commit` adds to `render_brief`'s text.

    Its texts' UTF-8 bytes, its author's and a line's marks: a token is at least one
    byte. A coordinator holding a brief under its budget adds these up and renders and
    counts the brief again only once they could have used the room left, rather than
    on every commit (a count of a long brief costs milliseconds).
    """
    texts = (value for value in commit.op.__dict__.values() if isinstance(value, str))
    return sum(len(text.encode()) for text in texts) + len(commit.author.encode()) + _LINE_MARKS
