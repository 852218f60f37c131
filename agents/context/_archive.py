"""Large tool output on demand: compact forms, line reads and BM25 search (SQLite FTS5).

A 3,000-token test log is worth a few lines in the prompt: its size, how it starts and
ends, and its error lines. The full text stays in the store, where `read` returns any
line range or the lines matching a query, and `search` ranks everything with BM25.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from agents.context._classify import ERROR_LINE
from agents.context._errors import LinesPastTheEnd
from schemas import UsageError

__all__ = [
    "ARCHIVE_SCHEMA",
    "SearchHit",
    "clip",
    "compact_form",
    "error_lines",
    "index_pending",
    "read_lines",
    "search_archive",
]

ARCHIVE_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS archive_fts USING fts5(
    content, content='messages', content_rowid='tag', tokenize='unicode61 remove_diacritics 2'
);
"""
"""External-content FTS5 index over `messages.content`: the text is stored once."""

_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS = 32
_MAX_READ_HITS = 50


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One compact search result: enough to decide whether to `read` it."""

    tag: int
    """The message's `§N§` number; pass it to `read`."""
    id: str
    """The message id."""
    kind: str
    """Message kind."""
    tool_name: str | None
    """Tool that produced or was called, if any."""
    layer: str
    """Where the message is now: pinned, rolling, summary or gone."""
    score: float
    """BM25 relevance; higher is better."""
    snippet: str
    """A few words around the match, matches in [brackets]."""


def compact_form(
    tag: int,
    content: str,
    *,
    tool_name: str | None,
    tokens: int,
    lines: int,
    line_chars: int,
    error_count: int,
) -> str:
    """The prompt's stand-in for archived output: size, head, tail and error lines."""
    all_lines = content.splitlines()
    n = len(all_lines)
    what = f"{tool_name} output" if tool_name else "tool output"
    out = [f"§{tag}§ [archived {what}: {tokens:,} tokens, {n:,} lines; ctx_read({tag}) for detail]"]
    if n <= 2 * lines:
        shown = list(enumerate(all_lines, 1))
    else:
        shown = [*enumerate(all_lines[:lines], 1), (0, f"… {n - 2 * lines:,} lines not shown …")]
        shown += list(enumerate(all_lines[n - lines :], n - lines + 1))
    out.extend(clip(text, line_chars) for _, text in shown)
    head_tail = {number for number, _ in shown}
    errors = error_lines(all_lines, head_tail, error_count)
    if errors:
        out.append("errors:")
        out.extend(f"{number}: {clip(text.strip(), line_chars)}" for number, text in errors)
    return "\n".join(out)


def read_lines(content: str, *, tag: int, lines: tuple[int, int | None] | None = None, query: str | None = None) -> str:
    """Numbered lines of `content` (message §tag§): a 1-based inclusive range, or those
    matching `query` (the first 50, with how many more there are; or a sentence saying
    that none do, rather than an empty answer the model would puzzle over).

    A range may run past the last line, or be open (`(start, None)`): it stops there;
    but it must start on a line the message has.

    :raises LinesPastTheEnd: for a range that starts after the last line.
    :raises UsageError: for an empty or inverted range, or a query with no words.
    """
    all_lines = content.splitlines()
    unshown = 0
    if lines is not None:
        start, end = lines
        if start < 1 or (end is not None and end < start):
            raise UsageError(f"line range must be 1 <= start <= end, got {lines!r}")
        if start > len(all_lines):
            raise LinesPastTheEnd(tag, len(all_lines), start)
        picked = list(enumerate(all_lines[start - 1 : end], start))
    elif query is not None:
        terms = [t.lower() for t in _WORD.findall(query)]
        if not terms:
            raise UsageError(f"query {query!r} has no words to look for")
        picked = [(n, t) for n, t in enumerate(all_lines, 1) if any(term in t.lower() for term in terms)]
        if not picked:
            return f"no line of §{tag}§ holds {' or '.join(map(repr, terms))}"
        unshown = max(0, len(picked) - _MAX_READ_HITS)
        picked = picked[:_MAX_READ_HITS]
    else:
        return content
    numbered = "\n".join(f"{number}: {text}" for number, text in picked)
    if unshown:
        numbered += f"\n(and {unshown:,} more matching lines: narrow the query, or read a line range)"
    return numbered


def index_pending(conn: sqlite3.Connection, domain: str, after: int) -> int:
    """Index messages with a tag above `after`; return the highest tag now indexed."""
    row = conn.execute("SELECT max(tag) FROM messages WHERE domain = ?", (domain,)).fetchone()
    newest = int(row[0] or 0)
    if newest > after:
        conn.execute(
            "INSERT INTO archive_fts(rowid, content) SELECT tag, content FROM messages "
            "WHERE domain = ? AND tag > ? ORDER BY tag",
            (domain, after),
        )
    return max(newest, after)


def search_archive(conn: sqlite3.Connection, domain: str, query: str, limit: int) -> list[SearchHit]:
    """BM25-ranked hits for any of the words of `query`.

    The query is reduced to quoted words joined by OR, so FTS syntax in user text
    (quotes, `-`, `NEAR`, `*`) can neither break the query nor change its meaning.

    :raises UsageError: if `query` has no words or `limit` is below 1.
    """
    if limit < 1:
        raise UsageError(f"search limit must be >= 1, got {limit!r}")
    terms = list(dict.fromkeys(_WORD.findall(query)))[:_MAX_QUERY_TERMS]
    if not terms:
        raise UsageError(f"search query {query!r} has no words to look for")
    match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    rows = conn.execute(
        "SELECT m.tag, m.id, m.kind, m.tool_name, m.layer, bm25(archive_fts) AS rank, "
        "snippet(archive_fts, 0, '[', ']', '…', 12) "
        "FROM archive_fts JOIN messages AS m ON m.tag = archive_fts.rowid "
        "WHERE archive_fts MATCH ? AND m.domain = ? ORDER BY rank, m.tag LIMIT ?",
        (match, domain, limit),
    ).fetchall()
    return [
        SearchHit(tag=tag, id=mid, kind=kind, tool_name=tool, layer=layer, score=-float(rank), snippet=snip)
        for tag, mid, kind, tool, layer, rank, snip in rows
    ]


_ERROR_WORDS = (
    b"error",
    b"exception",
    b"traceback",
    b"fail",
    b"fatal",
    b"panic",
    b"denied",
    b"segmentation fault",
    b"no such file",
    b"not found",
    b"<returncode>",
)
"""Substrings every `ERROR_LINE` match contains (lower case): `bytes.find` skips through a
10 kB log far faster than a regex, which then only checks the candidate lines."""


def error_lines(lines: Sequence[str], skip: set[int], limit: int) -> list[tuple[int, str]]:
    r"""The first `limit` lines with an error, as (1-based number, text), skipping `skip`.

    `lines` is the output's `str.splitlines()`, so numbers match what `read` shows even
    where a progress bar redraws itself with "\r". The words are found in the lines joined
    by "\n" and ASCII-lowercased as bytes: offsets then agree with the original (unlike
    `str.lower`, which may change a length) and the "\n"s before one give its line.

    Per word, only lines that `ERROR_LINE` confirms count toward the cap: a log full of
    "0 errors" must not hide the one real `ERROR:` line after it. `limit + len(skip)`
    confirmed lines per word are enough, since any earlier confirmed line is either
    skipped or itself among the first `limit`.
    """
    if limit <= 0 or not lines:
        return []
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    lower = raw.lower()
    cap = limit + len(skip)
    verdicts: dict[int, bool] = {}  # line start -> does ERROR_LINE match it (checked once per line)
    for word in _ERROR_WORDS:
        pos = lower.find(word)
        confirmed = 0
        while pos != -1 and confirmed < cap:
            start = lower.rfind(b"\n", 0, pos) + 1
            line_end = lower.find(b"\n", pos)
            verdict = verdicts.get(start)
            if verdict is None:
                line = raw[start : len(raw) if line_end == -1 else line_end].decode("utf-8", "surrogatepass")
                verdict = verdicts[start] = ERROR_LINE.search(line) is not None
            confirmed += verdict
            pos = -1 if line_end == -1 else lower.find(word, line_end)
    found: list[tuple[int, str]] = []
    number, counted_to = 1, 0
    for start in sorted(start for start, verdict in verdicts.items() if verdict):
        number += lower.count(b"\n", counted_to, start)
        counted_to = start
        if number not in skip:
            found.append((number, lines[number - 1]))
            if len(found) == limit:
                break
    return found


def clip(text: str, limit: int) -> str:
    """Clip to `limit` characters at a space where possible, marking the cut with "…".

    Shared by compact forms and summary lines, so a clipped line looks the same in both.
    """
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, max(1, limit - 1))
    return text[: cut if cut > limit // 2 else max(0, limit - 1)] + "…"
