"""Whether one sentence binds later turns, judged by what it does rather than by its words.

The trigger list of `agents.context._classify` catches "must", "never", "do not", 记住…
People state most rules without those words: "p99 stays under 40 ms per request", "the
v2 endpoint is off limits", "the migration runs only after the 02:00 backup finishes",
"leave the payments schema as it is", "anything touching billing goes through Marta
first", "我们只有三台机器". A sentence binds when it does one of these things (unless it asks, is code, or tells of
the past: "its creation was postponed until…"):

- **prohibits or freezes**: "no new dependencies", "nothing ships on Fridays", "hands off
  X", "leave X alone", "X stays as it is", "X is frozen / untouched / out of scope", "X is
  wrong";
- **limits**: a number with a unit (compound ones too: req/s, GPU-days, ms/turn) next to
  a word that bounds it (under, tops out, ceiling, allowed, gets, total of, not … more);
- **orders or conditions**: "only after", "until", "waits for", "first … then",
  "happens after X has …", 以后再 / 之前先;
- **ties a rule to a name or a gate**: "goes through Marta", "only Raj can approve",
  "needs sign-off from legal", "Lena owns the schema", "signed as 'The team'";
- **chooses**: "use pnpm, not npm", "benchmarks go in bench/, not in tests/", or says
  it stands: "from here on", "for the rest of the project"; or wishes: "I don't want it
  changing again";
- **instructs**: an imperative ("keep", "stop adding", "use X for every run", "write the
  notes in British English") that carries something that makes it standing rather than
  a one-off step: a verb that persists (keep, leave, stay, stop, skip, pin, hold…), a
  scope (every, each, only, for this repo, on this branch), or a fact (a number, a
  version, a path, a name).

And the broad triggers ("don't", "always", "exactly", "critical", "important", "can't")
count only where they instruct: not in a question ("don't you like this name better?"),
and only with a sign of an instruction (an imperative, "you should", "I want you to",
the word leading its sentence, or shouted: "ALWAYS"). "I think Opus is exactly right"
binds nothing.

Rules, not a model, for the reasons given in `_classify`: fast, the same on every run.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "STATEMENT_MAX_CHARS",
    "WEAK_TRIGGERS",
    "function_binds",
    "imperative",
    "is_question",
    "states",
    "weak_binds",
]

WEAK_TRIGGERS = frozenset(
    "don't dont don’t doesn't doesnt doesn’t can't cant can’t cannot always exact exactly important critical".split()
)
"""Triggers that are as often description or opinion as instruction."""

_SOFTENERS = (
    r"(?:ok(?:ay)?|so|and|also|but|then|now|please|pls|just|maybe|perhaps|instead|again|yes|yeah|right|well|hey"
    r"|good|great|nice|thanks|thank\s+you|cool|fine|sure|alright|perfect|agreed|exactly|correct"
    r"|from\s+now\s+on|for\s+now|in\s+general|generally|here|going\s+forward|one\s+more\s+thing|btw|oh)"
)
_LEAD = rf"^[\s\-*•>\d.)\]#]*(?:{_SOFTENERS}[,:;!.]?\s+)*"
"""List markers and softeners that may come before the verb of an imperative."""

_PERSISTING_VERBS = (
    r"keep|leave|stay|stick|stop|quit|skip|pin|hold|freeze|avoid|refrain|preserve|retain|respect|follow|obey"
    r"|prefer|limit|cap|restrict|reserve|wait|mind|cease"
)
_CONVENTION_VERBS = (
    r"use|write|put|name|call|format|document|sign|spell|translate|prefix|label|mark|tag|indent|default|target"
    r"|route|send|ask|reply|answer|respond|store|save|treat|report|tell|show|explain|describe|include|exclude"
    r"|let\s+me"
)
"""Verbs of a convention: with a fact ("write the notes in British English") they set how
things are done from now on."""
_TASK_VERBS = (
    r"add|remove|delete|drop|rename|move|make|run|commit|push|merge|deploy|check|verify|test|print|log|return"
    r"|set|give|take|ship|release|rotate|fix|ping|email|split|cache|batch|retry|raise|read|open|close|sort|group"
    r"|count|measure|record|note|lock|unlock|approve|review|stage|start|finish|end|begin"
)
"""Verbs of a step: "fix the parser in src/parse.py" is work to do, a rule only with a scope
("run the linter on every commit")."""
_ADVERB = r"(?:(?:only|never|always|don['’]?t|do\s+not)\s+)?"
_NEXT_WORD = r"\b(?=\s+[^\s(=.])"
"""The verb is followed by a word (not the `(` or `=` of code: `print(x)`, `test = 1`)."""
_IMPERATIVE = re.compile(
    rf"{_LEAD}{_ADVERB}(?:{_PERSISTING_VERBS}|{_CONVENTION_VERBS}|{_TASK_VERBS}){_NEXT_WORD}", re.IGNORECASE
)
_PERSISTING = re.compile(rf"{_LEAD}{_ADVERB}(?:{_PERSISTING_VERBS}){_NEXT_WORD}", re.IGNORECASE)
_CONVENTION = re.compile(rf"{_LEAD}{_ADVERB}(?:{_CONVENTION_VERBS}){_NEXT_WORD}", re.IGNORECASE)
_CODE = re.compile(r"\w\(|[{};]\s*$|^\s{4,}|\w\s?=\s?\S|->|::|^\s*(?:return|def|import|from|class|if|for)\s")
"""A line of code, not a sentence."""
_NARRATION = re.compile(r"\b(?:was|were|had|did|would\s+have|could\s+have|used\s+to)\b", re.IGNORECASE)
"""Told about the past or what might have been: "its creation was postponed until…"."""
_SCOPE = re.compile(
    r"\b(?:every|each|all|any|anything|everything|nothing|whenever|wherever|throughout|only|exclusively|anymore"
    r"|everywhere|anywhere|always|by\s+default"
    r"|for\s+the\s+rest|from\s+here)\b"
    r"|\b(?:for|on|in|across|throughout|within)\s+(?:this|these|that|the\s+(?:whole|entire|rest))\b",
    re.IGNORECASE,
)
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_UNIT_WORD = (
    r"%|ms|µs|us|ns|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|[kKMGT]i?B"
    r"|bytes?|tokens?|lines?|files?|tests?|items?|rows?|req|reqs|requests?|rps|qps|calls?|turns?|runs?|nodes?"
    r"|machines?|servers?|instances?|workers?|cores?|cpus?|gpus?|users?|approvals?|retries|attempts?|steps?"
    r"|commits?|people|engineers?|euros?|dollars?|USD|EUR|GBP|k|K|M"
)
COMPOUND_UNIT = (
    rf"\b{_NUMBER}\s?[kKM]?\s?(?:[A-Za-z]{{1,12}}|%)(?:[/-][A-Za-z]{{1,12}})+\b"
    rf"|\b{_NUMBER}[kKM]?\s?(?:{_UNIT_WORD})\s?(?:/|per\s+)[A-Za-z]{{1,12}}\b"
)
"""A number with a compound unit: 1,200 req/s, 3 GPU-days, 250 ms/turn, 2.5k tokens/turn,
40 ms per request."""
_QUANTITY = re.compile(
    rf"{COMPOUND_UNIT}|[$€£]{_NUMBER}[kKmM]?|\b{_NUMBER}(?:[-\s]?(?:{_UNIT_WORD}))\b(?![-/]\w)"
    rf"|\b\d{{1,2}}:\d{{2}}\b|\b(?i:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a|an|a\s+couple\s+of"
    rf"|a\s+few)\s+(?:[a-z]+-)?(?:[a-z]{{3,}}(?:s|ies)|hour|day|week|minute|byte|request|machine|server|node"
    rf"|approval|retry)\b|\b{_NUMBER}\s?[kKMGT]?\b",
)
_BOUNDING = re.compile(
    r"\b(?:tops?\s+out|ceiling|cap(?:ped|s)?|max(?:imum)?|min(?:imum)?|limit(?:ed|s)?|allowed|allowance|quota"
    r"|budget|total\s+of|only\s+(?:have|get|got)|gets?|get|stays?|stay|under|below|above|over|within|up\s+to"
    r"|window|more|less|fewer|spend|afford|at\s+(?:most|least)|no\s+(?:more|less)|not\s+(?:a|one)\s+\w+\s+more"
    r"|all\s+(?:it|we|you|they)\s+(?:can|get|have)|at\s+the\s+(?:outside|most|least|latest|earliest)|tops"
    r"|the\s+most|the\s+least|hard\s+limit|or\s+(?:less|fewer|under|below)|rate[-\s]limit\w*|before|left)\b",
    re.IGNORECASE,
)
_FREEZE = re.compile(
    r"\b(?:as\s+(?:it|they)\s+(?:is|are|stands?)|as[-\s]is|untouched|unchanged|frozen|read[-\s]only"
    r"|hands[-\s]off|off[-\s]limits|out\s+of\s+(?:scope|bounds)|not\s+to\s+be\s+(?:touched|changed|modified)"
    r"|(?:is|are|was)\s+(?:also\s+|just\s+|still\s+)?(?:wrong|not\s+ok(?:ay)?|unacceptable|a\s+no[-\s]go)"
    r"|alone|belongs?\s+to|owns|owned\s+by)\b",
    re.IGNORECASE,
)
_ORDER = re.compile(
    r"\bonly\s+(?:after|once|when|if|before|on|with|from|via|through|in)\b|\b(?:until|till)\b(?!\s+(?:now|recently|then|today|yesterday|later|the\s+end))|\bunless\b"
    r"|\bwaits?\s+(?:for|until|on)\b|\bnot\s+(?:before|until)\b"
    r"|\b(?:happens?|runs?|goes?|comes?|starts?|lands?|ships?)\s+(?:only\s+)?(?:after|once)\b"
    r"|\bfirst\b[^.!?\n]{0,80}\bthen\b|\b(?:once|as\s+soon\s+as|when(?:ever)?)\b[^.!?\n]{0,80},\s*(?:then\b|you\s+(?:can|may))"
    r"|\bbefore\s+[a-z]+ing\b|,\s*not\s+(?:before|after|earlier|later|sooner)\b"
    r"|\bafter\b[^.!?\n]{0,60}\b(?:finishes|finished|completes|completed|is\s+done|has\s+been|have\s+been"
    r"|passes|passed|lands|landed|signs?\s+off)\b",
    re.IGNORECASE,
)
_NAMED = re.compile(
    r"\b(?:go(?:es)?\s+(?:to|through|past|via)|routed?\s+(?:to|through)|escalated?\s+to|through|signs?\s+off"
    r"|approval\s+from|approved\s+by|owned\s+by|check\s+with|ask|from)\s+[A-Z][a-z]{2,}"
    r"|\b(?:needs?|requires?|gets?)\s+(?:a\s+|an\s+)?(?:[\w-]+\s+)?(?:sign[-\s]?off|approval|review|go[-\s]ahead|ack"
    r"|permission|consent|green\s+light)\b"
    r"|^\W*[Oo]nly\s+(?:[A-Z]\w+|the\s+\w+|\w+\s+team)\s+(?:can|may|gets?\s+to|is\s+allowed)\b"
    r"|\b(?:we|you)\s+only\s+[a-z]+"
    r"|\b(?:go|goes|belong|belongs|live|lives)\s+(?:in|into|under)\s+\S+"
    r"|\b(?:signed|named|called|titled|labell?ed|prefixed|suffixed|formatted|spelled|written)\s+(?:as\s+|with\s+)?"
    r"['\"‘“`]"
)
_NO_X = re.compile(
    rf"{_LEAD}(?:(?:no|zero)\s+(?:new|more|further|extra|additional|other|direct|manual|force[ds]?|\w+ing)\b"
    r"|(?:nothing|nobody|no\s+one|none\s+of\s+\w+)\s+(?!(?:is|was|were|happened|changed|worked|works)\b)[a-z]+)",
    re.IGNORECASE,
)
_CONTRAST = re.compile(
    r"(?<![\w'’])(?!(?:is|are|was|were|be|do|does|did|can|could|should|would|will|have|has|had|it|that|this|I|we|you"
    r"|they|or|and|but|if|why|may|might|must|why|whether|certainly|definitely|probably|just|really|still)\b)"
    r"[\w/.-]{2,},?\s+not\s+(?:in\s+|on\s+|the\s+|with\s+)?[\w/.-]{2,}",
    re.IGNORECASE,
)
"""A choice stated as "A, not B": "use pnpm, not npm", "tabs not spaces", "in bench/, not in tests/"."""
_PREFERENCE = re.compile(r"\bI\s+(?:don['’]?t|do\s+not)\s+want\b|\bI(?:['’]d|\s+would)\s+rather\b", re.IGNORECASE)
"""A prohibition or choice stated as the user's wish: "I don't want it changing again"."""
_STANDING = re.compile(
    r"\b(?:from\s+(?:here|this\s+point|today)\s+on|henceforth|from\s+today|as\s+a\s+rule"
    r"|for\s+the\s+rest\s+of\s+(?:this|the)\s+\w+)\b",
    re.IGNORECASE,
)
"""Words that make a statement standing: "from here on", "for the rest of the project"."""
"""A prohibition by "no": "no new dependencies", "no force-pushes", "no pushing to main"."""
_ZH_FUNCTION = re.compile(
    r"只有|上限|下限|预算|配额|保持现状|保持不变|不涉及|不动|控制在|顶多|封顶|先不|暂不|暂时不|不用|无需|不改"
    r"|[点号日天底]前|之前|以后再|之后再|完再|再做|之前先|先[^。！？]{0,12}再"
    r"|等[^。！？]{1,20}(?:以后|之后|完)|一律|统一用|用(?:英文|中文|英语|汉语|简体)|由[^。！？]{1,8}(?:负责|审核|批准|决定)"
    r"|让[^。！？]{1,6}(?:看|审|批|确认)"
)
_DIRECTIVE = re.compile(
    r"\b(?:you|we)\s+(?:should(?:n['’]?t|\s+not)?|shall|must|need\s+to|have\s+to|are\s+(?:not\s+)?(?:to|supposed|expected|allowed)"
    r"|will\s+need|'ll\s+need|ought)\b|\bI\s+(?:want|need|expect|would\s+like)\s+(?:you|us|it|them)\b"
    r"|\blet['’]?s\s+(?:always|never|not|only|keep|stick|stay)\b",
    re.IGNORECASE,
)
_FACT_LIKE = re.compile(
    r"\d|/[\w.-]+|`[^`]+`|(?<!\w)['\"‘“][^'\"’”\n]{2,60}['\"’”](?!\w)|(?<=\w )[A-Z][a-z]{2,}|\b[A-Z]{3,}\b|\b[A-Z][a-z]+[A-Z]\w*"
)
_TOLD = re.compile(
    r"(?:^|[,;:.!(]|\b(?:but|and|so|please|just|then|also|or|instead))\s*(?:don['’]?t|never|always)\s+"
    r"(?!(?:you|we|I|they|it|know|think|care|see|want|like|mind|remember|understand|have|need)\b)[a-z]+",
    re.IGNORECASE,
)
"""A negative (or "always") instruction inside a sentence: "good, but don't put comments…"."""
_QUESTION = re.compile(r"[?？]\W*$|吗[。？?]?\s*$")
_OPINION = re.compile(
    r"^\W*(?:I\s+(?:think|guess|believe|feel|dunno|don['’]?t\s+(?:think|know|care|see|remember|mind))"
    r"|it\s+seems|that['’]?s|this\s+is|it['’]?s|you['’]?re|you\s+are|well|hmm)\b",
    re.IGNORECASE,
)


STATEMENT_MAX_CHARS = 200
"""Longest sentence `states` takes for a statement: a longer one tells a story or explains."""
_ACK = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|k|yes|yep|yeah|yup|no|nope|sure|thanks|thank\s+you|thx|ty|cool|great|good|nice|perfect"
    r"|awesome|fine|right|correct|exactly|agreed|lgtm|done|go(?:\s+(?:ahead|on))?|continue|carry\s+on|proceed|next"
    r"|please|got\s+it|i\s+see|alright|all\s+right|h+m+|ah+|oh+|wow|lol|haha|well\s+done|good\s+job|great\s+work"
    r"|(?:looks|sounds)\s+(?:good|great|fine|ok(?:ay)?|right))\b[\W\s]*)+$",
    re.IGNORECASE,
)
"""An acknowledgement and nothing else: "ok, thanks.", "yes, go ahead", "lgtm"."""
_REACTION = re.compile(
    r"^\W*(?:(?:it|this|that|these|those|everything|all\s+(?:of\s+)?(?:it|this|that))\s+)?"
    r"(?:looks|looked|sounds|seems|feels|reads|works(?:\s+for\s+me)?|makes\s+sense)\b",
    re.IGNORECASE,
)
"""A reaction to the work shown: "looks reasonable so far", "makes sense", "works for me"."""
_REPORT = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|so|and|but|also|well|hmm|ah|oh|yes|no|actually|honestly)[,.!]?\s+)*"
    r"I(?:['’](?:m|ve|ll|d))?\s+(?!(?:want|need|expect|prefer|would\s+(?:like|rather)|['’]d\s+(?:like|rather))\b)",
    re.IGNORECASE,
)
"""The user telling what they did, saw or feel ("I read through the diff", "I'm confused"),
not how things are to be; "I want…", "I'd rather…" are left to the other rules."""
_ZH_ACK = re.compile(
    r"^[\s，。！、,.!]*(?:(?:好的?|好吧|行|可以|嗯+|对|是的?|谢谢|多谢|继续|没问题|收到|明白|了解|知道了)[\s，。！、,.!]*)+$"
)
_ZH_PAST = re.compile(r"[了过]\W*$|刚|已经")
"""Chinese told as done: a closing 了/过, 刚 (just now), 已经 (already)."""
_HAN = re.compile(r"[\u3400-\u9fff]")
_EN_WORD = re.compile(r"[A-Za-z][\w'’-]*")


@functools.lru_cache(maxsize=8192)
def states(unit: str) -> bool:
    """Whether a sentence of the user's states how something is (or is to be), rather than
    asking, acknowledging, reacting to the work, or telling what happened.

    In a working session a short declarative sentence from the user ("Pagination stays
    cursor-based.", "Ingrid decides on anything UI.", "We ship weekly, on Tuesdays.")
    is far more often a standing instruction than a story: the user steers; the
    narrating is the assistant's. Not a rule by itself (half the user's sentences in
    the recorded sessions state something), but what a summary keeps of the user's
    words before anything else, whatever its phrasing. Only for the user's own text.
    """
    u = unit.strip()
    if not 6 <= len(u) <= STATEMENT_MAX_CHARS or is_question(u) or _CODE.search(u) or _NARRATION.search(u):
        return False
    if not u.isascii() and _HAN.search(u):
        if _ZH_ACK.match(u) or _ZH_PAST.search(u):
            return False
        return len(_HAN.findall(u)) >= 5
    if _ACK.match(u) or _REACTION.match(u) or _OPINION.match(u) or _REPORT.match(u):
        return False
    return len(_EN_WORD.findall(u)) >= 3


def is_question(unit: str) -> bool:
    """Whether a sentence asks rather than tells."""
    return _QUESTION.search(unit) is not None


def imperative(unit: str) -> bool:
    """Whether a sentence opens with an instruction verb (after list marks and softeners)."""
    return _IMPERATIVE.match(unit) is not None


_ORDER_GATES = ("only", "until", "till", "unless", "wait", "not ", "after", "once", "first", "soon", "when", "before")
"""Substrings one of which every `_ORDER` branch needs: checked first, since plain `in` tests
cost far less than the pattern (most sentences have none)."""
_NUMERIC = re.compile(
    r"[\d$€£]|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|couple|few)\b", re.I
)


@functools.lru_cache(maxsize=8192)
def function_binds(unit: str) -> bool:
    """Whether a sentence binds by what it does (see the module docstring), whatever its words."""
    if is_question(unit) or _CODE.search(unit) or _NARRATION.search(unit):
        return False
    low = unit.lower()
    if _FREEZE.search(unit) or _NAMED.search(unit) or (not unit.isascii() and _ZH_FUNCTION.search(unit)):
        return True
    if any(gate in low for gate in _ORDER_GATES) and _ORDER.search(unit):
        return True
    if _NO_X.match(unit) and (_SCOPE.search(unit) or not unit.lstrip().startswith(("-", "*", "•"))):
        return True
    if _STANDING.search(unit) or _PREFERENCE.search(unit) or (" not " in low and _CONTRAST.search(unit)):
        return True
    if _NUMERIC.search(unit) and _QUANTITY.search(unit) and _BOUNDING.search(unit):
        return True
    if _IMPERATIVE.match(unit) and not _OPINION.match(unit):
        if _PERSISTING.match(unit) or _SCOPE.search(unit):
            return True
        return bool(_CONVENTION.match(unit) and _FACT_LIKE.search(unit))
    return False


def weak_binds(unit: str, trigger: str) -> bool:
    """Whether a broad trigger (`WEAK_TRIGGERS`) found in a sentence makes it a rule."""
    if is_question(unit) or _OPINION.match(unit):
        return False
    if trigger.isupper() and len(trigger) > 3:
        return True  # shouted: "ALWAYS", "EXACTLY", "IMPORTANT"
    if _DIRECTIVE.search(unit) or _IMPERATIVE.match(unit) or _TOLD.search(unit):
        return True
    lead = re.match(rf"{_LEAD}(?:\*\*)?", unit, re.IGNORECASE)
    start = lead.end() if lead else 0
    return unit[start : start + len(trigger)].lower() == trigger.lower()
