"""The tools a loop offers its model: each a typed Python function, declared by its signature.

A tool's JSON schema comes from its signature through pydantic (a model of its
parameters, `Annotated` metadata and `Field`s included), its description from its
docstring. A call is validated by the same model before the function runs, so whatever
the model sends, the function only ever sees arguments of the types it declares. Whatever
goes wrong with a call (arguments that are not JSON, a missing or mistyped argument, an
unknown tool, a tool that raises) becomes the call's result, one sentence saying what
was wrong: the model reads it and the loop goes on.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ctxbus.agents.tools import BuiltinTools, shown
from ctxbus.schemas import CtxbusError, UsageError, describe_validation_error

__all__ = ["LOOP_BUILTINS", "Tool", "Toolbox", "ToolError"]

log = logging.getLogger(__name__)

LOOP_BUILTINS: Final = ("ctx_search", "ctx_read", "ctx_reduce", "brief_get", "brief_propose")
"""The built-in tools a loop's model gets (`agents.tools.BuiltinTools`); `ctx_status` is
for hosts that cannot see the nudges themselves."""

_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class ToolError(UsageError):
    """Raised when a tool cannot be registered: a bad name, a taken name, no signature."""


@dataclass(frozen=True)
class Tool:
    """One tool: what the model is told, and the function that runs a call."""

    name: str
    description: str
    parameters: dict[str, Any]
    """The JSON schema of the arguments object."""
    function: Callable[..., Any]
    """Takes the arguments as keywords; returns the text (or awaits it)."""
    arguments: type[BaseModel]
    """The arguments, checked against the parameters' types before the function runs."""

    def to_openai(self) -> dict[str, Any]:
        """The `tools` entry of a Chat Completions request."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class Toolbox:
    """The tools of one loop, by name, in the order they were added."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def __repr__(self) -> str:
        return f"<Toolbox {', '.join(self._tools)}>"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def add(self, function: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool:
        """Offer `function` to the model as a tool (sync or async, returning text).

        :param name: the tool's name; the function's own by default.
        :param description: what the model is told; the docstring by default.
        :raises ToolError: for a name a provider refuses, or one already taken.
        """
        name = name or function.__name__
        if not 1 <= len(name) <= 64 or not set(name) <= _NAME_CHARS:
            raise ToolError(f"tool name {name!r} must be 1 to 64 of the characters a-z A-Z 0-9 _ -")
        if name in self._tools:
            raise ToolError(f"there is a tool named {name!r} already")
        model = _arguments_model(name, function)
        tool = Tool(
            name=name,
            description=description or inspect.getdoc(function) or name,
            parameters=_schema(model),
            function=function,
            arguments=model,
        )
        self._tools[name] = tool
        return tool

    def add_builtins(self, bodies: BuiltinTools, names: Iterable[str] = LOOP_BUILTINS) -> None:
        """Offer the built-in tools `names` (the brief and the agent's own context)."""
        for name in names:
            self.add(getattr(bodies, name), name=name)

    def to_openai(self) -> list[dict[str, Any]]:
        """The `tools` of a Chat Completions request."""
        return [tool.to_openai() for tool in self._tools.values()]

    async def call(self, name: str, arguments: str) -> tuple[str, bool]:
        """Run one call the model made; returns the result's text and whether it failed.

        Never raises for anything the model sent: a bad call is a failed result.
        """
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return f"error: there is no tool named {name!r}; the tools are: {known}", True
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"error: the arguments of {name} are not valid JSON ({exc}); send one JSON object", True
        if not isinstance(parsed, Mapping):
            return f"error: the arguments of {name} must be a JSON object, got {shown(parsed)}", True
        try:
            checked = tool.arguments.model_validate(dict(parsed))
            result = tool.function(**{field: getattr(checked, field) for field in type(checked).model_fields})
            if inspect.isawaitable(result):
                result = await result
        except ValidationError as exc:
            return f"error: bad arguments for {name}: {describe_validation_error(exc, show_input=True)}", True
        except (CtxbusError, ValueError) as exc:
            return f"error: {exc}", True
        except Exception as exc:  # a user's tool failed: the model hears of it, the loop goes on
            log.warning("tool %s raised", name, exc_info=True)
            return f"error: {name} failed: {type(exc).__name__}: {exc}", True
        return str(result), False


def _arguments_model(name: str, function: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of `function`'s parameters (annotations evaluated where the
    function was written), refusing arguments it does not declare.

    :raises ToolError: for `*args`/`**kwargs`, or a signature pydantic cannot model.
    """
    try:
        signature = inspect.signature(function, eval_str=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolError(f"cannot read the signature of tool {name!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolError(f"tool {name!r} takes *{parameter.name}: a tool's parameters must each be named")
        annotation = Any if parameter.annotation is parameter.empty else parameter.annotation
        fields[parameter.name] = (annotation, ... if parameter.default is parameter.empty else parameter.default)
    try:
        return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # pydantic's schema errors have no common base
        raise ToolError(f"cannot make a schema of tool {name!r}'s parameters: {exc}") from exc


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of the arguments, without pydantic's titles."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema
