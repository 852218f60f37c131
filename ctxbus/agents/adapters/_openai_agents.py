"""The OpenAI Agents SDK adapter's implementation: see `ctxbus.agents.adapters.openai_agents`."""

from __future__ import annotations

import re
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

_TAG: Final = re.compile(r"^§\d+§ ?")
"""The tag a composed message opens with."""
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
        self._early: list[str] = []
        """User inputs the filter recorded before the Runner added them (a streamed run adds
        its input after the first model call's filter), to skip once `add_items` brings them."""

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
            computer or shell call, ...), naming it; nothing of the batch is recorded then.
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
                said = _text(item.get("content"))
                if self._early and self._early[0] == said:
                    self._early.pop(0)  # recorded by the filter already
                else:
                    agent.user(said)
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

        A streamed run adds its input to the session only after its first model call's
        filter: input not yet recorded is recorded here (and skipped when it comes).

        :raises UsageError: if what the Runner added never reached the session (a tool's
            output, or input this filter recorded ahead): the run was not given this
            session (`session=`).
        """
        sent = data.model_data.input
        composition = self.agent.compose()
        system, items = to_openai_agents(composition.to_openai())
        unrecorded = _unrecorded_input(sent, items)
        if self._early or _output_missing(sent, items):
            self._early.clear()  # said once: a run given the session next goes through
            raise UsageError(
                f"what the Runner added never reached agent {self.agent.id!r}'s context: run it with "
                "this CtxbusSession as its session (the filter sends what the session recorded)"
            )
        if unrecorded:
            for said in unrecorded:
                self.agent.user(said)
            self.agent.context.flush()
            self._early.extend(unrecorded)
            composition = self.agent.compose()
            system, items = to_openai_agents(composition.to_openai())
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
    """The built-in tools `names` of `agent` (all six, `ctx_status` too: `ctxbus.agents.tools.BUILTIN_TOOLS`),
    for the SDK's `Agent(tools=...)`."""
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


def _output_missing(sent: Sequence[object], composed: Sequence[object]) -> bool:
    """Whether the newest item the Runner would send is a tool's output absent from the
    composed items."""
    newest = _mapping(sent[-1]) if sent else {}
    if _kind(newest) != "function_call_output":
        return False
    return newest.get("call_id") not in {_mapping(item).get("call_id") for item in composed}


def _unrecorded_input(sent: Sequence[object], composed: Sequence[object]) -> list[str]:
    """The texts of the user messages ending the Runner's input that the composition does
    not show since its last assistant turn (a recorded user message is shown tagged)."""
    shown: list[str] = []
    for item in reversed(_mappings(composed)):
        if item.get("role") == "assistant" or _kind(item) in ("function_call", "function_call_output"):
            break
        if item.get("role") == "user":
            shown.append(_TAG.sub("", _text(item.get("content")), count=1))
    unrecorded: list[str] = []
    for item in reversed(_mappings(sent)):
        if _kind(item) != "message" or item.get("role") != "user":
            break
        said = _text(item.get("content"))
        if said in shown:
            break
        unrecorded.insert(0, said)
    return unrecorded


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
