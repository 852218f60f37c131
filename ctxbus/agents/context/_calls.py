"""Tool calls of an assistant turn: taking them in, counting them, the legacy form, and
the ids and names they go out under.

A turn may make several calls. Each is kept whole (id, name, the argument string as the
model wrote it) so that the renderings for a provider give it back exactly; before
`tool_calls` existed, a turn's calls were one comma-joined `tool_name`/`call_id` pair with
no arguments, and that form still loads and is still accepted.

A call goes out under its own id and name where the provider accepts them. Where it
does not (Anthropic ids are `[A-Za-z0-9_-]`, OpenAI's at most 40 characters, names
`[A-Za-z0-9_-]{1,64}` for both), it goes out under one the provider does accept, mapped
the same way every time, with a digest of the original so two never meet.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from pydantic import ValidationError

from ctxbus.agents.context._errors import InvalidMessage
from ctxbus.schemas import ToolCall, describe_validation_error

__all__ = [
    "ANTHROPIC_ID",
    "CALL_OVERHEAD",
    "Call",
    "EMPTY_ARGUMENTS",
    "OPENAI_ID_MAX",
    "TOOL_NAME",
    "anthropic_id",
    "calls_text",
    "calls_tokens",
    "coerce_calls",
    "legacy_calls",
    "openai_id",
    "skeleton_tokens",
    "wire_name",
]

CALL_OVERHEAD: Final = 4
"""Tokens a chat API adds around one call besides its id, name and arguments (the type
and key names, the JSON punctuation), like `message_overhead` for a message."""
EMPTY_ARGUMENTS: Final = "{}"
"""The arguments a rendering shows for a call whose arguments are not known (the legacy
form) or were dropped with its tag."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Tool names both providers accept."""
ANTHROPIC_ID: Final = re.compile(r"[A-Za-z0-9_-]+")
"""Tool use ids the Messages API accepts."""
OPENAI_ID_MAX: Final = 40
"""Longest tool call id Chat Completions accepts."""
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_DIGEST = 8
"""Hex digits of the digest a mapped id or name ends with."""


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_DIGEST // 2).hexdigest()


def wire_name(name: str) -> str:
    """`name` if both providers accept it, else its letters, digits, `_` and `-`, runs of
    anything else as `_`, with a digest of the original: ``Update Todos`` becomes
    ``Update_Todos_<digest>``."""
    if TOOL_NAME.fullmatch(name):
        return name
    base = _NOT_NAME.sub("_", name).strip("_")[: 64 - _DIGEST - 1]
    return f"{base}_{_digest(name)}" if base else f"tool_{_digest(name)}"


def openai_id(key: str) -> str:
    """`key` if it fits Chat Completions' length limit, else its head and a digest."""
    if len(key) <= OPENAI_ID_MAX:
        return key
    return f"{key[: OPENAI_ID_MAX - _DIGEST - 1]}_{_digest(key)}"


def anthropic_id(key: str) -> str:
    """`key` if the Messages API accepts it as a tool use id, else the accepted part with
    a digest of the original."""
    if ANTHROPIC_ID.fullmatch(key):
        return key
    return f"{_NOT_NAME.sub('_', key).strip('_') or 'call'}_{_digest(key)}"


class Call(NamedTuple):
    """One call as the engine keeps it: `ToolCall`'s fields, validated when they came in.

    A tuple rather than the model: ingest is the hot path, and the model is built only
    where a call leaves the engine (`to_tool_call`).
    """

    id: str
    name: str
    arguments: str

    def to_tool_call(self) -> ToolCall:
        """The public model of this call."""
        return ToolCall.model_construct(id=self.id, name=self.name, arguments=self.arguments)


def coerce_calls(value: object) -> tuple[Call, ...]:
    """The calls of `LocalContext.add(tool_calls=...)`, checked.

    Each item is a `ToolCall` or a mapping in one of the shapes a host has at hand:
    ``{"id", "name", "arguments"}``, an OpenAI tool call ``{"id", "type": "function",
    "function": {"name", "arguments"}}`` (``model_dump()`` of the SDK's), or an
    Anthropic ``tool_use`` block ``{"id", "name", "input": {...}}``. Arguments given as
    an object are stored as its JSON text. Undecodable characters in the arguments
    become U+FFFD, as in message content.

    :raises InvalidMessage: naming the item and what is wrong with it.
    """
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidMessage(
            f"tool_calls must be a list of calls, got {type(value).__name__} {value!r:.60}; "
            'e.g. [{"id": "call_1", "name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}]'
        )
    checked = [_one(item, index) for index, item in enumerate(value)]
    calls = tuple(Call(call.id, call.name, call.arguments) for call in checked)
    seen: set[str] = set()
    for call in calls:
        if call.id and call.id in seen:
            raise InvalidMessage(f"tool_calls gives call id {call.id!r} twice; each call of a turn needs its own id")
        seen.add(call.id)
    return calls


def _one(item: object, index: int) -> ToolCall:
    if isinstance(item, ToolCall):
        return _checked(item, index)
    if not isinstance(item, Mapping):
        raise InvalidMessage(f"tool_calls[{index}] is a {type(item).__name__}; expected a ToolCall or a mapping")
    fields = dict(item)
    function = fields.pop("function", None)
    if isinstance(function, Mapping):  # OpenAI's shape
        if fields.pop("type", "function") != "function":
            raise InvalidMessage(f"tool_calls[{index}] is not a function call: {item!r:.80}")
        # What a provider adds beside the call (a streaming `index`, say) is not the call.
        fields = {"id": fields.get("id"), "name": function.get("name"), "arguments": function.get("arguments")}
    elif function is not None:
        raise InvalidMessage(f"tool_calls[{index}].function must be a mapping, got {function!r:.60}")
    if "input" in fields:  # Anthropic's tool_use block
        if fields.pop("type", "tool_use") != "tool_use" or "arguments" in fields:
            raise InvalidMessage(f"tool_calls[{index}] mixes shapes: {item!r:.80}")
        fields = {"id": fields.get("id"), "name": fields.get("name"), "arguments": fields["input"]}
    arguments = fields.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        try:
            fields["arguments"] = json.dumps(arguments, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"tool_calls[{index}].arguments cannot be written as JSON: {exc}") from None
    if fields.get("id") is None:
        fields["id"] = ""
    try:
        call = ToolCall.model_validate(fields)
    except ValidationError as exc:
        raise InvalidMessage(f"tool_calls[{index}]: {describe_validation_error(exc)}") from None
    return _checked(call, index)


def _checked(call: ToolCall, index: int) -> ToolCall:
    for name, ident in (("id", call.id), ("name", call.name)):
        if not ident.isascii() and _SURROGATE.search(ident):
            raise InvalidMessage(
                f"tool_calls[{index}].{name} has an undecodable character (bytes that are not UTF-8, "
                "decoded with 'surrogateescape'); decode it with errors='replace'"
            )
    if not call.arguments.isascii() and _SURROGATE.search(call.arguments):
        return call.model_copy(update={"arguments": _SURROGATE.sub("\ufffd", call.arguments)})
    return call


def legacy_calls(tool_name: str | None, call_id: str | None) -> tuple[Call, ...]:
    """The calls an assistant message recorded with `tool_name`/`call_id` alone makes.

    One call, or several when the id is comma-joined (the transcripts' form, and what
    stores written before `tool_calls` hold); a comma-joined name with as many parts
    names each call, any other name is every call's. The arguments were never recorded:
    they are `EMPTY_ARGUMENTS`. No name means no call (a turn marked `tool_call` by its
    kind alone).
    """
    if not tool_name:
        return ()
    if "," not in tool_name and (not call_id or "," not in call_id):  # one call: the common case
        return (Call((call_id or "").strip(), tool_name, EMPTY_ARGUMENTS),)
    ids = [part.strip() for part in call_id.split(",")] if call_id else [""]
    ids = [i for i in ids if i] or [""]
    names = [part.strip() for part in tool_name.split(",")]
    if len(names) != len(ids) or not all(names):
        names = [tool_name] * len(ids)
    return tuple(Call(i, n, EMPTY_ARGUMENTS) for i, n in zip(ids, names, strict=True))


def calls_text(calls: Iterable[Call], keys: Iterable[str], *, dropped: bool = False) -> str:
    """The calls as one text to count, each as it goes out: id (its `key`, and the forms
    a provider that refuses it gets), name (likewise) and arguments (`EMPTY_ARGUMENTS`
    once dropped). Counted in one go with the message's content: one tokenizer call per
    message, as for any other. Each part starts with a space, where the pre-tokenizer
    splits anyway; `CALL_OVERHEAD` covers the rest of what a call costs."""
    text = ""
    for call, key in zip(calls, keys, strict=True):
        if len(key) > OPENAI_ID_MAX or not ANTHROPIC_ID.fullmatch(key):
            key = " ".join(sorted({key, openai_id(key), anthropic_id(key)}))
        name = call.name if _accepted_name(call.name) else f"{call.name} {wire_name(call.name)}"
        text += f" {key} {name} {EMPTY_ARGUMENTS if dropped else call.arguments}"
    return text


@functools.lru_cache(maxsize=1024)
def _accepted_name(name: str) -> bool:
    """Whether both providers take `name` as it is (names repeat: the answer is kept)."""
    return TOOL_NAME.fullmatch(name) is not None


def calls_tokens(count: Callable[[str], int], calls: Sequence[Call], keys: Iterable[str]) -> int:
    """What the calls cost apart from their message's content (see `calls_text`)."""
    return count(calls_text(calls, keys)) + CALL_OVERHEAD * len(calls) if calls else 0


def skeleton_tokens(count: Callable[[str], int], calls: Sequence[Call], keys: Iterable[str]) -> int:
    """What the calls cost once dropped: shown with `EMPTY_ARGUMENTS`."""
    return count(calls_text(calls, keys, dropped=True)) + CALL_OVERHEAD * len(calls) if calls else 0
