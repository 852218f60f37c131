"""The OpenAI Agents SDK adapter's implementation: see `ctxbus.agents.adapters.openai_agents`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

from agents import FunctionTool, RunContextWrapper, TResponseInputItem
from agents.memory import SessionSettings
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.run_config import CallModelData, ModelInputData
from openai.types.responses import (
    EasyInputMessageParam,
    ResponseFunctionToolCallParam,
    ResponseOutputMessageParam,
    ResponseOutputTextParam,
)
from openai.types.responses.response_input_param import FunctionCallOutput

from ctxbus.agents.adapters._builtins import builtin_toolbox
from ctxbus.agents.context import Composition
from ctxbus.agents.loop import LOOP_BUILTINS, Toolbox
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import PROPOSE_DEADLINE
from ctxbus.schemas import UsageError

__all__ = ["CtxbusSession", "ctxbus_tools", "to_openai_agents"]

_SKIPPED: Final = frozenset({"reasoning"})
"""Item types the session leaves out: a composed prompt (Chat Completions shaped) has no
place for a model's reasoning items, and they are the provider's to keep."""


class CtxbusSession:
    """An OpenAI Agents SDK `Session` backed by a ctxbus `Agent`'s context.

    :param agent: an open agent (`Agent.open`); the session never closes it.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.session_id: str = agent.id
        self.composition: Composition | None = None
        """The latest prompt the filter sent, as ctxbus composed it (its report counts the tokens)."""
        self._names: dict[str, str] = {}
        """Tool names by call id, until their output comes (an output carries only the call id)."""

    def __repr__(self) -> str:
        return f"<CtxbusSession of {self.agent!r}>"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The agent's composed history (`Agent.compose()`, without its system message), the
        latest `limit` items of it at most; an output whose call is cut off is left out with it."""
        _system, items = to_openai_agents(self.agent.compose().to_openai())
        if limit is None:
            return items
        latest = items[-limit:] if limit > 0 else []
        calls = {_mapping(item).get("call_id") for item in latest if _kind(_mapping(item)) == "function_call"}
        return [
            item
            for item in latest
            if _kind(_mapping(item)) != "function_call_output" or _mapping(item).get("call_id") in calls
        ]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Record what the Runner adds: user input, the model's messages with their function
        calls (one assistant turn), each call's output (`Agent.tool_result`, where the nudges act).

        :raises UsageError: for an item the context cannot hold (a hosted tool's call, a
            handoff, ...), naming it; nothing of the batch is recorded then.
        """
        batch = _mappings(items)
        for item in batch:
            kind = _kind(item)
            if kind not in ("message", "function_call", "function_call_output") and kind not in _SKIPPED:
                raise UsageError(
                    f"a ctxbus session records messages, function calls and their outputs; "
                    f"it cannot hold a {kind!r} item (nothing of this batch was recorded)"
                )
        agent = self.agent
        text: str | None = None
        calls: list[dict[str, str]] = []

        def turn() -> None:
            nonlocal text, calls
            if text is not None or calls:
                agent.assistant(text or "", tool_calls=calls)
            text, calls = None, []

        for item in batch:
            kind = _kind(item)
            if kind == "function_call":
                call_id, name = str(item["call_id"]), str(item["name"])
                self._names[call_id] = name
                calls.append({"id": call_id, "name": name, "arguments": str(item.get("arguments") or "")})
                continue
            if kind == "message" and item.get("role") == "assistant" and not calls:
                turn()
                text = _text(item.get("content"))
                continue
            turn()
            if kind == "function_call_output":
                call_id = str(item.get("call_id") or "")
                name = self._names.pop(call_id, "") or self._name(call_id)
                await agent.tool_result(name, _text(item.get("output")), call_id=call_id)
            elif kind == "message" and item.get("role") == "user":
                agent.user(_text(item.get("content")))
            elif kind == "message" and item.get("role") == "assistant":
                text = _text(item.get("content"))
            elif kind == "message":  # a system or developer message: ctxbus has one, the context's own
                agent.context.add("system", _text(item.get("content")))
        turn()
        agent.context.flush()

    async def pop_item(self) -> TResponseInputItem | None:
        """:raises UsageError: always: the context is append-only (see the module's docstring)."""
        raise UsageError(
            f"agent {self.agent.id!r}'s context is append-only: a recorded item is never taken back "
            "(release tool output with ctx_reduce instead)"
        )

    async def clear_session(self) -> None:
        """Keep the context: it is the agent's store (see the module's docstring)."""

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """`RunConfig.call_model_input_filter`: each model call of a run is sent the agent's
        composition (its system message as the instructions) instead of the Runner's list.

        :raises UsageError: if the Runner's newest item (the input, or a tool's output) is
            not in the composition: the run was not given this session (`session=`).
        """
        composition = self.agent.compose()
        system, items = to_openai_agents(composition.to_openai())
        if _missing(data.model_data.input, items):
            raise UsageError(
                f"the Runner's newest item never reached agent {self.agent.id!r}'s context: run it with "
                "this CtxbusSession as its session (the filter sends what the session recorded)"
            )
        self.composition = composition
        return ModelInputData(input=items, instructions=system)

    def _name(self, call_id: str) -> str:
        """The tool a call recorded before this session (a restart) called, from the context."""
        for message in reversed(self.agent.context.messages()):
            name = next((c.name for c in message.tool_calls if c.id == call_id), None)
            if name is not None:
                return name
        return ""


def to_openai_agents(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[TResponseInputItem]]:
    """Chat Completions messages (`Composition.to_openai()`) as the SDK's input items: the
    system message apart (the SDK's `instructions`), an assistant turn as its output message
    (with the SDK's placeholder id, as for a Chat Completions answer, so both of its models
    send it as one turn) then one `function_call` item per call, each tool message as a
    `function_call_output`."""
    system: str | None = None
    out: list[TResponseInputItem] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            system = content
        elif role == "user":
            out.append(EasyInputMessageParam(role="user", content=content, type="message"))
        elif role == "assistant":
            if content or not message.get("tool_calls"):  # as the SDK keeps a Chat Completions answer
                text = ResponseOutputTextParam(type="output_text", text=content, annotations=[])
                out.append(
                    ResponseOutputMessageParam(
                        id=FAKE_RESPONSES_ID, type="message", role="assistant", status="completed", content=[text]
                    )
                )
            for call in message.get("tool_calls") or ():
                out.append(
                    ResponseFunctionToolCallParam(
                        type="function_call",
                        call_id=call["id"],
                        name=call["function"]["name"],
                        arguments=call["function"]["arguments"],
                    )
                )
        elif role == "tool":
            out.append(FunctionCallOutput(type="function_call_output", call_id=message["tool_call_id"], output=content))
        else:
            raise ValueError(f"a composed prompt has no {role!r} messages")
    return system, out


def ctxbus_tools(
    agent: Agent, *, names: Iterable[str] = LOOP_BUILTINS, propose_deadline: float = PROPOSE_DEADLINE
) -> list[FunctionTool]:
    """The built-in tools `names` of `agent`, for `Agent(tools=...)` of the SDK."""
    toolbox, functions = builtin_toolbox(agent, names, propose_deadline=propose_deadline)
    return [_function_tool(toolbox, function) for function in functions]


def _function_tool(toolbox: Toolbox, function: Mapping[str, Any]) -> FunctionTool:
    """A built-in tool as the SDK's: its JSON schema as declared (not the SDK's strict
    mode: optional arguments stay optional), each call's raw arguments run through
    `Toolbox.call` (a bad call comes back as a result saying what was wrong)."""
    name: str = function["name"]

    async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
        text, _failed = await toolbox.call(name, arguments)
        return text

    return FunctionTool(
        name=name,
        description=function["description"],
        params_json_schema=dict(function["parameters"]),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def _missing(sent: Sequence[object], composed: Sequence[object]) -> bool:
    """Whether the newest item the Runner would send (a user message or a tool's output) is
    absent from the composed items."""
    if not sent:
        return False
    newest, shown = _mapping(sent[-1]), _mappings(composed)
    if _kind(newest) == "function_call_output":
        return newest.get("call_id") not in {item.get("call_id") for item in shown}
    if _kind(newest) == "message" and newest.get("role") == "user":
        text = _text(newest.get("content"))
        return not any(text in _text(item.get("content")) for item in shown if item.get("role") == "user")
    return False


def _mapping(item: object) -> Mapping[str, Any]:
    return cast(Mapping[str, Any], item)


def _mappings(items: Iterable[object]) -> list[Mapping[str, Any]]:
    return [_mapping(item) for item in items]


def _kind(item: Mapping[str, Any]) -> str:
    """An item's type; an easy input message (`{"role", "content"}`) has none."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _text(content: object) -> str:
    """The text of a message's content or an output: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            value = part.get("text") if part.get("text") is not None else part.get("refusal")
            if isinstance(value, str):
                parts.append(value)
    return "\n".join(parts)
