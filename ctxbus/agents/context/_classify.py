"""Rule-based detection of constraints, and the text units the engine quotes verbatim.

A constraint is a sentence that binds later turns: "do not commit", "never more than 10",
"budget <= 50k", "by Friday", 记住/不要/必须. Rules, not a model: they are fast enough to
run at ingest, they behave the same on every run, and a false positive costs only a few
pinned tokens while a false negative loses a user's instruction.

A trigger is only a first sign. A broad one ("don't", "always", "exactly", "critical")
binds only where it instructs (not in "don't you like this name better?"), and a sentence
with no trigger at all binds when it does what a rule does: limits, freezes, orders,
names who decides, or instructs with a standing scope (see `agents.context._binding`).

Units are verbatim substrings of the text: sentences of prose (soft-wrapped lines joined),
list items, headings, fenced code blocks, and single lines of box-drawn or table-like
blocks (a console panel has no sentence ends, and one trigger inside must not make the
whole panel a rule). No unit is longer than `UNIT_MAX_CHARS`: a longer one is cut at a
line end, else a clause break, else a space. Quoting whole units, never rewording, is
what lets "the exact submit command" survive to the last turn.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from ctxbus.agents.context._binding import WEAK_TRIGGERS, function_binds, weak_binds

__all__ = [
    "ERROR_LINE",
    "PIN_COPY_MAX_CHARS",
    "SHORT_RULE_CHARS",
    "UNIT_MAX_CHARS",
    "Span",
    "constraint_spans",
    "constraint_text",
    "facts",
    "has_constraint",
    "holds_fact",
    "mostly_rule",
    "rule_span",
    "rule_spans",
    "score_unit",
    "split_units",
]

_EN_TRIGGERS = (
    r"\bremember\b|\bdon['’]?t\s+forget\b|\bkeep\s+in\s+mind\b|\b(?:please|take|make\s+a)\s+note\b"
    r"|\bnote\b(?=\s*(?:that\b|:|,|about\b|however\b|well\b))"
    r"|\bmust(?:n['’]?t)?\b|\bnever\b|\bdo\s+not\b|\bdon['’]?t\b|\bdoesn['’]?t\b"
    r"|\bshould\s*n['’]?t\b|\bshould\s+not\b|\bcannot\b|\bcan['’]t\b|\bavoid\b|\balways\b"
    r"|\bmake\s+sure\b|\bbe\s+sure\b|\bensure\b|\bnot\s+allowed\b|\bforbidden\b|\bprohibited\b"
    r"|\bmandatory\b|\bunder\s+no\s+circumstances\b|\bexact(?:ly)?\b|\bimportant\b|\bcritical\b"
    r"|\bfrom\s+now\s+on\b|\bgoing\s+forward\b|\bone\s+\w+\s+at\s+a\s+time\b|\bout\s+of\s+bounds\b"
    r"|\boff[-\s]limits\b|\bwithout\s+(?:my|our)\s+(?:explicit\s+)?(?:permission|approval|consent)"
    r"|\bbefore\s+you\b|\bI\s+(?:want|need|expect)\s+(?:you|us)\b"
)
_NUMERIC_LIMITS = (
    r"\b(?:no|not)\s+(?:more|less|fewer|later|earlier)\s+than\s+[$€£]?\d"
    r"|\b(?:at\s+(?:most|least)|up\s+to|maximum(?:\s+of)?|minimum(?:\s+of)?|limit(?:ed)?\s+to"
    r"|under|below|within|exceed)\s+[$€£]?\d"
    r"|\bbudget\b[^.\n]{0,24}\d|\bdeadline\b"
    r"|\bby\s+(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|tonight|noon|midnight|eod"
    r"|end\s+of\s+(?:the\s+)?(?:day|week|month))\b"
)
_COMPARISONS = r"(?:<=|>=|≤|≥|=<)\s*[$€£]?\d"
_ZH_TRIGGERS = (
    r"记住|记得|注意|一定|务必|必须|不要|不许|不准|不能|不得|不可|禁止|切勿|千万|只能|最多|至少|不超过|以内"
    r"|(?<![特区分类级识个告派性差鉴辨离])别(?![人名处称])"
)
# Every English branch starts at a word boundary with one of these letters. Saying so up
# front lets `re` skip most positions: the plain alternation costs ~250 µs per line.
_TRIGGER = re.compile(
    f"\\b(?=[abcdefgiklmnoprstuw])(?:{_EN_TRIGGERS}|{_NUMERIC_LIMITS})"
    f"|(?=[<>=≤≥])(?:{_COMPARISONS})|(?=[\u3400-\u9fff])(?:{_ZH_TRIGGERS})",
    re.IGNORECASE,
)

# Cheaper still: every English branch needs one of these words, so the pattern only runs
# on a short window around each of them; comparisons and Chinese triggers have their own
# small pattern, gated by their first character.
_GATE_WORDS = frozenset(
    """remember forget mind note must mustn mustnt never not don dont doesn doesnt shouldn shouldnt
    cannot can cant t avoid always sure ensure allowed forbidden prohibited mandatory circumstances
    exact exactly important critical now forward time bounds limits permission approval consent
    before want need expect than most least up maximum minimum limit limited under below within
    exceed budget deadline monday tuesday wednesday thursday friday saturday sunday tomorrow
    tonight noon midnight eod end""".split()
)
_ASCII_WORD = re.compile(r"[A-Za-z]+")
_NON_ENGLISH = re.compile(f"(?=[<>=≤≥])(?:{_COMPARISONS})|(?=[\u3400-\u9fff])(?:{_ZH_TRIGGERS})")
_WINDOW_BEFORE = 48
"""Longest reach of a multi-word trigger before its gate word ("one scenario at a time")."""
_WINDOW_AFTER = 48

_BACK_REFERENCE = re.compile(
    r"\b(?:remember|forget|keep\s+in\s+mind|note)\s+(?:that|this|it|these|those)\b(?!\s+\w+\s+\w)|记住这|记得这",
    re.IGNORECASE,
)
"""A remember-request that points back ("remember that", "keep this in mind") rather than
stating the rule itself."""
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"^\s*(?:#{1,6}\s|<[^>\n]{1,40}>\s*$|\*\*[^*\n]{1,60}\*\*:?\s*$)")
_CJK_CLOSERS = "”’」』）》】"
_SENTENCE_END = re.compile(
    f"(?<=[.!?。！？{_CJK_CLOSERS}])(?:"
    r"(?<=[.!?。！？])(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)(?<!vs\.)(?<!\bDr\.)(?<!\bMr\.)\s+(?=\S)"
    f"|(?:(?<=[。！？])|(?<=[。！？][{_CJK_CLOSERS}]))(?=[^。！？!?{_CJK_CLOSERS}\\s]))"
)
"""Where a sentence ends: after . ! ? and whitespace, as in English; or straight after
。！？ (and any closing quote or bracket), since Chinese puts no space between sentences.
A run such as "？！" or "。”" is not cut inside. The shared lookbehind up front is for
speed: most positions fail that one test."""
_ENDS_WITH_COLON = re.compile(r"[:：]\**\s*$")
_BOXED = re.compile(r"^\s*[│┃║╭╮╰╯├┤┌┐└┘┬┴┼═─━╔╗╚╝╠╣|]")
"""A line of a box-drawn panel or a table: each is a unit of its own."""
_CUT = re.compile(r"[,;:](?=\s)|\s[-–—]\s|[，；：、]")

UNIT_MAX_CHARS = 400
"""Longest unit: a longer sentence, block or code fence is cut (at a line end, a clause
break or a space), so one unit can never pin or fill a layer by itself."""
SHORT_RULE_CHARS = 300
"""A rule this short is a rule whole: it is pinned whole, and demotion never cuts it to
its constraint sentences (the sentence around a trigger is often what the rule is about)."""
PIN_COPY_MAX_CHARS = 8_000
"""Cap of a pinned copy (the constraint units of a long message, ~2,000 tokens): later
constraint units that would pass it are left to the summary."""

ERROR_LINE = re.compile(
    r"\b(?=[adefnpst])(?:error|exception|traceback|failed|failure|fatal|panic|denied|segmentation fault"
    r"|no such file|not found|assert(?:ion)?error)\b|(?-i:(?<=[a-z])(?:Error|Exception)\b)|<returncode>[1-9]",
    re.IGNORECASE,
)
"""A line that reports a failure; quoted in compact forms and kept by summaries."""

_URL = r"https?://[^\s<>\"'`)\]]+"
_PATH = (
    r"(?<![<\w])(?:[\w.~-]+)?(?:/[\w.@+-]+)+/?"
    r"|\b[\w-]+\.(?:py|pyi|js|ts|tsx|jsx|md|txt|json|jsonl|toml|yaml|yml|cfg|ini|csv|xlsx|rs|go"
    r"|java|c|h|cpp|sh|sql|html|css|lock|pdf|db|log)\b"
)
_ID = (
    r"§\d+§|\b[0-9a-f]{7,40}\b"
    r"|\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])\w+(?:[-_]\w+)+\b"
)
_NUMBER_UNIT = (
    r"[$€£]\d[\d,]*(?:\.\d+)?[kKmM]?|\b\d{1,2}:\d{2}(?:\s?[AaPp]\.?[Mm]\.?)?"
    # One branch per number: a compound unit first (1,200 req/s, 3 GPU-days, 2.5k tokens/turn),
    # else a unit, with a rate after it if any (40 ms per request).
    r"|\b\d[\d,]*(?:\.\d+)?(?:\s?[kKM]?\s?[A-Za-z]{1,12}(?:[/-][A-Za-z]{1,12})+\b"
    r"|\s?(?:%|ms|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?"
    r"|months?|years?|[kKMGT]i?B?|bytes?|tokens?|lines?|files?|tests?|items?|rows?|points?|books?"
    r"|employees?|px|USD|EUR|GBP|[KMGT]iB|req|rps|qps|requests?|nodes?|machines?|workers?|GPUs?"
    r"|[AaPp]\.?[Mm]\.?)(?:\s?(?:/|per\s+)[A-Za-z]{1,12}\b)?(?![\w]))"
)
_FACT = re.compile(f"{_URL}|{_NUMBER_UNIT}|{_PATH}|{_ID}")
_NEGATION = re.compile(r"\b(?:not|no|never|none|without|cannot)\b|n['’]t\b|不|没|别|无", re.IGNORECASE)
_NAME = re.compile(r"(?<=\w )[A-Z][a-z]{2,}|\b[A-Z][a-z]+[A-Z]\w*|\b[a-z]+_[a-z_]+\b|`[^`\n]{2,60}`")
_DECISION = re.compile(
    r"\b(?:decid\w*|conclu\w*|because|root cause|fix(?:ed)?|result\w*|found|plan|will|chose|agreed)\b",
    re.IGNORECASE,
)

_DIGIT = re.compile(r"\d")

Span = tuple[int, int]


def facts(text: str) -> list[str]:
    """Numbers with units, paths, URLs and IDs in `text`, verbatim, first occurrence each."""
    seen: dict[str, None] = {}
    for match in _FACT.finditer(text):
        seen.setdefault(match.group(0).rstrip(".,;:"), None)
    return [fact for fact in seen if fact]


@functools.lru_cache(maxsize=4096)
def score_unit(unit: str, *, by_function: bool = False) -> float:
    """How much a unit is worth keeping in a summary: facts, rules, errors, negations.

    A rule counts when a trigger states it or, with `by_function` (the user's and the
    system's text: the rules of `has_constraint`, which cost more), when it binds by what
    it does. Cached: summary merges score the same lines again and again.
    """
    score = 0.0
    if has_constraint(unit) if by_function else _trigger(unit) is not None:
        score += 3.0
    if ERROR_LINE.search(unit):
        score += 2.0
    score += min(3, len(_FACT.findall(unit))) * 1.0
    if _NEGATION.search(unit):
        score += 1.0
    if _NAME.search(unit):
        score += 0.5
    if _DECISION.search(unit):
        score += 0.5
    return score


def holds_fact(unit: str) -> bool:
    """Whether a unit holds a number, a negation or a name (a path, an ID, a capitalized
    word, a `quoted` identifier): what a summary must quote whole or not at all."""
    return bool(_DIGIT.search(unit) or _NEGATION.search(unit) or _NAME.search(unit) or _FACT.search(unit))


def has_constraint(text: str) -> bool:
    """Whether a unit of `text` binds: a trigger that instructs there (English, Chinese or a
    numeric limit), or a rule stated by what it does (`agents.context._binding`)."""
    if len(text) <= UNIT_MAX_CHARS and not _MAY_SPLIT.search(text):
        return _strength(text.strip()) > 0  # one sentence: no need to cut it into units
    return any(_strength(text[a:b]) for a, b, _ in _units(text))


_MAY_SPLIT = re.compile(r"[.!?。！？][\s”’」』）》】]*\S|\n|^\s*(?:[-*+•]|\d{1,3}[.)])\s")
"""Something after a sentence end, a line break, or a list mark: the text may be more than one unit."""


@functools.lru_cache(maxsize=8192)
def _strength(unit: str) -> int:
    """2: a trigger that instructs; 1: a rule by what it does (`function_binds`); 0: none."""
    if _NON_ENGLISH.search(unit):
        return 2
    for start, end in _gate_windows(unit):
        for match in _TRIGGER.finditer(unit, start, end):
            word = match.group(0)
            if not _is_weak(word) or weak_binds(unit, word):
                return 2
    return 1 if function_binds(unit) else 0


def _is_weak(trigger: str) -> bool:
    words = " ".join(trigger.lower().split())
    return words in WEAK_TRIGGERS or words.startswith(("before you", "i want", "i need", "i expect", "should"))


def mostly_rule(text: str) -> bool:
    """Whether `text` is a rule as a whole: short (`SHORT_RULE_CHARS`), or at least half
    of it constraint units. A chatty turn with one rule in it gives its rule, not itself."""
    if len(text) <= SHORT_RULE_CHARS:
        return True
    ruled = sum(b - a for a, b, _ in _constraint_unit_spans(text))
    return ruled * 2 >= len(text.strip())


def rule_span(text: str) -> Span | None:
    """Where the first negation or constraint trigger of `text` is, if any.

    Summaries that must shorten a unit keep the clause around it: the facts alone would
    turn "we should not deploy X" into "X".
    """
    found = [m for m in (_NEGATION.search(text), _trigger(text)) if m is not None]
    return min(found, key=lambda m: m.start()).span() if found else None


def rule_spans(text: str) -> list[Span]:
    """Every negation and constraint trigger of `text`, in order of where it starts.

    A long sentence can carry several rules ("don't bump X, and do not touch Y"); a
    summary that kept only the first would drop the "not" of the others.
    """
    spans = {m.span() for m in _NEGATION.finditer(text)}
    spans.update(m.span() for m in _NON_ENGLISH.finditer(text))
    for start, end in _gate_windows(text):
        spans.update(m.span() for m in _TRIGGER.finditer(text, start, end))
    return sorted(spans)


def _trigger(text: str) -> re.Match[str] | None:
    """A constraint trigger in `text` (not necessarily the first English one), or None."""
    match = _NON_ENGLISH.search(text)
    if match:
        return match
    for start, end in _gate_windows(text):
        match = _TRIGGER.search(text, start, end)
        if match:
            return match
    return None


def _gate_windows(text: str) -> Iterator[Span]:
    """The stretches of `text` around its gate words, merged where they overlap, in order."""
    window_start = window_end = -1
    for word in _ASCII_WORD.finditer(text):
        if word.group().lower() not in _GATE_WORDS:
            continue
        start = max(0, word.start() - _WINDOW_BEFORE)
        if start > window_end >= 0:
            yield window_start, window_end
            window_start = -1
        if window_start < 0:
            window_start = start
        # End the window at a space so no word is cut (a cut word could fake a `\b`).
        end = text.find(" ", word.end() + _WINDOW_AFTER)
        window_end = len(text) if end == -1 else end
    if window_start >= 0:
        yield window_start, window_end


def split_units(text: str) -> list[str]:
    """The text cut into verbatim units (sentences, list items, headings, code blocks)."""
    return [text[a:b] for a, b, _ in _units(text)]


def constraint_spans(text: str, max_chars: int | None = None) -> list[Span]:
    """Character spans of the constraint units of `text`, merged where adjacent.

    A constraint unit that ends with a colon ("You MUST use this EXACT command:",
    "**CRITICAL:**") also takes the list or code block that follows it: that block is
    what the rule is about. With `max_chars`, units stated with a trigger are taken first,
    then those that bind by what they do, each group in order, while their sum stays
    within it (a unit that would pass it is left out, later smaller ones still go).
    """
    units = _constraint_unit_spans(text)
    if max_chars is not None:
        chosen: list[tuple[int, int, int]] = []
        used = 0
        for strength in (2, 1):
            for unit in units:
                if unit[2] == strength and used + unit[1] - unit[0] <= max_chars:
                    chosen.append(unit)
                    used += unit[1] - unit[0] + 1
        units = sorted(chosen)
    spans: list[Span] = []
    for start, end, _ in units:
        if spans and not text[spans[-1][1] : start].strip():
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def _constraint_unit_spans(text: str) -> list[tuple[int, int, int]]:
    """The constraint units of `text` (with the block a colon-ended one introduces), unmerged,
    each with its strength (see `_strength`; a block has its introducer's)."""
    units = list(_units(text))
    spans: list[tuple[int, int, int]] = []
    i = 0
    while i < len(units):
        start, end, kind = units[i]
        strength = _strength(text[start:end])
        if not strength:
            i += 1
            continue
        if i and _BACK_REFERENCE.search(text, start, end):
            start = units[i - 1][0]  # "Would you remember that?" is about the sentence before
        spans.append((start, end, strength))
        i += 1
        if kind == "heading" or _ENDS_WITH_COLON.search(text[start:end]):
            while i < len(units) and units[i][2] in ("list", "item", "fence"):
                spans.append((*units[i][:2], strength))
                i += 1
    return spans


def constraint_text(text: str, max_chars: int | None = None) -> str:
    """The constraint units of `text`, verbatim, one span per line ("" if none); at most
    about `max_chars` of them if given (see `constraint_spans`)."""
    return "\n".join(text[a:b] for a, b in constraint_spans(text, max_chars))


def _units(text: str) -> Iterator[tuple[int, int, str]]:
    for start, end, kind in _blocks(text):
        if kind in ("fence", "heading", "line"):
            yield from _bounded(text, start, end, kind)
            continue
        pos = start
        for match in _SENTENCE_END.finditer(text, start, end):
            yield from _bounded(text, pos, match.start(), kind)
            pos = match.end()
            kind = "item" if kind == "list" else kind
        if pos < end:
            yield from _bounded(text, pos, end, kind)


def _bounded(text: str, start: int, end: int, kind: str) -> Iterator[tuple[int, int, str]]:
    """The unit `start:end`, cut into pieces of at most `UNIT_MAX_CHARS` if longer: at the
    last line end before the limit, else the last clause break, else the last space."""
    while end - start > UNIT_MAX_CHARS:
        limit = start + UNIT_MAX_CHARS
        cut = text.rfind("\n", start + 1, limit)
        if cut <= start:
            breaks = [m.end() for m in _CUT.finditer(text, start + UNIT_MAX_CHARS // 4, limit)]
            cut = breaks[-1] if breaks else text.rfind(" ", start + 1, limit)
        if cut <= start:
            cut = limit
        piece_end = _rstrip(text, cut)
        if piece_end > start:
            yield start, piece_end, kind
        start = cut
        while start < end and text[start].isspace():
            start += 1
        kind = "item" if kind == "list" else kind
    if end > start:
        yield start, end, kind


def _blocks(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield (start, end, kind) of blocks: 'fence', 'heading', 'list' item or 'prose'."""
    start = -1
    kind = "prose"
    in_fence = False
    pos = 0
    for line in text.splitlines(keepends=True):
        line_start, pos = pos, pos + len(line)
        body_end = line_start + len(line.rstrip("\r\n"))
        if in_fence:
            if _FENCE.match(line):
                in_fence = False
                yield start, body_end, "fence"
                start = -1
            continue
        if _FENCE.match(line):
            if start >= 0:
                yield start, _rstrip(text, line_start), kind
            start, in_fence = line_start, True
            continue
        if not line.strip():
            if start >= 0:
                yield start, _rstrip(text, line_start), kind
                start = -1
            continue
        if _BOXED.match(line):
            if start >= 0:
                yield start, _rstrip(text, line_start), kind
                start = -1
            if line.strip():
                yield _lstrip(text, line_start), body_end, "line"
            continue
        if _HEADING.match(line):
            if start >= 0:
                yield start, _rstrip(text, line_start), kind
            yield _lstrip(text, line_start), body_end, "heading"
            start = -1
            continue
        if _LIST_ITEM.match(line):
            if start >= 0:
                yield start, _rstrip(text, line_start), kind
            start, kind = _lstrip(text, line_start), "list"
            continue
        if start < 0:
            start, kind = _lstrip(text, line_start), "prose"
    if start >= 0:
        yield start, _rstrip(text, len(text)), "fence" if in_fence else kind


def _rstrip(text: str, end: int) -> int:
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end


def _lstrip(text: str, start: int) -> int:
    while start < len(text) and text[start] in " \t":
        start += 1
    return start
