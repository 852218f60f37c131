"""The words of a Channel 1 reminder.

A reminder says how many spent tool outputs could go, roughly how many tokens that is,
and which tags to start with. It never mentions percentages or window sizes: those
invite the model to reason about its budget instead of simply tidying up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ctxbus.agents.nudges._bands import Band, round_half_up
from ctxbus.agents.nudges._hints import HINT_LIMIT, ReclaimHint
from ctxbus.agents.nudges._markers import wrap_reminder
from ctxbus.agents.nudges._state import Channel1Level

__all__ = ["Reminder", "approx_tokens", "format_hints", "spent_summary"]

_FULL_TEXT: dict[Band, str] = {
    Band.GENTLE: (
        "Tidy-up note: {summary} could be released. Once you have taken what you need "
        "from an output, release it with ctx_reduce; no need to wait for the end of the task."
    ),
    Band.FIRM: (
        "{summary} could be released. Take one ctx_reduce pass over the outputs you have finished with, then carry on."
    ),
    Band.URGENT: (
        "{summary} are still held in context. Before your next tool call, release every "
        "output you have finished with using ctx_reduce."
    ),
}
_CALM_TEXT = "Still held: {summary}; release the finished ones with ctx_reduce{hints}."


def approx_tokens(tokens: int) -> str:
    """A token figure in thousands, rounded half up: 90_000 -> ``90k``."""
    return f"{round_half_up(Fraction(max(tokens, 0), 1000))}k"


def spent_summary(outputs: int, tokens: int) -> str:
    """``16 used tool outputs (about 90k tokens)``; the count is left out when unknown."""
    count = max(outputs, 0)
    noun = "used tool output" if count == 1 else "used tool outputs"
    head = f"{count} {noun}" if count else noun
    return f"{head} (about {approx_tokens(tokens)} tokens)"


def format_hints(hints: Sequence[ReclaimHint]) -> str:
    """``§12§ bash, §15§ grep``: the tags to start with, at most `HINT_LIMIT`."""
    return ", ".join(f"§{hint.tag}§ {hint.tool_name}" for hint in hints[:HINT_LIMIT])


@dataclass(frozen=True, slots=True)
class Reminder:
    """A Channel 1 reminder about to be appended to a tool output."""

    level: Channel1Level
    calm: bool
    """True for the one-line re-fire inside a band that was already announced."""
    outputs: int
    tokens: int
    hints: tuple[ReclaimHint, ...]

    @property
    def body(self) -> str:
        """The words, without the span markers."""
        summary = spent_summary(self.outputs, self.tokens)
        hints = format_hints(self.hints)
        if self.calm:
            return _CALM_TEXT.format(summary=summary, hints=f" (start with {hints})" if hints else "")
        body = _FULL_TEXT[self.level].format(summary=summary)
        body = body[:1].upper() + body[1:]
        return f"{body}\nStart with: {hints}." if hints else body

    @property
    def text(self) -> str:
        """The span to append to the tool output; the hygiene walk leaves it out."""
        return wrap_reminder(self.body)
