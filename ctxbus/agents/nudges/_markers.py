"""The text markers the walk must recognise: our reminder spans and drop placeholders.

Both sides must agree on them byte for byte: the code that writes a reminder or a
placeholder into the tail, and the walk that leaves them out of U and T. Reminder spans
are written here. The drop placeholder is written by the context engine, so its one home
is `agents.context.drop_placeholder`; it is re-exported here, and the prefix that
recognises it is derived from it.
"""

from __future__ import annotations

import re

from ctxbus.agents.context import drop_placeholder

__all__ = [
    "DROP_PLACEHOLDER_PREFIXES",
    "REMINDER_CLOSE",
    "REMINDER_OPEN",
    "drop_placeholder",
    "is_drop_placeholder",
    "strip_reminder_spans",
    "wrap_reminder",
]

REMINDER_OPEN = "\n\n<system-reminder>\n"
"""Opens a reminder span appended to a tool output (the host's own reminder convention)."""
REMINDER_CLOSE = "\n</system-reminder>"
DROP_PLACEHOLDER_PREFIXES = (drop_placeholder(0).partition(" ")[0], "[truncated")
"""Rendered stand-ins for dropped content (`[dropped`, `[truncated`); they cost a few tokens
but are not reclaimable."""

_TAG_PREFIX = re.compile(r"§\d+§\s*")


def wrap_reminder(body: str) -> str:
    """Put `body` inside a reminder span, ready to append to a tool output."""
    return f"{REMINDER_OPEN}{body}{REMINDER_CLOSE}"


def strip_reminder_spans(text: str) -> str:
    """Remove reminder spans from the end of `text`; several may have stacked up."""
    while text.endswith(REMINDER_CLOSE):
        opener = text.rfind(REMINDER_OPEN)
        if opener < 0:
            break
        text = text[:opener]
    return text


def is_drop_placeholder(text: str) -> bool:
    """Whether `text` is a drop placeholder, optionally after a leading ``§N§`` tag."""
    head = text.lstrip()
    if head.startswith("§"):
        match = _TAG_PREFIX.match(head)
        if match is not None:
            head = head[match.end() :].lstrip()
    return head[:16].lower().startswith(DROP_PLACEHOLDER_PREFIXES)
