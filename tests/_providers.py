"""What the model providers accept, checked the way they check it.

Two layers, both needed: the official SDKs' own request types (`openai`, `anthropic`),
which say what each message and block may hold, and the rules the APIs enforce across
messages, which no type can say: a tool message must answer a call of the assistant
message right before it, every call must be answered before anything else is said, a
Messages API conversation alternates from a user turn, and so on. The refusals quote
the APIs' own error messages, so a failing test reads like the 400 a user would get.

The SDK types are TypedDicts: pydantic validates them, but ignores keys they do not
declare and checks `Iterable` fields only when iterated, so `SdkTypes` iterates every
one and compares what it validated with what it was given: a key the SDK does not know
fails too. Each distinct (shared, read-only) object is validated once per instance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anthropic.types as anthropic_types
import openai.types.chat as openai_types
from pydantic import TypeAdapter, ValidationError

__all__ = ["Refused", "SdkTypes", "check_anthropic", "check_openai", "check_openai_layout", "checked_renderings"]

_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_OPENAI_ID_MAX = 40


class Refused(AssertionError):
    """What the provider would answer with a 400: the request breaks one of its rules."""


# -- the SDKs' types --------------------------------------------------------------------

_OPENAI_ROLES: dict[str, Any] = {
    "system": openai_types.ChatCompletionSystemMessageParam,
    "developer": openai_types.ChatCompletionDeveloperMessageParam,
    "user": openai_types.ChatCompletionUserMessageParam,
    "assistant": openai_types.ChatCompletionAssistantMessageParam,
    "tool": openai_types.ChatCompletionToolMessageParam,
}
_ANTHROPIC_BLOCKS: dict[str, Any] = {
    "text": anthropic_types.TextBlockParam,
    "tool_use": anthropic_types.ToolUseBlockParam,
    "tool_result": anthropic_types.ToolResultBlockParam,
}
_ANTHROPIC_ROLES = ("user", "assistant")


def _same(checked: Any, given: Any) -> bool:
    """Whether pydantic's output `checked` is `given`: the same keys at every level (it
    drops the ones a TypedDict does not declare) and the same values, iterating its lazy
    `Iterable` validators, which validates their items."""
    if isinstance(given, Mapping):
        return (
            isinstance(checked, Mapping)
            and checked.keys() == given.keys()
            and all(_same(checked[key], item) for key, item in given.items())
        )
    if isinstance(given, str | bytes | int | float | bool) or given is None:
        return bool(checked == given)
    if isinstance(given, Iterable):
        items = list(checked)
        given = list(given)
        return len(items) == len(given) and all(map(_same, items, given))
    return bool(checked == given)


class SdkTypes:
    """Validates messages against the SDKs' request types, each distinct object once."""

    def __init__(self) -> None:
        self._adapters: dict[Any, TypeAdapter[Any]] = {}
        self._seen: dict[int, object] = {}
        """Objects already validated, by id; kept, so no id is reused meanwhile."""
        self.validated = 0
        """Distinct objects validated so far."""

    def _check(self, kind: Any, value: object, where: str) -> None:
        if self._seen.get(id(value)) is value:
            return
        adapter = self._adapters.get(kind)
        if adapter is None:
            adapter = self._adapters[kind] = TypeAdapter(kind)
        try:
            same = _same(adapter.validate_python(value), value)
        except ValidationError as exc:
            raise Refused(f"{where}: not a valid {getattr(kind, '__name__', kind)}: {exc}") from None
        if not same:
            raise Refused(
                f"{where}: the SDK's {getattr(kind, '__name__', kind)} has no place for some of {value!r:.300}"
            )
        self._seen[id(value)] = value
        self.validated += 1

    def openai(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Each message as its role's `ChatCompletion*MessageParam`."""
        for index, message in enumerate(messages):
            kind = _OPENAI_ROLES.get(str(message.get("role")))
            if kind is None:
                raise Refused(f"Invalid value: {message.get('role')!r}. Supported values are: {sorted(_OPENAI_ROLES)}")
            self._check(kind, message, f"messages[{index}]")

    def anthropic(self, request: Mapping[str, Any]) -> None:
        """`system` and each message and content block as the Messages API's params."""
        self._check(str | Iterable[anthropic_types.TextBlockParam], request["system"], "system")
        for index, message in enumerate(request["messages"]):
            if message.get("role") not in _ANTHROPIC_ROLES or set(message) != {"role", "content"}:
                raise Refused(f"messages.{index}: a message is {{role: user|assistant, content}}, got {message!r:.200}")
            content = message["content"]
            if isinstance(content, str):
                continue
            for at, block in enumerate(content):
                kind = _ANTHROPIC_BLOCKS.get(str(block.get("type")))
                if kind is None:
                    raise Refused(f"messages.{index}.content.{at}: unexpected block type {block.get('type')!r}")
                self._check(kind, block, f"messages.{index}.content.{at}")


# -- Chat Completions --------------------------------------------------------------------


def check_openai_layout(messages: Sequence[Mapping[str, Any]]) -> None:
    """What ctxbus promises on top of the API's rules: exactly one system message, first,
    and a user message next (user-first servers and templates refuse anything else)."""
    roles = [m["role"] for m in messages]
    if not roles or roles[0] != "system" or roles.count("system") != 1:
        raise Refused(f"expected exactly one system message, first; roles are {roles[:8]}")
    if len(roles) > 1 and roles[1] != "user":
        raise Refused(f"the first message after the system message must be a user message, not {roles[1]!r}")


def check_openai(messages: Sequence[Mapping[str, Any]]) -> None:
    """The rules Chat Completions enforces across messages.

    :raises Refused: with the API's message, for the first rule broken.
    """
    if not messages:
        raise Refused("[] is too short - 'messages'")
    waiting: dict[str, bool] = {}  # call ids of the turn being answered -> answered yet
    answering = False  # inside the run of tool messages right after a turn with calls
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            if not answering:
                raise Refused(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'."
                )
            call_id = message["tool_call_id"]
            if call_id not in waiting:
                raise Refused(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message."
                )
            if waiting[call_id]:
                raise Refused(f"messages[{index}]: tool_call_id '{call_id}' is answered twice")
            waiting[call_id] = True
            continue
        _all_answered(waiting)
        waiting, answering = {}, False
        if role == "assistant":
            calls = message.get("tool_calls") or ()
            if not calls and message.get("content") is None:
                raise Refused(f"Invalid value for 'content': expected a string, got null. (messages[{index}])")
            for at, call in enumerate(calls):
                where = f"messages[{index}].tool_calls[{at}]"
                name = call["function"]["name"]
                if not _FUNCTION_NAME.match(name):
                    raise Refused(
                        f"Invalid '{where}.function.name': string does not match pattern. Expected a string "
                        f"that matches the pattern '{_FUNCTION_NAME.pattern}'."
                    )
                if len(call["id"]) > _OPENAI_ID_MAX:
                    raise Refused(
                        f"Invalid '{where}.id': string too long. Expected a string with maximum length "
                        f"{_OPENAI_ID_MAX}, but got a string with length {len(call['id'])} instead."
                    )
                if call["id"] in waiting:
                    raise Refused(f"Invalid '{where}.id': duplicate tool call id '{call['id']}'")
                waiting[call["id"]] = False
            answering = bool(calls)
    _all_answered(waiting)


def _all_answered(waiting: Mapping[str, bool]) -> None:
    missing = [call_id for call_id, answered in waiting.items() if not answered]
    if missing:
        raise Refused(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}"
        )


# -- Anthropic Messages -----------------------------------------------------------------


def check_anthropic(request: Mapping[str, Any], *, prefill: bool = False) -> None:
    """The rules the Messages API enforces across messages and blocks.

    :param prefill: accept a last assistant turn (a prefill, which not every model takes).
    :raises Refused: with the API's message, for the first rule broken.
    """
    system = request["system"]
    if isinstance(system, str) and not system.strip():
        raise Refused("system: text content blocks must contain non-whitespace text")
    messages = request["messages"]
    if not messages:
        raise Refused("messages: at least one message is required")
    if messages[0]["role"] != "user":
        raise Refused('messages: first message must use the "user" role')
    seen_ids: set[str] = set()
    previous_uses: list[str] = []
    for index, message in enumerate(messages):
        role = message["role"]
        if index and messages[index - 1]["role"] == role:
            raise Refused(
                f'messages: roles must alternate between "user" and "assistant", but found multiple "{role}" '
                "roles in a row"
            )
        blocks = message["content"]
        if isinstance(blocks, str):
            blocks = [{"type": "text", "text": blocks}]
        if not blocks:
            raise Refused(f"messages.{index}: all messages must have non-empty content")
        uses: list[str] = []
        results: list[str] = []
        for at, block in enumerate(blocks):
            where = f"messages.{index}.content.{at}"
            kind = block["type"]
            if kind == "text":
                if not block["text"].strip():
                    raise Refused(f"{where}.text: text content blocks must contain non-whitespace text")
            elif kind == "tool_use":
                if role != "assistant":
                    raise Refused(f"{where}: tool_use blocks may only appear in assistant messages")
                if not _TOOL_USE_ID.match(block["id"]):
                    raise Refused(f"{where}.tool_use.id: String should match pattern '{_TOOL_USE_ID.pattern}'")
                if not _FUNCTION_NAME.match(block["name"]):
                    raise Refused(f"{where}.tool_use.name: String should match pattern '{_FUNCTION_NAME.pattern}'")
                if not isinstance(block["input"], dict):
                    raise Refused(f"{where}.tool_use.input: Input should be a valid dictionary")
                if block["id"] in seen_ids:
                    raise Refused(f"messages.{index}: `tool_use` ids must be unique, found {block['id']} again")
                seen_ids.add(block["id"])
                uses.append(block["id"])
            elif kind == "tool_result":
                if role != "user":
                    raise Refused(f"{where}: tool_result blocks may only appear in user messages")
                if at != len(results):
                    raise Refused(
                        f"messages.{index}: Did not find {len(previous_uses)} tool_result block(s) at the beginning "
                        "of this message. Messages following tool_use blocks must begin with a matching number of "
                        "tool_result blocks."
                    )
                if block["tool_use_id"] not in previous_uses:
                    raise Refused(
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {block['tool_use_id']}. "
                        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )
                if block["tool_use_id"] in results:
                    raise Refused(f"{where}: `tool_use` {block['tool_use_id']} has more than one `tool_result`")
                results.append(block["tool_use_id"])
                content = block.get("content", "")
                if isinstance(content, str) and content and not content.strip():
                    raise Refused(f"{where}.content: text content blocks must contain non-whitespace text")
        unanswered = [use for use in previous_uses if use not in results]
        if unanswered:
            raise Refused(
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(unanswered)}. Each `tool_use` block must have a corresponding `tool_result` block in "
                "the next message."
            )
        previous_uses = uses
    last = messages[-1]
    if previous_uses:
        raise Refused(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks immediately "
            f"after: {', '.join(previous_uses)}"
        )
    if last["role"] == "assistant":
        if not prefill:
            raise Refused("the last message is an assistant turn: a prefill, which this model does not take")
        tail = last["content"] if isinstance(last["content"], str) else last["content"][-1].get("text", "x")
        if tail != tail.rstrip():
            raise Refused("messages: final assistant content cannot end with trailing whitespace")


def checked_renderings(composition: Any, *, prefill: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Both renderings of a `Composition`, each checked against its SDK's types and its
    API's rules; returned for the caller to look into."""
    openai, anthropic = composition.to_openai(), composition.to_anthropic()
    check_openai_layout(openai)
    check_openai(openai)
    SdkTypes().openai(openai)
    check_anthropic(anthropic, prefill=prefill)
    SdkTypes().anthropic(anthropic)
    return openai, anthropic
