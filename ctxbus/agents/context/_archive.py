"""Large tool output on demand: compact forms, line reads and BM25 search (SQLite FTS5).

A 3,000-token test log is worth a few lines in the prompt: its size, how it starts and
ends, and its error lines. The full text stays in the store, where `read` returns any
line range or the lines matching a query, and `search` ranks everything with BM25.

FTS5's unicode61 tokenizer takes a run of Chinese (or Japanese, Korean) as one token, so
"数据库" would never find "连接数据库超时". The index therefore gets each CJK character as
a token of its own, and a query's CJK run becomes its overlapping two-character phrases:
any two characters found side by side match, the more of them the better, much as the
words of an English query do. Text without CJK is indexed exactly as written.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from ctxbus.agents.context._classify import ERROR_LINE
from ctxbus.agents.context._errors import LinesPastTheEnd
from ctxbus.schemas import UsageError

__all__ = [
    "ARCHIVE_SCHEMA",
    "FTS_FORMAT",
    "SearchHit",
    "clip",
    "compact_form",
    "error_lines",
    "index_pending",
    "page",
    "read_lines",
    "search_archive",
]

_TOKENIZE = "unicode61 remove_diacritics 2"
ARCHIVE_SCHEMA = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS archive_fts USING fts5(
    content, content='messages', content_rowid='tag', tokenize='{_TOKENIZE}'
);
"""
"""External-content FTS5 index over `messages.content`: the text is stored once."""
_SNIPPET_SCAN_CHARS = 200_000
"""Characters of a hit's text searched for its snippet's line."""
_SNIPPET_BEFORE, _SNIPPET_AFTER = 30, 70
"""Characters a snippet shows before its first match, and after."""

_WORD = re.compile(r"\w+", re.UNICODE)
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f"
"""Kana, CJK ideographs (with extensions and compatibility forms) and Hangul syllables."""
_CJK = re.compile(f"[{_CJK_CLASS}]")
_CJK_GAP = re.compile(f"(?<=[{_CJK_CLASS}])(?=\\w)|(?<=\\w)(?=[{_CJK_CLASS}])")
_QUERY_PIECE = re.compile(f"[{_CJK_CLASS}]+|[^{_CJK_CLASS}]+")
_SEP = "\uffff"
"""Put between a CJK character and its neighbours in the indexed text. A noncharacter
(meant for a program's internal use): unicode61 splits on it and no real text holds it,
so removing it from a snippet gives back the original."""
FTS_FORMAT = "cjk-1"
"""The index's format, as the store records it: CJK held as single characters. A store
indexed before (without it) is indexed again, once, at the next search."""
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


def read_lines(
    content: str,
    *,
    tag: int,
    lines: tuple[int, int | None] | None = None,
    query: str | None = None,
    offset: int = 0,
    limit: int | None = None,
) -> str:
    """Numbered lines of `content` (message §tag§): a 1-based inclusive range, or those
    matching `query` (the first 50, with how many more there are; or a sentence saying
    that none do, rather than an empty answer the model would puzzle over).

    A range may run past the last line, or be open (`(start, None)`): it stops there;
    but it must start on a line the message has.

    With a `limit`, the answer is paged by characters (see `page`), so a 10 MB line
    comes back in pieces: `offset` is where in the answer this page starts.

    :raises LinesPastTheEnd: for a range that starts after the last line.
    :raises UsageError: for a range that is not two whole line numbers (an empty or
        inverted one too), a query with no words, or an offset past the answer's end.
    """
    return page(_lines(content, tag=tag, lines=lines, query=query), tag=tag, offset=offset, limit=limit)


def page(text: str, *, tag: int, offset: int = 0, limit: int | None = None) -> str:
    """Characters `offset` to `offset + limit` of `text` (the answer of a read of §tag§),
    followed, when that is not all of it, by a line saying which part this is and the
    offset to read on from. Without a limit and offset, `text` itself.

    :raises UsageError: for a negative offset, a limit below 1, or an offset past the end.
    """
    if offset < 0 or (limit is not None and limit < 1):
        raise UsageError(f"offset must be >= 0 and limit >= 1; got offset={offset!r}, limit={limit!r}")
    if offset == 0 and (limit is None or len(text) <= limit):
        return text
    if offset >= len(text):
        raise UsageError(f"offset {offset:,} is past the end: this read of §{tag}§ is {len(text):,} characters")
    end = len(text) if limit is None else min(len(text), offset + limit)
    where = f"characters {offset:,}-{end:,} of {len(text):,}"
    more = f"read on with offset={end}" if end < len(text) else "the end"
    return f"{text[offset:end]}\n[§{tag}§: {where}; {more}]"


def _lines(content: str, *, tag: int, lines: tuple[int, int | None] | None, query: str | None) -> str:
    """`read_lines` before paging."""
    all_lines = content.splitlines()
    unshown = 0
    if lines is not None:
        start, end = _line_range(lines)
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


def _line_range(lines: object) -> tuple[int, int | None]:
    """`lines` as (start, end): whole line numbers with 1 <= start <= end, or end None.

    :raises UsageError: naming `lines` and the form expected.
    """
    match lines:
        case (int() as start, int() | None as end) if start >= 1 and (end is None or end >= start):
            return start, end
    raise UsageError(
        f"line range must be (start, end) with whole line numbers 1 <= start <= end, or (start, None) "
        f"to read to the last line; got {lines!r:.60}"
    )


def index_pending(conn: sqlite3.Connection, domain: str, after: int, *, reindex: bool) -> int:
    """Index messages with a tag above `after`; return the highest tag now indexed.

    `reindex` when the index is not of `FTS_FORMAT` (built before CJK text was split,
    see the module docstring): it is dropped and every message indexed again, so old
    messages are found like new ones. Runs inside the caller's transaction.
    """
    if reindex and after > 0:
        conn.execute("INSERT INTO archive_fts(archive_fts) VALUES ('delete-all')")
        after = 0
    row = conn.execute("SELECT max(tag) FROM messages WHERE domain = ?", (domain,)).fetchone()
    newest = int(row[0] or 0)
    if newest > after:
        # The text passes through Python: SQLite's GLOB and LIKE stop at a NUL, and tool
        # output may hold one before its CJK text (FTS5 itself reads past it).
        rows = conn.execute(
            "SELECT tag, content, tool_calls FROM messages WHERE domain = ? AND tag > ?", (domain, after)
        )
        conn.executemany(
            "INSERT INTO archive_fts(rowid, content) VALUES (?, ?)",
            ((tag, _index_text(_searchable(text, calls))) for tag, text, calls in rows),
        )
    return max(newest, after)


def _searchable(content: str, calls: str | None) -> str:
    """What a search looks through of a message: its content, then one line per call
    (name and arguments), so that a command the agent ran is found by its words."""
    if not calls:
        return content
    return "\n".join([content, *(f"{name} {arguments}" for _, name, arguments in json.loads(calls))])


def _index_text(text: str) -> str:
    """`text` as the index sees it: each CJK character set apart from its neighbours."""
    return _CJK_GAP.sub(_SEP, text) if _CJK.search(text) else text


def _terms(query: str) -> list[str]:
    """The words of `query` to look for, each CJK run as its two-character phrases.

    :raises UsageError: if `query` has no words.
    """
    terms: dict[str, None] = {}
    for word in _WORD.findall(query):
        for piece in _QUERY_PIECE.findall(word):
            if len(piece) > 1 and _CJK.match(piece):
                terms.update(dict.fromkeys(piece[i : i + 2] for i in range(len(piece) - 1)))
            else:
                terms[piece] = None
    if not terms:
        raise UsageError(f"search query {query!r} has no words to look for")
    return list(terms)[:_MAX_QUERY_TERMS]


def _match(terms: Sequence[str]) -> str:
    """The FTS5 query for `terms`: each quoted (as the index splits it), ORed."""
    return " OR ".join('"' + _index_text(term).replace('"', '""') + '"' for term in terms)


def search_archive(conn: sqlite3.Connection, domain: str, query: str, limit: int) -> list[SearchHit]:
    """BM25-ranked hits for any of the words of `query`.

    The query is reduced to quoted words joined by OR, so FTS syntax in user text
    (quotes, `-`, `NEAR`, `*`) can neither break the query nor change its meaning.

    :raises UsageError: if `query` has no words or `limit` is below 1.
    """
    if limit < 1:
        raise UsageError(f"search limit must be >= 1, got {limit!r}")
    terms = _terms(query)
    ranked = conn.execute(
        "SELECT m.tag, m.id, m.kind, m.tool_name, m.layer, bm25(archive_fts) AS rank "
        "FROM archive_fts JOIN messages AS m ON m.tag = archive_fts.rowid "
        "WHERE archive_fts MATCH ? AND m.domain = ? ORDER BY rank, m.tag LIMIT ?",
        (_match(terms), domain, limit),
    ).fetchall()
    hits = []
    for tag, mid, kind, tool, layer, rank in ranked:
        content, calls = conn.execute(
            "SELECT content, tool_calls FROM messages WHERE domain = ? AND tag = ?", (domain, tag)
        ).fetchone()
        text = _searchable(content, calls)
        hits.append(
            SearchHit(
                tag=tag,
                id=mid,
                kind=kind,
                tool_name=tool,
                layer=layer,
                score=-float(rank),
                snippet=_snippet(text, terms),
            )
        )
    return hits


def _snippet(text: str, terms: Sequence[str]) -> str:
    """A few words of `text` around the line holding the most of `terms`, matches in [brackets].

    Made here, not by FTS5's `snippet()`: that one costs the square of a message's matches
    (3.6 s for five 180 kB test logs), it marks the wrong words of CJK text (the stored
    text lacks the index's splits), and it runs across lines. The scan stops at the first
    line holding every term, and reads at most `_SNIPPET_SCAN_CHARS`.
    """
    # One search per term: `finditer` on an alternation skips overlapping matches, so a
    # line holding "数据库" would count "数据" but not "据库".
    patterns = [re.compile(_term_pattern(term), re.IGNORECASE) for term in terms]
    best, most = "", 0
    for line in text[:_SNIPPET_SCAN_CHARS].splitlines():
        found = sum(1 for term in patterns if term.search(line))
        if found > most:
            best, most = line, found
            if most == len(terms):
                break
    if not most:  # matched by the index alone (diacritics folded): show where it starts
        return clip(" ".join(text[:_SNIPPET_SCAN_CHARS].split()), _SNIPPET_AFTER)
    first = re.compile("|".join(term.pattern for term in patterns), re.IGNORECASE).search(best)
    assert first is not None
    # Start at a space a little before the match; where the line has none near it (CJK
    # text, minified JSON), cut mid-word rather than at the line's start.
    lo = max(0, first.start() - _SNIPPET_BEFORE)
    space = best.rfind(" ", max(0, lo - _SNIPPET_BEFORE), lo)
    start = space + 1 if space >= 0 else lo
    limit = _SNIPPET_BEFORE + _SNIPPET_AFTER
    window = clip(best[start:].strip(), limit)
    head = best[start : first.end()].lstrip()
    if window.endswith("…") and len(window) - 1 < len(head):  # the cut fell before the match's end
        window = head + clip(best[first.end() :].rstrip(), max(1, limit - len(head)))
    return ("…" if start > 0 else "") + _mark(window, terms)


def _mark(text: str, terms: Sequence[str]) -> str:
    """`text` with each run of matched terms in [brackets]: overlapping CJK phrases
    ("数据", "据库") make one mark ("[数据库]")."""
    spans = sorted(m.span() for term in terms for m in re.finditer(_term_pattern(term), text, re.IGNORECASE))
    marked, end = [], 0
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    for a, b in merged:
        marked += [text[end:a], "[", text[a:b], "]"]
        end = b
    return "".join(marked) + text[end:]


def _term_pattern(term: str) -> str:
    """A term as a regex: a whole word, as the index tokenizes; a CJK phrase anywhere."""
    escaped = re.escape(term)
    return escaped if _CJK.match(term) else rf"(?<!\w){escaped}(?!\w)"


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
