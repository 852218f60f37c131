"""Tool arguments, checked inside the tool body so a bad one is answered like any failure.

The MCP SDK checks arguments against the parameter types before the body runs, and
answers a mismatch with pydantic's multi-line dump: no `§N§` tag, nothing recorded in
the agent's context. So each tool parameter carries `AS_SENT`, which lets any value
through the SDK, and `schema`, the JSON schema clients see; the body checks the value
here: a bad one is a `BadArgument`, one sentence naming the argument, what it takes
and what was sent.

Parameters that take a string stay annotated `str`, although `AS_SENT` lets anything
through: the SDK JSON-decodes string arguments of every other type first (`str | None`
included), which would turn a search for "null" into None. An optional one therefore
defaults to None under a plain `str`. The others are annotated `Any`.

Checks are strict where lax parsing would misread: `true` is not tag 1, `1.5` is not
a line number.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import PlainValidator, WithJsonSchema

from ctxbus.schemas import UsageError

__all__ = [
    "AS_SENT",
    "BadArgument",
    "choice",
    "integer",
    "optional_integer",
    "optional_text",
    "schema",
    "shown",
    "tag",
    "text",
]

_SHOWN_MAX = 60
"""Characters of an offending value quoted back."""


def _as_sent(value: object) -> object:
    return value


AS_SENT = PlainValidator(_as_sent)
"""Lets a tool argument through the SDK as the client sent it, for the body to check."""


class BadArgument(UsageError):
    """Raised when a tool argument has the wrong type or is out of range."""

    def __init__(self, name: str, wanted: str, value: object) -> None:
        self.name = name
        self.value = value
        super().__init__(f"argument {name!r} must be {wanted}, got {shown(value)}")


def schema(json_schema: dict[str, Any], *, optional: bool = False) -> WithJsonSchema:
    """The JSON schema clients see for an `Any` parameter (`null` allowed if `optional`)."""
    return WithJsonSchema({"anyOf": [json_schema, {"type": "null"}]} if optional else json_schema)


def text(name: str, value: object, *, max_length: int) -> str:
    """A string of 1 to `max_length` characters.

    :raises BadArgument: for anything else.
    """
    if not isinstance(value, str) or not 1 <= len(value) <= max_length:
        raise BadArgument(name, f"a string of 1 to {max_length:,} characters", value)
    return value


def optional_text(name: str, value: object, *, max_length: int) -> str | None:
    """`text`, or None when not given.

    :raises BadArgument: for anything else.
    """
    return None if value is None else text(name, value, max_length=max_length)


def integer(name: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    """A whole number in range (a boolean is not one).

    :raises BadArgument: for anything else.
    """
    wanted = f"a whole number from {minimum} to {maximum}" if maximum is not None else f"a whole number >= {minimum}"
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadArgument(name, wanted, value)
    if value < minimum or (maximum is not None and value > maximum):
        raise BadArgument(name, wanted, value)
    return value


def optional_integer(name: str, value: object, *, minimum: int, maximum: int | None = None) -> int | None:
    """`integer`, or None when not given.

    :raises BadArgument: for anything else.
    """
    return None if value is None else integer(name, value, minimum=minimum, maximum=maximum)


def choice(name: str, value: object, choices: Sequence[str]) -> str:
    """One of `choices`.

    :raises BadArgument: for anything else.
    """
    if not isinstance(value, str) or value not in choices:
        raise BadArgument(name, " or ".join(json.dumps(c) for c in choices), value)
    return value


def tag(name: str, value: object) -> int | str:
    """A message tag: a whole number such as 12, or a string such as '§12§' or a message id.

    :raises BadArgument: for anything else, `true` and `1.5` included.
    """
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadArgument(name, 'a tag: a whole number such as 12, or a string such as "§12§"', value)


def shown(value: object) -> str:
    """`value` as the client sent it (JSON), cut to a readable length."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= _SHOWN_MAX else f"{shown[: _SHOWN_MAX - 1]}…"
