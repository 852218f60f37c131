"""Brief deltas: how a change to the shared brief reaches the model without rewriting the
head of the prompt.

The head holds the brief as of the last rebuild; each later change arrives as one short
user message at the end of the tail, a line diff against the brief as the model last saw
it (the head's, with the deltas before it applied), folded into the head at the next
rebuild. The diff is exact: `apply_delta` turns the previous text into the new one, so
what the model is shown always adds up to the current brief.

    [shared brief changed; lines of the brief above, as numbered there]
    @@ -1 +1 @@
    -Task brief t/s/x @ rev 13
    +Task brief t/s/x @ rev 14
    @@ -9,0 +10 @@
    +- [d3] adopt the retry queue (by agent-3)
"""

from __future__ import annotations

import difflib
import re

__all__ = ["DELTA_HEADER", "apply_delta", "brief_delta"]

DELTA_HEADER = "[shared brief changed; lines of the brief above, as numbered there]"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$")


def brief_delta(old: str, new: str) -> str:
    """The delta message that turns brief `old` into `new` (unified-diff hunks, no context)."""
    a, b = old.split("\n"), new.split("\n")
    lines = [DELTA_HEADER]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        lines.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@")
        lines += [f"-{line}" for line in a[i1:i2]]
        lines += [f"+{line}" for line in b[j1:j2]]
    return "\n".join(lines)


def _range(start: int, end: int) -> str:
    """A hunk range as unified diffs write it: 1-based start, count when not one; an empty
    range names the line before it."""
    count = end - start
    if count == 1:
        return str(start + 1)
    return f"{start if count == 0 else start + 1},{count}"


def apply_delta(old: str, delta: str) -> str:
    """The brief `delta` (from `brief_delta`) makes of `old`.

    :raises ValueError: if `delta` is not such a delta, or does not fit `old`.
    """
    lines = delta.split("\n")
    if lines[0] != DELTA_HEADER:
        raise ValueError("not a brief delta")
    a = old.split("\n")
    out: list[str] = []
    at = 0  # lines of `a` consumed
    i = 1
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if match is None:
            raise ValueError(f"line {i + 1} of the delta is no hunk header: {lines[i]!r}")
        start, count = int(match[1]), int(match[2] or 1) if match[2] != "0" else 0
        begin = start - 1 if count else start
        i += 1
        removed: list[str] = []
        while i < len(lines) and lines[i].startswith("-") and len(removed) < count:
            removed.append(lines[i][1:])
            i += 1
        added: list[str] = []
        while i < len(lines) and lines[i].startswith("+"):
            added.append(lines[i][1:])
            i += 1
        if begin < at or a[begin : begin + count] != removed:
            raise ValueError("the delta does not fit the brief it is applied to")
        out += a[at:begin] + added
        at = begin + count
    return "\n".join(out + a[at:])
