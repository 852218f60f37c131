"""A composed prompt as the providers take it: Chat Completions messages, or the system
and messages of an Anthropic Messages request.

Both renderings follow one walk over the rolling layer, which pairs calls with results
the way both APIs insist on:

- consecutive assistant messages are one turn, its calls in order (a host that recorded
  parallel calls one message each gets them back as the one turn they were);
- each call's result comes right after that turn (pulled forward, should another
  message have come between), and a call with no result yet gets a stand-in result
  (`STANDIN_RESULT`, counted in the budget like any message);
- a tool result that answers no call shown (a host's console output, a result whose
  id no call had) goes out as user text, and so does a system-role message of the
  rolling layer: there is one system message, the first.

Nothing is invented beyond that: a call keeps its id where the provider accepts it,
its name, and its arguments byte for byte. Where a provider does not accept the id or
name (Anthropic ids are `[A-Za-z0-9_-]`, OpenAI's at most 40 characters, names
`[A-Za-z0-9_-]{1,64}` for both) it is mapped to one that it does, the same way every
time, with a digest of the original so two never meet. Every dict handed out is shared
by later composes and is read-only, like `Composition.messages`; copy to change one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ctxbus.agents.context._calls import anthropic_id, openai_id, wire_name
from ctxbus.agents.context._records import ChatMessage, ReadOnly, Shown

__all__ = ["CACHE_BREAKPOINTS", "STANDIN_RESULT", "Frozen", "Prompt", "to_anthropic", "to_openai", "tool_input"]

T = TypeVar("T")

STANDIN_RESULT: Final = "[no result was recorded for this call]"
"""The result a rendering shows for a call that has none yet (a turn cut short)."""


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object Anthropic's `tool_use.input` must be: the JSON
    object they are (none for blank arguments), or ``{"arguments": <the text>}`` when they
    are not one (a model can write arguments that do not parse; the call still happened)."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": arguments}


class Frozen(ReadOnly, dict[str, Any]):  # type: ignore[misc]
    """A rendered message or block: shared by composes, so read-only; `dict(x)` copies it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Prompt:
    """Everything a rendering needs of one compose, fixed when it was composed."""

    system: str
    """The one system message: the host's prompt, or the mode's template."""
    head: str | None
    """The user message after it: the pinned block, summary and brief (or the opening
    line, when the prompt would not start with a user message otherwise); None if empty."""
    rolling: Sequence[Shown]
    """The tail: the rolling layer, with the pins newer than its start at their places."""
    user_input: str
    """The new user input, last; may be empty."""
    stable: int = 0
    """How many messages of `rolling`, from its start, the previous compose showed too
    (0 after a rebuild): the end of the prefix a provider's cache holds from that call."""


# -- the walk ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Turn:
    group: Sequence[Shown]
    """Consecutive assistant messages: one turn."""


@dataclass(frozen=True, slots=True)
class _Result:
    key: str
    result: Shown | None
    """None: the call has no result shown; a stand-in goes out."""


@dataclass(frozen=True, slots=True)
class _Said:
    message: Shown
    """A message that goes out as user text."""


def _walk(rolling: Sequence[Shown]) -> Iterator[_Turn | _Result | _Said]:
    calls = {key for shown in rolling for key, _, _ in shown.calls}
    answers = {s.answers: s for s in rolling if s.answers is not None and s.answers in calls}
    early: set[int] = set()
    i, n = 0, len(rolling)
    while i < n:
        shown = rolling[i]
        if shown.role != "assistant":
            if shown.tag not in early:
                yield _Said(shown)
            i += 1
            continue
        j = i + 1
        while j < n and rolling[j].role == "assistant":
            j += 1
        group = rolling[i:j]
        yield _Turn(group)
        for member in group:
            for key, _, _ in member.calls:
                result = answers.get(key)
                if result is not None:
                    early.add(result.tag)
                yield _Result(key, result)
        i = j


def _form(shown: Shown, name: str, build: Callable[[Shown], T]) -> T:
    """`build(shown)`, made the first time and kept on `shown` (its text never changes)."""
    form: T | None = shown.wire.get(name)
    if form is None:
        form = shown.wire[name] = build(shown)
    return form


# -- Chat Completions ----------------------------------------------------------------------

_OPENAI = "openai"
_OPENAI_SAID = "openai:user"
"""Cache keys in `Shown.wire`: a tool result has both forms, paired and said."""


def to_openai(prompt: Prompt) -> list[dict[str, Any]]:
    """Chat Completions messages: one system message, then a user message, calls paired."""
    out: list[dict[str, Any]] = [ChatMessage({"role": "system", "content": prompt.system})]
    if prompt.head is not None:
        out.append(ChatMessage({"role": "user", "content": prompt.head}))
    for step in _walk(prompt.rolling):
        if isinstance(step, _Turn):
            out.append(_openai_turn(step.group))
        elif isinstance(step, _Result):
            out.append(_openai_result(step))
        else:
            out.append(_openai_said(step.message))
    if prompt.user_input:
        out.append(ChatMessage({"role": "user", "content": prompt.user_input}))
    return out


def _openai_turn(group: Sequence[Shown]) -> dict[str, Any]:
    if len(group) > 1:
        return _openai_assistant(group)
    only = group[0]
    return _form(only, _OPENAI, lambda shown: _openai_assistant(group) if shown.calls else shown.chat)


def _openai_assistant(group: Sequence[Shown]) -> dict[str, Any]:
    calls = tuple(
        Frozen(
            id=openai_id(key),
            type="function",
            function=Frozen(name=wire_name(name), arguments=arguments),
        )
        for member in group
        for key, name, arguments in member.calls
    )
    message = Frozen(role="assistant", content="\n\n".join(member.text for member in group))
    return Frozen(message, tool_calls=calls) if calls else message


def _openai_result(step: _Result) -> dict[str, Any]:
    def tool(text: str) -> dict[str, Any]:
        return Frozen(role="tool", tool_call_id=openai_id(step.key), content=text)

    return tool(STANDIN_RESULT) if step.result is None else _form(step.result, _OPENAI, lambda r: tool(r.text))


def _openai_said(message: Shown) -> dict[str, Any]:
    if message.role == "user":
        return message.chat
    return _form(message, _OPENAI_SAID, lambda shown: ChatMessage({"role": "user", "content": shown.text}))


# -- Anthropic Messages --------------------------------------------------------------------

_ANTHROPIC = "anthropic"
_ANTHROPIC_SAID = "anthropic:user"


_EPHEMERAL = Frozen(type="ephemeral")
CACHE_BREAKPOINTS: Final = 4
"""Most `cache_control` breakpoints the Messages API takes in one request."""


def to_anthropic(prompt: Prompt, *, cache: bool = False) -> dict[str, Any]:
    """``{"system": ..., "messages": [...]}``: turns alternating from a user turn, each
    call's `tool_use` answered by a `tool_result` first thing in the next user turn.

    With `cache`, `cache_control` breakpoints (three at most) mark the end of the head
    (system and head message: what changes least), the end of the part the previous
    compose showed too (which this call reads from the cache), and the end of the prompt
    (which it writes for the next call)."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    marks: list[tuple[int, int]] = []
    """(turn, block) positions to mark."""
    last_stable = prompt.rolling[prompt.stable - 1] if cache and prompt.stable else None

    def mark() -> None:
        if cache:
            marks.append((len(turns) - 1, len(turns[-1][1]) - 1))

    def put(role: str, blocks: Sequence[dict[str, Any]]) -> None:
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, list(blocks)))

    if prompt.head is not None:
        put("user", [_text(prompt.head)])
        mark()
    for step in _walk(prompt.rolling):
        if isinstance(step, _Turn):
            put("assistant", [block for member in step.group for block in _anthropic_blocks(member)])
            shown = step.group
        elif isinstance(step, _Result):
            put("user", [_anthropic_result(step)])
            shown = (step.result,) if step.result is not None else ()
        else:
            put("user", [_anthropic_text(step.message)])
            shown = (step.message,)
        if last_stable is not None and any(member is last_stable for member in shown):
            mark()
    if prompt.user_input:
        put("user", [_text(prompt.user_input)])
    if turns and turns[-1][0] == "assistant":
        _strip_last(turns[-1][1])
    if turns:
        mark()
    for turn, index in sorted(set(marks))[-(CACHE_BREAKPOINTS - 1) :]:
        blocks = turns[turn][1]
        blocks[index] = Frozen(blocks[index], cache_control=_EPHEMERAL)
    messages = [Frozen(role=role, content=tuple(blocks)) for role, blocks in turns]
    return {"system": prompt.system, "messages": messages}


def _text(text: str) -> dict[str, Any]:
    return Frozen(type="text", text=text)


def _anthropic_blocks(member: Shown) -> tuple[dict[str, Any], ...]:
    def build(shown: Shown) -> tuple[dict[str, Any], ...]:
        uses = (
            Frozen(type="tool_use", id=anthropic_id(key), name=wire_name(name), input=tool_input(arguments))
            for key, name, arguments in shown.calls
        )
        return (_text(shown.text), *uses)

    return _form(member, _ANTHROPIC, build)


def _anthropic_result(step: _Result) -> dict[str, Any]:
    def result(text: str) -> dict[str, Any]:
        return Frozen(type="tool_result", tool_use_id=anthropic_id(step.key), content=text)

    return result(STANDIN_RESULT) if step.result is None else _form(step.result, _ANTHROPIC, lambda r: result(r.text))


def _anthropic_text(message: Shown) -> dict[str, Any]:
    return _form(message, _ANTHROPIC_SAID, lambda shown: _text(shown.text))


def _strip_last(blocks: list[dict[str, Any]]) -> None:
    """A request ending with an assistant turn asks the model to continue it, and the API
    refuses one that ends in whitespace (a call with no text shows `§N§ `)."""
    last = blocks[-1]
    if last.get("type") == "text" and last["text"] != last["text"].rstrip():
        blocks[-1] = _text(last["text"].rstrip())
