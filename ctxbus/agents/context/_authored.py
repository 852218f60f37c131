"""What the user wrote, kept by who wrote it: the authored layer (author-first eviction).

A message the user (or the host, on the user's behalf: a system message in the history)
wrote is never summarized away while the rolling layer makes room: when the rolling
layer lets it go, it moves into the authored layer, which the head shows verbatim under
its own header. Whether the text looks like a rule does not decide this; the classifier
only ranks inside it (docs/ARCHITECTURE.md section 3).

The layer has its own share of the window (`ContextConfig.user_share`). While it is over
that share, each rebuild shows it smaller, losing no word the user wrote from what
`ctx_read` can show, in this order (`fit`):

1. repeated lines (a line an older message of the layer already shows) are left out;
2. pasted machine output inside a message (a log, a stack trace, a diff, a command's
   output, a fenced code block: recognised by the shape of its lines, not their words)
   goes behind a locator, oldest message first, as large tool output does;
3. the paraphrasable lines (a question, an acknowledgement, a short aside holding no
   number, name, path, negation or rule) are folded, oldest message first.

Statement lines stay verbatim: a pasted document is split into its lines, so a long paste
costs what its statements cost, and its pasted log does not crowd them out. Only when
everything else that can give way has (the summary, tool output and narration outside the
protected recent window) does the planner summarize the layer's oldest message.

Everything here is pure: forms and counts are memoized by the caller's `AuthoredMemo`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ctxbus.agents.context._archive import clip
from ctxbus.agents.context._classify import has_constraint, holds_fact
from ctxbus.agents.context._records import Entry

__all__ = [
    "AUTHORED_HEADER",
    "AuthoredItem",
    "AuthoredMemo",
    "Form",
    "Part",
    "fit",
    "is_authored",
    "parts",
    "statement_density",
]

AUTHORED_HEADER = "[what the user wrote earlier, in their words; […]: folded, ctx_read shows it]\n"
FOLDED = "[…]"
"""What a message shows when every line of it is folded."""

_MIN_PASTE_LINES = 4
"""A run of machine-shaped lines shorter than this stays as lines (a short command, a
two-line snippet): a locator would cost about as much."""
_MIN_REPEAT_CHARS = 24
"""Shorter repeated lines ("ok", "yes") are not worth a note that they repeat."""
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_WORD = re.compile(r"[^\W\d_]{2,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+\S")
_TABLE = re.compile(r"^\s*\|.*\|\s*$")
_SHAPED = re.compile(
    # Lines whose shape says a program wrote them: diff headers and hunks, shell and REPL
    # prompts, timestamps and log-level prefixes, trace frames, exception lines, hex dumps.
    r"^(?:@@ |diff --git |index [0-9a-f]+\.\.|--- |\+\+\+ |[+-](?![-+*]?\s+[^\W\d_]{2,}\s+[^\W\d_]{2,}\s+[^\W\d_]{2,})"
    r"|\s*(?:\$|%|>>>|\.\.\.|❯|➜|#)\s"
    r"|\s*\[?\d{4}-\d\d-\d\d[T ]\d|\s*\[?\d\d:\d\d:\d\d|\s*\[?(?:DEBUG|INFO|WARN(?:ING)?|ERROR|FATAL|TRACE)\b"
    r"|\s+(?:File \"|at [\w.$<>]+\(|\^+\s*$|~+\^)"
    r"|\s*(?:[\w.]+(?:Error|Exception|Warning)|Traceback \(most recent call last\)|panic|goroutine \d)(?::|\s|$)"
    r"|\s*(?:0x)?[0-9a-f]{8,}\b)"
)
_BOX = re.compile(r"[│┃║╭╮╰╯├┤┌┐└┘┬┴┼═━╔╗╚╝╠╣×╰─▶]")
_CODE_END = re.compile(r"[{}();,\[\]]\s*$|^\s*[{}\[\]()]")
_ACK_MAX_WORDS = 6


def is_authored(e: Entry) -> bool:
    """Whether the user (or the host, for the user) wrote this message: a user or system
    turn with text, not a synthetic one (a Channel 2 "prune now")."""
    return (
        e.role in ("user", "system")
        and e.kind not in ("synthetic", "tool_call", "tool_result")
        and e.state == "active"
        and bool(e.content.strip())
    )


# -- the parts of a message ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """A line the user wrote, or a pasted block of machine output (several lines)."""

    kind: Literal["line", "paste"]
    text: str
    first: int
    """1-based number of its first line in the message (`ctx_read` counts the same way)."""
    last: int


def _machine(line: str) -> bool:
    """Whether a line has the shape of machine output rather than of something a person
    wrote: its structure (prompt, diff marker, timestamp, frame, indentation, symbols),
    never what its words mean."""
    s = line.rstrip()
    body = s.lstrip()
    if not body or _TABLE.match(s):
        return False  # a table row is a statement laid out in cells
    if _SHAPED.match(s) or _BOX.search(s):
        return True
    if _CJK.search(body):
        return False
    words = len(_WORD.findall(body))
    letters = sum(ch.isalpha() for ch in body)
    visible = sum(not ch.isspace() for ch in body)
    symbols = visible - letters - sum(ch.isdigit() for ch in body)
    if _BULLET.match(s) and words >= 3 and symbols <= visible * 0.2:
        return False  # a list item written as prose
    if " " not in body and len(body) >= 20:
        return True  # a path, a hash, a URL on a line of its own
    indent = len(s) - len(body)
    if indent >= 4 and (words < 6 or symbols >= visible * 0.12 or _CODE_END.search(s)):
        return True
    if symbols >= visible * 0.3 or (_CODE_END.search(s) and symbols >= visible * 0.12):
        return True
    return words <= 1 and visible >= 3 and letters < visible * 0.6  # "42 passed", "[ok]", "----"


def _prose(line: str) -> bool:
    """A line that clearly reads as a person's sentence: it ends a pasted run."""
    body = line.strip()
    return bool(_CJK.search(body)) or (len(_WORD.findall(body)) >= 5 and not _machine(line))


def parts(content: str) -> tuple[Part, ...]:
    """`content` as its lines and pasted blocks, in order.

    A pasted block is a fenced code block, or a run of at least `_MIN_PASTE_LINES` lines
    shaped like machine output (short lines between them, blank or not, go with the run;
    a line that reads as a sentence ends it). Everything else is one part per line.
    """
    lines = content.split("\n")
    out: list[Part] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if _FENCE.match(line):
            end = next((j for j in range(i + 1, n) if _FENCE.match(lines[j])), None)
            if end is not None:  # a fence and the fence that closes it: one block, or short, its lines
                if end - i > _MIN_PASTE_LINES - 1:
                    out.append(Part("paste", "\n".join(lines[i : end + 1]), i + 1, end + 1))
                else:
                    out.extend(Part("line", lines[j], j + 1, j + 1) for j in range(i, end + 1))
                i = end + 1
                continue
        if _machine(line):
            j, machine, last = i, 0, i
            while j < n and not _FENCE.match(lines[j]):
                if _machine(lines[j]):
                    machine, last = machine + 1, j
                elif _prose(lines[j]) or j - last > 2:
                    break
                j += 1
            if machine >= _MIN_PASTE_LINES:
                out.append(Part("paste", "\n".join(lines[i : last + 1]), i + 1, last + 1))
                i = last + 1
                continue
        out.append(Part("line", line, i + 1, i + 1))
        i += 1
    return tuple(_joined(out, lines))


def _joined(ps: list[Part], lines: list[str]) -> list[Part]:
    """Pasted blocks with at most two lines between them that do not read as sentences
    (a blank line, a wrapped fragment) made one block: one paste, one locator."""
    out: list[Part] = []
    for p in ps:
        if p.kind == "paste" and out:
            back = len(out)
            while back > 0 and out[back - 1].kind == "line" and len(out) - back < 2 and not _prose(out[back - 1].text):
                back -= 1
            if back > 0 and out[back - 1].kind == "paste":
                first = out[back - 1].first
                del out[back - 1 :]
                out.append(Part("paste", "\n".join(lines[first - 1 : p.last]), first, p.last))
                continue
        out.append(p)
    return out


def _paraphrasable(text: str) -> bool:
    """A line that can go without losing a word that matters: a question or a short aside
    (an acknowledgement, a greeting) with no number, name, path, negation or rule."""
    body = text.strip()
    if not body:
        return True
    if holds_fact(body) or has_constraint(body):
        return False
    return body.endswith(("?", "？")) or _words(body) <= _ACK_MAX_WORDS


def _words(text: str) -> int:
    """Words of `text`, a CJK character counting as half of one (a word is one or two)."""
    cjk = len(_CJK.findall(text))
    return len(_WORD.findall(_CJK.sub(" ", text))) + cjk // 2 if cjk else len(_WORD.findall(text))


def statement_density(e: Entry, memo: AuthoredMemo) -> float:
    """Statements (lines that are not paraphrasable, nor pasted output) per token of a
    message: what the planner weighs when what the user wrote must give way at last."""
    statements = sum(p.kind == "line" and not _paraphrasable(p.text) for p in memo.parts_of(e))
    return (1 + statements) / max(1, e.shown_tokens)


def _repeat_key(text: str) -> str:
    return " ".join(text.split()).lower()


# -- forms -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Form:
    """How one message of the layer is shown: which parts are left out as repeats, which
    pasted blocks are behind a locator, which lines are folded (indexes into `parts`)."""

    deduped: frozenset[int] = frozenset()
    archived: frozenset[int] = frozenset()
    folded: frozenset[int] = frozenset()

    @property
    def verbatim(self) -> bool:
        return not (self.deduped or self.archived or self.folded)


VERBATIM = Form()


@dataclass(frozen=True, slots=True)
class AuthoredItem:
    """One message of the authored layer as the head shows it."""

    tag: int
    text: str
    tokens: int
    form: Form = VERBATIM
    lines: int = 0
    """Lines of the message."""
    folded: int = 0
    """Lines folded (out of the prompt; `ctx_read` shows them)."""
    archived: int = 0
    """Lines of pasted output behind a locator."""
    deduped: int = 0
    """Lines left out because an older message of the layer shows them."""

    @property
    def kind(self) -> str:
        """How `inspect` names it: authored (verbatim), or what was done to it."""
        if self.form.verbatim:
            return "authored"
        done = [
            name for name, n in (("deduped", self.deduped), ("archived", self.archived), ("folded", self.folded)) if n
        ]
        return "authored_" + "_".join(done)


@dataclass(slots=True)
class AuthoredMemo:
    """Parts and rendered forms already worked out, by tag: a cache the state owns, so a
    rebuild recounts only the forms it has not seen (planning stays free of side effects
    that matter: the same inputs give the same items)."""

    parts: dict[int, tuple[Part, ...]] = field(default_factory=dict)
    forms: dict[tuple[int, Form], tuple[str, int]] = field(default_factory=dict)

    def parts_of(self, e: Entry) -> tuple[Part, ...]:
        found = self.parts.get(e.tag)
        if found is None:
            found = self.parts[e.tag] = parts(e.content)
        return found

    def forget(self, tag: int) -> None:
        self.parts.pop(tag, None)
        for key in [k for k in self.forms if k[0] == tag]:
            del self.forms[key]


def _lines(p: Part) -> int:
    return p.last - p.first + 1


def render_form(tag: int, ps: Sequence[Part], form: Form) -> str:
    """The text the head shows of message §tag§ in `form`."""
    out: list[str] = []
    folded = sum(_lines(ps[i]) for i in form.folded)
    deduped = sum(_lines(ps[i]) for i in form.deduped)
    for i, p in enumerate(ps):
        if i in form.deduped or i in form.folded:
            continue
        if i in form.archived:
            rows = p.text.split("\n")
            out.append(
                f"[pasted {len(rows):,} lines {p.first}-{p.last}, archived: ctx_read({tag}) shows them] "
                f"{clip(rows[0].strip(), 80)} … {clip(rows[-1].strip(), 80)}"
            )
        elif form.verbatim or p.text.strip():
            out.append(p.text)
    if not any(line.strip() for line in out):
        return f"§{tag}§ {FOLDED}"  # nothing left to show: the mark alone
    notes = [f"{n:,} line(s) folded" for n in (folded,) if n]
    notes += [f"{n:,} repeated line(s) left out" for n in (deduped,) if n]
    if notes:
        out.append(f"[{'; '.join(notes)}: ctx_read({tag}) shows them]")
    return f"§{tag}§ " + "\n".join(out)


class _Fitter:
    """The items of one fit as they shrink, and what they cost."""

    def __init__(
        self,
        entries: Sequence[Entry],
        memo: AuthoredMemo,
        count: Callable[[str], int],
        items: Sequence[AuthoredItem] | None = None,
    ) -> None:
        self.entries = entries
        self.memo = memo
        self.count = count
        self.items = list(items) if items is not None else [_verbatim(e) for e in entries]
        self.total = sum(i.tokens + 1 for i in self.items)

    def set(self, index: int, form: Form) -> None:
        e = self.entries[index]
        ps = self.memo.parts_of(e)
        key = (e.tag, form)
        made = self.memo.forms.get(key)
        if made is None:
            text = render_form(e.tag, ps, form)
            made = self.memo.forms[key] = (text, self.count(text))
        old = self.items[index]
        self.items[index] = AuthoredItem(
            e.tag,
            made[0],
            made[1],
            form,
            lines=old.lines,
            folded=sum(_lines(ps[i]) for i in form.folded),
            archived=sum(_lines(ps[i]) for i in form.archived),
            deduped=sum(_lines(ps[i]) for i in form.deduped),
        )
        self.total += made[1] - old.tokens


def _verbatim(e: Entry) -> AuthoredItem:
    return AuthoredItem(e.tag, e.shown, e.shown_tokens, lines=e.content.count("\n") + 1)


def fit(entries: Sequence[Entry], cap: int, memo: AuthoredMemo, count: Callable[[str], int]) -> list[AuthoredItem]:
    """The layer's messages (tag order) shown within `cap` tokens if compressing can do it,
    else as small as compressing makes them: repeats left out, then pasted blocks archived
    and paraphrasable lines folded, oldest message first (see the module's docstring).
    Every item costs its tokens plus one for the newline joining it to the next."""
    f = _Fitter(entries, memo, count)
    if f.total <= cap:
        return f.items
    seen: set[str] = set()
    for index, e in enumerate(entries):
        ps = memo.parts_of(e)
        repeats = set()
        for i, p in enumerate(ps):
            key = _repeat_key(p.text)
            if len(key) < _MIN_REPEAT_CHARS:
                continue
            if key in seen:
                repeats.add(i)
            seen.add(key)
        if repeats:
            f.set(index, Form(deduped=frozenset(repeats)))
    for step in (_archive_pastes, _fold_paraphrasable):
        for index, e in enumerate(entries):
            if f.total <= cap:
                return f.items
            form = step(memo.parts_of(e), f.items[index].form)
            if form is not None:
                before = f.items[index]
                f.set(index, form)
                if f.items[index].tokens >= before.tokens:  # the locator or the note costs as much
                    f.total += before.tokens - f.items[index].tokens
                    f.items[index] = before
    return f.items


def _archive_pastes(ps: Sequence[Part], form: Form) -> Form | None:
    pastes = frozenset(i for i, p in enumerate(ps) if p.kind == "paste" and i not in form.deduped)
    return replace(form, archived=pastes) if pastes - form.archived else None


def _fold_paraphrasable(ps: Sequence[Part], form: Form) -> Form | None:
    gone = form.deduped | form.archived | form.folded
    fold = frozenset(i for i, p in enumerate(ps) if i not in gone and p.kind == "line" and _paraphrasable(p.text))
    return replace(form, folded=form.folded | fold) if fold else None
